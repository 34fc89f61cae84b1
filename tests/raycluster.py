"""A real Ray cluster on loopback (127.0.0.2) for the executor's tests: a head node (no CPUs: nothing of a run
lands on it) and worker nodes, each its own `ray start --block` process group, so one can be killed as a node dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
# Every node's address: a loopback address that is not 127.0.0.1, which Ray replaces by the address the host
# routes out by (services.resolve_ip_for_localhost); 127.0.0.2 it keeps, so the cluster's traffic stays on `lo`.
NODE_IP = "127.0.0.2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((NODE_IP, 0))
        return int(sock.getsockname()[1])


class LocalRayCluster:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.port = free_port()
        self.address = f"{NODE_IP}:{self.port}"
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, name: str, args: list[str]) -> None:
        log = (self.log_dir / f"ray-{name}.log").open("wb")
        self.nodes[name] = subprocess.Popen(
            [RAY, "start", "--block", f"--node-ip-address={NODE_IP}", f"--node-name={name}", *args],
            stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True,  # a node: one process group
        )  # fmt: skip

    def start_head(self) -> None:
        self._start("head", ["--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false"])
        self.wait_nodes(1)

    def add_worker(self, name: str, resources: dict[str, float]) -> None:
        alive = len(self.alive_nodes())
        self._start(name, [f"--address={self.address}", "--num-cpus=1", f"--resources={json.dumps(resources)}"])
        self.wait_nodes(alive + 1)

    def alive_nodes(self) -> list[str]:
        """Names of the cluster's live nodes, asked of the cluster itself (a separate driver process)."""
        code = (
            f"import ray, json; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps([n['NodeName'] for n in ray.nodes() if n['Alive']]))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
        if done.returncode != 0:
            return []
        return list(json.loads(done.stdout.strip().splitlines()[-1]))

    def wait_nodes(self, count: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.alive_nodes()) >= count:
                return
            time.sleep(1.0)
        raise TimeoutError(f"{count} Ray nodes not alive after {timeout_s}s; logs in {self.log_dir}")

    def kill_node(self, name: str) -> None:
        """The node dies: its process group SIGKILLed (raylet, its workers; not the servers they started, which
        have sessions of their own, as on a host whose Ray died under them)."""
        process = self.nodes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        """Every node stopped (SIGTERM lets `ray start --block` stop what it started), workers first."""
        for name in sorted(self.nodes, key=lambda n: n == "head"):
            process = self.nodes.pop(name)
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
