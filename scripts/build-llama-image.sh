#!/usr/bin/env bash
# Build the llama-server CPU image locally: FROM a Debian 12 base made with debootstrap (no registry
# is reachable), with the host-built binary copied in. Prints the image id on its last line.
# Usage: build-llama-image.sh CACHE_DIR BINARY IMAGE_TAG BASE_TAG
set -euo pipefail
cache="$1" binary="$2" tag="$3" base="$4"

if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  mirror="${mirror:-$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)}"
  rootfs="$(mktemp -d "${TMPDIR:-/tmp}/rootfs.XXXXXX")"
  trap 'rm -rf "$rootfs"' EXIT
  echo "debootstrap bookworm from $mirror" >&2
  debootstrap --variant=minbase --include=libgomp1 bookworm "$rootfs" "$mirror" >&2
  tar -C "$rootfs" -c . | docker import - "$base" >&2
fi

context="$(mktemp -d "${TMPDIR:-/tmp}/llama-image.XXXXXX")"
cp "$binary" "$context/llama-server"
cat >"$context/Dockerfile" <<DOCKERFILE
FROM $base
COPY llama-server /app/llama-server
ENV LLAMA_ARG_HOST=0.0.0.0
EXPOSE 8080
LABEL org.opencontainers.image.title="llama-server b11312 (CPU, portable)" \
      toolcall-matrix.binary-sha256="$(sha256sum "$binary" | cut -d' ' -f1)"
ENTRYPOINT ["/app/llama-server"]
DOCKERFILE
docker build -q -t "$tag" "$context" >&2
rm -rf "$context"
docker image inspect --format '{{.Id}}' "$tag"
