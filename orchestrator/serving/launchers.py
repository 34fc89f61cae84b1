"""Where a server runs: a Docker container, a local process, or an existing URL. One interface.

`start_server` starts, waits for readiness and returns a handle usable as a context manager. A start
or readiness failure (or Ctrl-C / SIGTERM during the wait) tears down before re-raising, and the error
carries the log tail and the exact command to reproduce by hand. Everything started is labelled
(containers) or recorded by PID (processes) so `orchestrate cleanup` can remove what a crash left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.core.redact import redact_argv, scrub
from orchestrator.serving.assets import cache_root
from orchestrator.serving.dockerhandle import DockerHandle
from orchestrator.serving.handle import (
    LABEL_MANAGED,
    LABEL_RUN,
    LABEL_SERVER,
    AttachedHandle,
    ContainerFilters,
    LaunchError,
    ServerHandle,
    check_run_id,
    free_port,
    pid_dir,
    scrub_file,
)
from orchestrator.serving.readiness import ReadinessTimeout, ServerDied, wait_ready
from orchestrator.serving.serverconfig import ServerConfig, launch_command, reproduce_command, server_argv
from orchestrator.serving.stackspec import StackSpec, render_args


class ProcessHandle(ServerHandle):
    """A local server process in its own process group, logging to a file, recorded by PID."""

    def __init__(self, spec: StackSpec, config: ServerConfig, run_id: str, log_dir: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.launch = launch_command(spec, config, bind_host="127.0.0.1", port=self.port, in_container=False)
        self.argv, self.env, self.secrets = self.launch.argv, self.launch.env, self.launch.secrets
        self.command = self.launch.reproduce()  # what is recorded (command, argv, env, the log) holds no secret
        self.version_output = _local_version(spec, config)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{config.server_id}-{self.port}.log"
        # Never through a link: the log folder may be a run's (runner/store/runpaths.py guards the folder).
        self._log = open(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW), "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            start_new_session=True,  # own process group: killed as one
        )
        self.pid_file = pid_dir() / f"{self.process.pid}.json"
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(
            json.dumps({"pid": self.process.pid, "argv": self.launch.shown_argv, "run_id": run_id})
        )
        self.config = config

    def alive(self) -> bool:
        return self.process.poll() is None

    def logs(self, tail: int = 40) -> str:
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return scrub("\n".join(lines[-tail:]), self.secrets)

    def describe(self) -> dict[str, Any]:
        return {
            "launcher": "process",
            "base_url": self.base_url,
            "argv": self.launch.shown_argv,
            "env": self.launch.shown_env,
            "pid": self.process.pid,
            "binary": self.config.binary,
            "python": self.config.python,
            "binary_version": self.version_output,
            "log_path": str(self.log_path),
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
        self._log.close()
        self.pid_file.unlink(missing_ok=True)
        scrub_file(self.log_path, self.secrets)  # a server that printed a secret (its args, a header) in its log


def _local_version(spec: StackSpec, config: ServerConfig) -> str | None:
    """The binary's own version line (llama-server --version prints to stderr)."""
    if spec.launch is None or not spec.launch.version_command:
        return None
    argv = render_args(spec.launch.version_command, {"binary": config.binary or "", "python": config.python or ""})
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return next((line for line in lines if "version" in line.lower()), lines[-1] if lines else None)


def auth_headers(spec: StackSpec) -> dict[str, str]:
    if spec.api_key_env and os.environ.get(spec.api_key_env):
        return {"Authorization": f"Bearer {os.environ[spec.api_key_env]}"}
    return {}


def start_server(config: ServerConfig, run_id: str, log_dir: Path | None = None) -> ServerHandle:
    """Start (or attach), wait until ready, return the handle. Failures tear down first."""
    spec = config.stack_spec()
    try:
        handle = _create_handle(spec, config, run_id, log_dir)
    except Exception as exc:  # missing binary, image not found, engine API error: a launch failure, never a crash
        raise LaunchError(
            f"{config.server_id}: could not start: {type(exc).__name__}: {exc}",
            command=_intended_command(spec, config),
            log_tail=f"{type(exc).__name__}: {exc}",
        ) from exc
    try:
        handle.ready_s = wait_ready(handle, spec, timeout_s=config.ready_timeout_s, headers=auth_headers(spec))
    except (ServerDied, ReadinessTimeout) as exc:
        tail = handle.logs(40)
        handle.stop()
        raise LaunchError(
            f"{config.server_id}: {exc.args[0].splitlines()[0]}", command=handle.command, log_tail=tail
        ) from exc
    except BaseException:
        handle.stop()  # Ctrl-C, SIGTERM or a bug during the wait: leave nothing running
        raise
    return handle


