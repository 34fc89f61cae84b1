#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama.cpp vendored in the llama-cpp-python sdist.
# Portable (GGML_NATIVE=OFF) so a cached binary runs on any x86-64 host of the same libc.
# Cached under $CACHE keyed by version + flags: an existing binary is never rebuilt.
# Usage: build-llama-server.sh CACHE_DIR   (prints the binary path on its last line)
set -euo pipefail

LCP_VERSION="0.3.36"          # llama-cpp-python sdist that vendors llama.cpp
LLAMA_COMMIT="0c1e57098"      # vendored llama.cpp commit = build b11312
LLAMA_BUILD_NUMBER="11312"
FLAGS_KEY="portable-static-v1"

cache="${1:?usage: build-llama-server.sh CACHE_DIR}"
dest="$cache/llama-server/b${LLAMA_BUILD_NUMBER}-${FLAGS_KEY}"
bin="$dest/llama-server"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "downloading llama-cpp-python==$LCP_VERSION sdist" >&2
python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LCP_VERSION" -d "$work" >&2
tar -C "$work" -xzf "$work"/llama_cpp_python-"$LCP_VERSION".tar.gz
src="$work/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"

echo "configuring llama.cpp b$LLAMA_BUILD_NUMBER" >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_COMMIT="$LLAMA_COMMIT" -DLLAMA_BUILD_NUMBER="$LLAMA_BUILD_NUMBER" >&2
echo "building llama-server (about 13 minutes on 2 cores)" >&2
cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2

mkdir -p "$dest.tmp"
cp "$work/build/bin/llama-server" "$dest.tmp/llama-server"
"$dest.tmp/llama-server" --version >"$dest.tmp/version.txt" 2>&1 || true
sha256sum "$dest.tmp/llama-server" | cut -d' ' -f1 >"$dest.tmp/sha256.txt"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "$bin"
