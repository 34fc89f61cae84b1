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
import socket
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.core.redact import known_secrets, redact_argv, redact_env, scrub, scrub_bytes
from orchestrator.serving.assets import cache_root
from orchestrator.serving.readiness import ReadinessTimeout, ServerDied, wait_ready
from orchestrator.serving.serverconfig import ServerConfig, reproduce_command, server_argv, server_env
from orchestrator.serving.stackspec import Launch, StackSpec, render_args

LABEL_MANAGED = "toolcall-matrix.managed"
LABEL_RUN = "toolcall-matrix.run-id"
LABEL_SERVER = "toolcall-matrix.server"
ContainerFilters = dict[str, str | list[str] | bool]  # what the Docker SDK's containers.list takes


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


class ProcessHandle(ServerHandle):
    """A local server process in its own process group, logging to a file, recorded by PID."""

    def __init__(self, spec: StackSpec, config: ServerConfig, run_id: str, log_dir: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.argv = check_bind(server_argv(spec, config, bind_host="127.0.0.1", port=self.port, in_container=False))
        self.env = server_env(spec, config, bind_host="127.0.0.1", port=self.port)
        # What is recorded (command, argv, env, the log) never holds a secret: values are redacted.
        self.secrets = known_secrets(self.argv, self.env)
        self.command = reproduce_command(redact_argv(self.argv) or [], redact_env(self.env) or {})
        self.version_output = _local_version(spec, config)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{config.server_id}-{self.port}.log"
        self._log = self.log_path.open("wb")
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
            json.dumps({"pid": self.process.pid, "argv": redact_argv(self.argv), "run_id": run_id})
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
            "argv": redact_argv(self.argv),
            "env": redact_env(self.env),
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


def scrub_file(path: Path, secrets: set[str]) -> None:
    """Rewrite a log without the secret values it holds (nothing is rewritten when it holds none)."""
    if not secrets:
        return
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        clean = scrub_bytes(data, secrets)
        if clean != data:
            path.write_bytes(clean)


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


class DockerHandle(ServerHandle):
    """A labelled container started through the Docker SDK; the image digest is read back from the engine."""

    def __init__(self, spec: StackSpec, config: ServerConfig, run_id: str) -> None:
        import docker
        from docker.types import DeviceRequest

        if spec.launch is None:
            raise ValueError(f"stack {spec.name} cannot be launched")
        self.client = docker.from_env()
        image_ref = config.image or spec.images[config.host].reference
        image = self.client.images.get(image_ref)
        self.image_ref = image_ref
        self.image_id = image.id
        self.repo_digests = list(image.attrs.get("RepoDigests") or [])
        if config.network == "host":
            port = free_port()
            bind_host, ports, network_mode = "127.0.0.1", None, "host"
        else:
            port = spec.launch.container_port
            host_port = free_port()
            bind_host, ports, network_mode = "0.0.0.0", {f"{port}/tcp": ("127.0.0.1", host_port)}, None
            self.host_port = host_port
        self.base_url = f"http://127.0.0.1:{port if network_mode == 'host' else host_port}"
        self.argv = check_bind(server_argv(spec, config, bind_host=bind_host, port=port, in_container=True), bind_host)
        self.env = server_env(spec, config, bind_host=bind_host, port=port)
        self.secrets = known_secrets(self.argv, self.env)
        volumes = {}
        if config.model.path and config.model.local:
            source = Path(config.model.path)
            volumes[str(source.parent if spec.model_source == "gguf_file" else source)] = {
                "bind": spec.launch.container_model_dir,
                "mode": "ro",
            }
        self.labels = {LABEL_MANAGED: "true", LABEL_RUN: run_id, LABEL_SERVER: config.server_id}
        publish = f" -p 127.0.0.1:{self.base_url.rsplit(':', 1)[1]}:{port}" if ports else " --network host"
        mounts = "".join(f" -v {src}:{dst['bind']}:ro" for src, dst in volumes.items())
        envs = "".join(f" -e {k}={v}" for k, v in (redact_env(self.env) or {}).items())
        self.command = f"docker run --rm{publish}{mounts}{envs} {image_ref} " + " ".join(redact_argv(self.argv) or [])
        gpus = config.gpu_count or spec.launch.gpu_count  # what this server needs (matrix or stack), not every GPU
        # Ray's GPUs for the group, by id: a count alone gives every container on the host GPUs 0..N-1.
        device = {"device_ids": config.gpu_ids} if config.gpu_ids else {"count": gpus}
        gpu_request = [DeviceRequest(**device, capabilities=[["gpu"]])] if config.host == "gpu" else None
        try:
            self.container = self._run_container(
                image_ref, network_mode, ports, volumes, spec.launch, config, gpu_request
            )
        except BaseException:
            # SIGTERM, Ctrl-C or an engine error between create and start: the container may exist with no
            # handle to stop it, so remove it by this server's labels before going on.
            self._remove_labelled()
            raise

    def _run_container(
        self,
        image_ref: str,
        network_mode: str | None,
        ports: dict[str, Any] | None,
        volumes: dict[str, Any],
        launch: Launch,
        config: ServerConfig,
        gpu_request: list[Any] | None,
    ) -> Any:
        return self.client.containers.run(
            image_ref,
            command=self.argv,
            detach=True,
            labels=self.labels,
            environment=self.env,
            network_mode=network_mode,
            ports=ports,
            volumes=volumes,
            shm_size=launch.shm_size,
            ipc_mode="host" if launch.ipc_host and config.host == "gpu" else None,
            device_requests=gpu_request,
        )

    def _remove_labelled(self) -> None:
        filters: ContainerFilters = {"label": [f"{key}={value}" for key, value in self.labels.items()]}
        try:
            for container in self.client.containers.list(all=True, filters=filters):
                container.remove(force=True)
        except Exception:  # the engine itself failing: `orchestrate cleanup` removes it later by label
            pass

    def alive(self) -> bool:
        try:
            self.container.reload()
        except Exception:
            return False
        return self.container.status in ("created", "running")

    def logs(self, tail: int = 40) -> str:
        try:
            return scrub(self.container.logs(tail=tail).decode(errors="replace"), self.secrets)
        except Exception as exc:
            return f"(logs unavailable: {exc})"

    def describe(self) -> dict[str, Any]:
        return {
            "launcher": "docker",
            "base_url": self.base_url,
            "argv": redact_argv(self.argv),
            "env": redact_env(self.env),
            "image": self.image_ref,
            "image_id": self.image_id,
            "repo_digests": self.repo_digests,
            "container_id": self.container.id,
            "labels": self.labels,
        }

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True)


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