def _create_handle(spec: StackSpec, config: ServerConfig, run_id: str, log_dir: Path | None) -> ServerHandle:
    if config.launcher == "attach":
        if not config.base_url:
            raise ValueError("the attach launcher needs a base_url")
        return AttachedHandle(config.base_url)
    if config.launcher == "process":
        return ProcessHandle(spec, config, run_id, log_dir or cache_root() / "logs")
    return DockerHandle(spec, config, run_id)


def _intended_command(spec: StackSpec, config: ServerConfig) -> str:
    """What would have run, for a launch that failed before a handle existed."""
    try:
        in_container = config.launcher == "docker"
        argv = server_argv(spec, config, bind_host="127.0.0.1", port=0, in_container=in_container)
        image = f"docker run {config.image or spec.images[config.host].reference} " if in_container else ""
        secrets = spec.launch.options.secret_options if spec.launch else []
        return image + reproduce_command(redact_argv(argv, secrets) or [], {})  # unchecked: the bind may be what failed
    except Exception as exc:  # the config itself may be what is broken
        return f"(no command: {type(exc).__name__}: {exc})"


@contextlib.contextmanager
def running_server(config: ServerConfig, run_id: str, log_dir: Path | None = None) -> Iterator[ServerHandle]:
    handle = start_server(config, run_id, log_dir)
    try:
        yield handle
    finally:
        handle.stop()


def install_termination_handler() -> None:
    """Turn SIGTERM into SystemExit so context managers tear servers down as on Ctrl-C.

    A run started with `&` from a non-interactive shell inherits SIGINT ignored, so `kill -INT` would do
    nothing; restore Python's Ctrl-C behaviour so SIGINT stops such a run as it stops a foreground one.
    """

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def cleanup(run_id: str) -> list[str]:
    """Remove the containers and processes run `run_id` left behind (by label / recorded PID). An empty or
    malformed id is a RunIdError, never "every run": that is `cleanup_all_runs`, asked for by name."""
    return _remove_leftovers(check_run_id(run_id))


def cleanup_all_runs() -> list[str]:
    """Remove the containers and processes every run of this product left behind."""
    return _remove_leftovers(None)


def _remove_leftovers(run_id: str | None) -> list[str]:
    """What `run_id` left (None: every run), by label / recorded PID."""
    removed: list[str] = []
    for record_path in sorted(pid_dir().glob("*.json")) if pid_dir().is_dir() else []:
        try:
            record = json.loads(record_path.read_text())
        except ValueError:
            record_path.unlink(missing_ok=True)
            continue
        if run_id is not None and record.get("run_id") != run_id:
            continue
        pid = int(record["pid"])
        if _process_matches(pid, record.get("argv") or []):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            removed.append(f"process {pid}: {' '.join(record['argv'][:3])}")
        record_path.unlink(missing_ok=True)
    import docker  # imported here: the pure layers and `report` never need Docker

    try:
        client = docker.from_env()
    except docker.errors.DockerException:
        return removed  # no engine: nothing of ours can be running there
    labels = [f"{LABEL_MANAGED}=true"] + ([f"{LABEL_RUN}={run_id}"] if run_id is not None else [])
    filters: ContainerFilters = {"label": labels}
    for container in client.containers.list(all=True, filters=filters):
        container.remove(force=True)
        removed.append(f"container {container.short_id} ({container.labels.get(LABEL_SERVER)})")
    return removed


def _process_matches(pid: int, argv: list[str]) -> bool:
    """True when `pid` is alive and still runs the recorded command (PIDs get reused).

    A script started through its shebang shows the interpreter first, so the recorded program may be
    the first or the second entry of /proc/PID/cmdline.
    """
    try:
        parts = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and argv[0] in [part.decode(errors="replace") for part in parts[:2]]
