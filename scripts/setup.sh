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
.venv/bin/pip install --quiet -e '.[test]'
# The browser the report's tests open pages in (driven by playwright, which downloads no browser of its own).
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [[ "${TOOLCALL_MATRIX_NO_DOCKER:-0}" != "1" ]]; then
  bash scripts/start-dockerd.sh
fi
.venv/bin/orchestrate assets
