"""What every launcher hands back: a ServerHandle (alive, logs, describe, stop), the error a failed start raises,
and what they share (free loopback ports, PID records, container labels, logs scrubbed of secrets). An attached
server is the trivial handle; a process is serving/launchers.py's, a container serving/dockerhandle.py's."""

from __future__ import annotations

import contextlib
import re
import socket
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from orchestrator.core.redact import scrub_bytes
from orchestrator.serving.assets import cache_root

LABEL_MANAGED = "toolcall-matrix.managed"
LABEL_RUN = "toolcall-matrix.run-id"
LABEL_SERVER = "toolcall-matrix.server"
ContainerFilters = dict[str, str | list[str] | bool]  # what the Docker SDK's containers.list takes
# A run id is its run directory's name: `<UTC time>-<matrix name>-<6 hex>` (runner/run/runs.py), `-ablation` after
# an ablation's, `probe-<pid>` for a probe; matrix names are letters, digits and _ . - (matrixentries.LABEL).
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+=@-]{0,254}")


class RunIdError(ValueError):
    """An empty or malformed run id where one run's servers are meant: never read as "every run"."""


def check_run_id(value: str) -> str:
    """`value` when it can be a run id; RunIdError otherwise. An empty id (a script's unset variable) must never
    select every run's servers and containers, nor a glob character every run's shards."""
    if not RUN_ID.fullmatch(value) or ".." in value:
        raise RunIdError(
            f"run id {value[:80]!r} is not a run id: a run id is its run directory's name, e.g. "
            "20261203T131653Z-cpu-87d008 (letters, digits and _ . : + = @ -, starting with a letter or digit)"
        )
    return value


class LaunchError(RuntimeError):
    """A server failed to start or become ready; carries its log tail and the command to reproduce."""

    def __init__(self, message: str, *, command: str, log_tail: str) -> None:
        super().__init__(f"{message}\nreproduce with:\n  {command}\nlog tail:\n{log_tail}")
        self.command = command
        self.log_tail = log_tail


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_dir() -> Path:
    return cache_root() / "pids"


class ServerHandle(ABC):
    base_url: str
    command: str = ""
    ready_s: float | None = None

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def logs(self, tail: int = 40) -> str: ...

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class AttachedHandle(ServerHandle):
    """An already running server: nothing to start or stop."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.command = f"(attached to {self.base_url})"

    def alive(self) -> bool:
        return True

    def logs(self, tail: int = 40) -> str:
        return "(attached server: logs are not available)"

    def describe(self) -> dict[str, Any]:
        return {"launcher": "attach", "base_url": self.base_url, "argv": None}

    def stop(self) -> None:
        return None


def scrub_file(path: Path, secrets: set[str]) -> None:
    """Rewrite a log without the secret values it holds (nothing is rewritten when it holds none)."""
    if not secrets:
        return
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        clean = scrub_bytes(data, secrets)
        if clean != data:
            path.write_bytes(clean)
