"""OpenTelemetry traces of a run: a `launch` span per server start (open while that server serves), a `seed` span
per seed run (child of the launch that served it), a `turn` span per turn record written (child of its seed),
carrying the record's fields as attributes.

Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: then spans go to that
collector over OTLP http/protobuf, batched, flushed at the end of each sweep. Off, every helper returns at its
first line and neither the SDK nor the exporter is imported. OpenTelemetry is the `otel` extra: an endpoint set
without it installed is one clear error (`TracingUnavailable`, checked before a run starts), never a silent run
without traces. Tests install their own provider with `enable`.

Seeds run on a thread pool: a seed span names its parent (the launch span) explicitly, and a turn span names its
seed span, so no span depends on which thread happens to run it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from orchestrator.core.types import TurnRecord

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from orchestrator.runner.turn.agent import SeedContext
    from orchestrator.serving.serverconfig import ServerConfig

SERVICE_NAME = "toolcall-matrix"
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# What `configure_from_env` imports: the `otel` extra (pyproject.toml).
SDK_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
Loop = Callable[..., TurnRecord]  # run_seed / run_model_case / run_product_case: (ctx, record, heartbeat=...)

_tracer: Tracer | None = None  # None: tracing is off (the only thing a helper looks at before returning)
_provider: TracerProvider | None = None


@dataclass
class _SeedTrace:
    """The running seed's span context, and when its current request was sent (the next turn span's start)."""

    context: Context
    request_start_ns: int | None = None
    tool_config: str | None = None


_seed: ContextVar[_SeedTrace | None] = ContextVar("toolcall_matrix_seed_trace", default=None)


class TracingUnavailable(RuntimeError):
    """An OTLP endpoint asks for traces, but the `otel` extra is not installed."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an endpoint set, and the SDK not switched off."""
    env = os.environ if environ is None else environ
    if not any(env.get(name) for name in ENDPOINT_VARS):
        return False
    return not (env.get("OTEL_SDK_DISABLED", "").lower() == "true" or env.get("OTEL_TRACES_EXPORTER") == "none")


def check_available(environ: Mapping[str, str] | None = None) -> None:
    """Raise TracingUnavailable when the environment asks for traces and OpenTelemetry is not installed."""
    env = os.environ if environ is None else environ
    if not requested(env):
        return
    try:
        for module in SDK_MODULES:
            importlib.import_module(module)
    except ImportError as exc:
        named = " / ".join(name for name in ENDPOINT_VARS if env.get(name))
        raise TracingUnavailable(
            f"{named} asks for OpenTelemetry traces, but OpenTelemetry is not installed: "
            f"pip install -e '.[otel]' (or unset {named}) ({exc})"
        ) from exc


def enabled() -> bool:
    return _tracer is not None


def enable(provider: TracerProvider) -> None:
    """Send spans to `provider` (tests: an SDK provider with an in-memory exporter); not the global provider."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("orchestrator.runner")


def disable() -> None:
    """Tracing off again; an installed provider is flushed and shut down."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.shutdown()


def configure_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Install the OTLP exporter when an endpoint is set (once per process); True when tracing is on.
    TracingUnavailable when an endpoint is set and the `otel` extra is not installed."""
    if enabled() or not requested(environ):
        return enabled()
    check_available(environ)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint, headers: from the environment
    enable(provider)
    return True


def flush(timeout_s: float = 30.0) -> None:
    if _provider is not None:
        _provider.force_flush(int(timeout_s * 1000))


@contextlib.contextmanager
def exporting() -> Iterator[None]:
    """Around a sweep: tracing set up from the environment, and every span exported before it returns."""
    configure_from_env()
    try:
        yield
    finally:
        flush()


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    """OTel-legal attributes: None dropped, enums as their value, other types as text."""
    legal: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, Enum):
            value = value.value
        if isinstance(value, (list, tuple)):
            value = [str(item) for item in value]
        elif not isinstance(value, (str, bool, int, float)):
            value = str(value)
        legal[key] = value
    return legal


def start_launch(config: ServerConfig, run_id: str, reason: str, label: str) -> Span | None:
    """The span of one server start (the first or a restart); it stays open while that server serves."""
    if _tracer is None:
        return None
    attributes = {
        "run_id": run_id,
        "server_id": config.server_id,
        "stack": config.stack,
        "tool_config": config.tool_config,
        "stack_config": label,
        "launcher": config.launcher,
        "model": config.model.name,
        "reason": reason,
    }
    return _tracer.start_span("launch", attributes=_attributes(attributes))


def launch_update(span: Span | None, launch: dict[str, Any], *, end: bool = False) -> None:
    """The launch record's facts on its span (ready or failed, its timings), and the span ended when asked."""
    if span is None:
        return
    facts = {"ready": launch.get("ok"), "error": launch.get("error"), "pid": (launch.get("server") or {}).get("pid")}
    facts |= {key: launch.get(key) for key in ("start_s", "ready_s", "teardown_s")}
    span.set_attributes(_attributes(facts))
    if launch.get("ok") is False:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, str(launch.get("error") or "launch failed")))
    if end:
        span.end()


