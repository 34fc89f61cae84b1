"""One server of a matrix plan over its life: resolved from the matrix, started, restarted when it dies,
stopped. Every start is recorded (`launches`), and every way a start can fail becomes `LaunchFailed`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from orchestrator.core.classify import error_message
from orchestrator.core.redact import expand_env
from orchestrator.runner.config.matrix import Matrix, ModelEntry, ServerPlan
from orchestrator.runner.store.runstore import now
from orchestrator.runner.turn import tracing
from orchestrator.serving.assets import resolve_model
from orchestrator.serving.build import server_config
from orchestrator.serving.handle import LaunchError, ServerHandle
from orchestrator.serving.launchers import auth_headers, start_server
from orchestrator.serving.readiness import probe_body
from orchestrator.serving.serverconfig import ModelRef, ServerConfig
from orchestrator.serving.stackspec import StackSpec

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class LaunchFailed(Exception):
    """A server (or a model on it) could not be made ready; the cells it would serve are marked."""

    def __init__(self, error: str, *, log_tail: str | None = None, command: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.log_tail = log_tail
        self.command = command

    @property
    def summary(self) -> str:
        return self.error.splitlines()[0] if self.error else "(no message)"


def model_ref_for(stack: str, entry: ModelEntry, spec: StackSpec) -> ModelRef:
    """The model of `entry` as stack `stack` (resolved: `spec`) serves it."""
    source = entry.sources[stack]
    if source.asset:
        resolved = resolve_model(spec, source.asset, progress=lambda _m: None)
        return resolved.model_copy(update={"name": entry.name})
    if source.path:
        return ModelRef(name=entry.name, path=source.path, digest=entry.digest, quantization=entry.quantization)
    if source.hub:
        return ModelRef(
            name=entry.name, path=source.hub, local=False, digest=entry.digest, quantization=entry.quantization
        )
    return ModelRef(name=source.tag or entry.name, quantization=entry.quantization, digest=entry.digest)


def launch_config(matrix: Matrix, plan: ServerPlan) -> ServerConfig:
    """The server's resolved config (provisioning cached assets); any failure is a LaunchFailed."""
    stack = plan.stack
    try:
        model = model_ref_for(stack.stack, plan.models[0], stack.spec)
        return server_config(
            stack.spec,
            stack=stack.stack,
            tool_config=stack.resolved_tool_config,
            launcher=stack.launcher,
            model=model.name,
            model_ref=model,
            host=stack.host,
            base_url=stack.url,
            binary=stack.binary,
            image=stack.image,
            network=stack.network,
            ctx=stack.ctx,
            extra_args=[expand_env(arg) for arg in stack.extra_args],  # `${NAME}`: from the environment
            ready_timeout_s=matrix.timeouts.ready_s,
            gpu_count=stack.gpus,
            progress=lambda _m: None,
        )
    except Exception as exc:  # missing asset, bad path, failed build: the cells are marked, the sweep goes on
        raise LaunchFailed(f"{plan.server_id}: cannot resolve the server: {type(exc).__name__}: {exc}") from exc


class ServerSession:
    def __init__(self, config: ServerConfig, run_id: str, log_dir: Path, *, label: str | None = None) -> None:
        self.config = config
        self.run_id = run_id
        self.log_dir = log_dir
        self.label = label or f"{config.stack}-{config.tool_config}"  # the stack config's label in the matrix
        self._handle: ServerHandle | None = None
        self.launches: list[dict[str, Any]] = []
        self.span: Span | None = None  # the running start's `launch` span (tracing on), parent of the seeds it serves

    @property
    def handle(self) -> ServerHandle:
        if self._handle is None:
            raise RuntimeError("the server is not started")
        return self._handle

    @property
    def ready_s(self) -> float:
        return (self._handle.ready_s or 0.0) if self._handle else 0.0

    def alive(self) -> bool:
        return self._handle is not None and self._handle.alive()

    def start(self, reason: str) -> ServerHandle:
        """(Re)start the server; the previous one, dead or not, is removed first. Recorded either way."""
        self.stop()
        launch: dict[str, Any] = {"reason": reason, "started": now()}
        self.launches.append(launch)
        self.span = tracing.start_launch(self.config, self.run_id, reason, self.label)
        begun = time.monotonic()
        try:
            self._handle = start_server(self.config, self.run_id, log_dir=self.log_dir)
        except LaunchError as exc:
            launch.update(ok=False, error=str(exc).splitlines()[0], start_s=round(time.monotonic() - begun, 3))
            tracing.launch_update(self.span, launch, end=True)
            self.span = None
            raise LaunchFailed(str(exc), log_tail=exc.log_tail, command=exc.command) from exc
        ready_s = self._handle.ready_s or 0.0
        # start_s: spawn (with the version query) up to the first readiness poll; ready_s: from there to ready
        # (llama.cpp loads the model then: /health answers 503 until it is in).
        start_s = round(max(0.0, time.monotonic() - begun - ready_s), 3)
        launch.update(ok=True, start_s=start_s, ready_s=self._handle.ready_s, server=self._handle.describe())
        tracing.launch_update(self.span, launch)
        return self._handle

    def ensure_alive(self, reason: str) -> ServerHandle:
        """The live server, restarted (and recorded) when it has died."""
        return self.handle if self.alive() else self.start(reason)

    def stop(self) -> None:
        if self._handle is not None:
            begun = time.monotonic()
            self._handle.stop()
            self._handle = None
            if self.launches:  # the start just torn down: how long its teardown took
                self.launches[-1]["teardown_s"] = round(time.monotonic() - begun, 3)
                tracing.launch_update(self.span, self.launches[-1], end=True)
            self.span = None

    def prepare_model(self, config: ServerConfig, timeout_s: float, spec: StackSpec) -> None:
        """Make the model available where the stack (`spec`, the run's resolved definition) needs it (Ollama
        pulls); a failed pull is LaunchFailed with the pull's own error, so a later 404 is never mistaken for a
        refusal."""
        if spec.pull is None:
            return
        url = self.handle.base_url + spec.pull.path
        try:
            reply = httpx.post(
                url, json=probe_body(spec.pull, config.model.name), headers=auth_headers(spec), timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            raise LaunchFailed(f"pull {config.model.name}: {type(exc).__name__}: {exc}") from exc
        try:
            body: Any = reply.json()
        except ValueError:
            body = reply.text
        message = error_message(body) if isinstance(body, (dict, str)) else ""
        failed = reply.status_code != 200 or (isinstance(body, dict) and "error" in body)
        if failed:
            raise LaunchFailed(f"pull {config.model.name}: HTTP {reply.status_code}: {message or body}")
