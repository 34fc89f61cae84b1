#!/usr/bin/env bash
# Start a Docker engine for tests if none answers: no bridge network, no iptables (loopback-only tests
# use host networking). Idempotent. Installs Debian's docker.io when dockerd is missing.
set -euo pipefail
if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
log="${TMPDIR:-/tmp}/toolcall-matrix-dockerd.log"
nohup dockerd --bridge=none --iptables=false --ip6tables=false --host unix:///var/run/docker.sock \
  --pidfile /var/run/toolcall-matrix-dockerd.pid >"$log" 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "dockerd started (pid $(cat /var/run/toolcall-matrix-dockerd.pid))" >&2
    exit 0
  fi
  sleep 1
done
echo "dockerd did not come up; last log lines:" >&2
tail -20 "$log" >&2
exit 1