def traced_loop(loop: Loop, launch: Span | None, tool_config: str | None = None) -> Loop:
    """The seed loop wrapped in a `seed` span under `launch`, each record it writes followed by a `turn` span
    (`tool_config`: the serving tool configuration, which the record names only inside its stack config label).
    Off: the loop itself, untouched."""
    if _tracer is None:
        return loop
    tracer = _tracer

    def run(ctx: SeedContext, record: Callable[[TurnRecord], None], **kwargs: Any) -> TurnRecord:
        from opentelemetry import trace

        parent = trace.set_span_in_context(launch) if launch is not None else None
        if launch is not None and ctx.server.stack_version:  # what the probe found this server to be
            launch.set_attribute("stack_version", ctx.server.stack_version)
        attributes = seed_attributes(ctx) | _attributes({"tool_config": tool_config})
        with tracer.start_as_current_span("seed", context=parent, attributes=attributes) as span:
            state = _SeedTrace(trace.set_span_in_context(span), tool_config=tool_config)
            token = _seed.set(state)
            try:
                final = loop(ctx, _traced_record(record, state, tracer), **kwargs)
            finally:
                _seed.reset(token)
            span.set_attributes(_attributes({"end": final.end, "task_success": final.task_success}))
            return final

    return run


def seed_attributes(ctx: SeedContext) -> dict[str, Any]:
    values = {
        "run_id": ctx.run_id,
        "cell_id": ctx.cell_id,
        "seed": ctx.task.seed_id,
        "seed_attempt": ctx.task.seed_attempt,
        "sample": ctx.task.sample,
        "suite": ctx.task.suite.suite,
        "model": ctx.server.model,
        "stack": ctx.server.spec.name,
        "stack_config": ctx.server.stack_label,
        "stack_version": ctx.server.stack_version,
        "parser": ctx.server.parser,
        "tools_mode": ctx.task.mode,
        "stream": ctx.policy.stream,
        "channel": ctx.product.channel,
        "without": ctx.product.without,
    }
    return _attributes(values)


def request_started() -> None:
    """Called as a turn's request is sent: that turn's span starts here (else: record time less latency)."""
    if _tracer is None:
        return
    state = _seed.get()
    if state is not None:
        state.request_start_ns = time.time_ns()


def _traced_record(record: Callable[[TurnRecord], None], state: _SeedTrace, tracer: Tracer) -> Callable[..., None]:
    def traced(turn: TurnRecord) -> None:
        record(turn)  # on disk first: a record that could not be written gets no span
        end_ns = time.time_ns()
        start_ns = state.request_start_ns or end_ns - int((turn.latency_s or 0.0) * 1e9)
        state.request_start_ns = None
        attributes = turn_attributes(turn) | _attributes({"tool_config": state.tool_config})
        span = tracer.start_span("turn", context=state.context, attributes=attributes, start_time=start_ns)
        span.end(end_time=end_ns)

    return traced


TURN_FIELDS = (
    "run_id", "cell_id", "seed", "seed_attempt", "sample", "suite", "turn", "attempt", "model", "stack",
    "stack_config", "stack_version", "tools_mode", "hint", "http_status", "parser", "parse_path", "outcome", "detail",
    "latency_s", "finish_reason", "call_format", "prompt_tokens_rendered", "stream", "tool_choice",
    "parallel_tool_calls", "constraint_honoured", "flags", "end", "task_success", "channel", "without", "prompted_by",
)  # fmt: skip


def turn_attributes(turn: TurnRecord) -> dict[str, Any]:
    """A turn record's fields as span attributes (tokens as tokens.prompt / tokens.completion)."""
    values = {name: getattr(turn, name) for name in TURN_FIELDS}
    values |= {"tokens.prompt": turn.tokens.prompt, "tokens.completion": turn.tokens.completion}
    values |= {"error.type": turn.error.type if turn.error else None, "calls": len(turn.calls)}
    return _attributes(values)