BIND_FLAGS = frozenset({"--host", "--bind", "--listen", "--hostname"})


def check_bind(argv: list[str], bind_host: str = "127.0.0.1") -> list[str]:
    """A server listens where the launcher says (127.0.0.1; 0.0.0.0 only inside a container whose port is
    published on the host's 127.0.0.1): an extra `--host 0.0.0.0` that would override it is refused. A matrix has
    no bind-address setting: a server reachable beyond this machine is never a side effect of extra_args."""
    for index, arg in enumerate(argv):
        flag, _, inline = arg.partition("=")
        if flag not in BIND_FLAGS:
            continue
        value = inline or (argv[index + 1] if index + 1 < len(argv) else "")
        if value != bind_host:
            raise ValueError(
                f"the server would listen on {value!r} ({flag} in its argv), not {bind_host}: "
                "a matrix cannot bind a server beyond loopback (remove it from extra_args)"
            )
    return argv


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
        return image + reproduce_command(redact_argv(argv) or [], {})
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


def cleanup(run_id: str | None = None) -> list[str]:
    """Remove containers and processes a crashed run left behind (by label / recorded PID)."""
    removed: list[str] = []
    for record_path in sorted(pid_dir().glob("*.json")) if pid_dir().is_dir() else []:
        try:
            record = json.loads(record_path.read_text())
        except ValueError:
            record_path.unlink(missing_ok=True)
            continue
        if run_id and record.get("run_id") != run_id:
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
    filters: ContainerFilters = {"label": [f"{LABEL_MANAGED}=true"] + ([f"{LABEL_RUN}={run_id}"] if run_id else [])}
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
