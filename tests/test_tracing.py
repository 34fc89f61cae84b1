"""OpenTelemetry traces (runner/turn/tracing.py): off without an OTLP endpoint (nothing imported, nothing installed);
with one, spans are POSTed to it over OTLP http/protobuf; and on a real matrix run against llama-server, one
`turn` span per turn record, under the `seed` span of its seed, under the `launch` span of its server."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

from orchestrator.core.types import Outcome, SeedEnd, TokenCounts, ToolsMode, TurnRecord
from orchestrator.runner.config.matrixfile import load_matrix
from orchestrator.runner.run.runs import start_run
from orchestrator.runner.sweep.seedpool import map_seeds
from orchestrator.runner.sweep.sweep import Sweep
from orchestrator.runner.turn import tracing
from orchestrator.serving.serverconfig import ModelRef, ServerConfig

CONFIG = ServerConfig(stack="llamacpp", tool_config="jinja", launcher="process", model=ModelRef(name="m"))
OTEL_VARS = (*tracing.ENDPOINT_VARS, "OTEL_SDK_DISABLED")


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    tracing.disable()
    yield
    tracing.disable()


@pytest.fixture
def spans(no_endpoint: None) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    return exporter


def seed_ctx(seed_id: str) -> Any:
    """What a seed span reads of a SeedContext."""
    return SimpleNamespace(
        run_id="r", cell_id="c",
        task=SimpleNamespace(seed_id=seed_id, seed_attempt=0, sample=0, suite=SimpleNamespace(suite="ops"),
                             mode=ToolsMode.NATIVE),
        server=SimpleNamespace(model="m", spec=SimpleNamespace(name="llamacpp"), stack_label="llamacpp-jinja",
                               stack_version="b1", parser="jinja"),
        policy=SimpleNamespace(stream=False), product=SimpleNamespace(channel=None, without=None),
    )  # fmt: skip


def record(seed_id: str, turn: int, **extra: Any) -> TurnRecord:
    return TurnRecord(
        run_id="r", cell_id="c", seed=seed_id, turn=turn, model="m", stack="llamacpp", stack_config="llamacpp-jinja",
        stack_version="b1", tools_mode=ToolsMode.NATIVE, hint=False, http_status=200, parser="jinja",
        parse_path="server", outcome=Outcome.VALID_CALL, latency_s=0.01,
        tokens=TokenCounts(prompt=5, completion=7), **extra,
    )  # fmt: skip


def fake_loop(ctx: Any, write: Any, heartbeat: Any = None) -> TurnRecord:
    """Two turns, each sent (request_started) 50 ms before its record is written; the second ends the seed."""
    for turn in range(2):
        tracing.request_started()
        time.sleep(0.05)
        last = record(ctx.task.seed_id, turn, end=SeedEnd.TURN_CAP if turn else None)
        write(last)
    return last


# ---- off ----------------------------------------------------------------------------------------------------

OFF_PROBE = """
import json, sys
from orchestrator.runner.sweep import sweep  # the sweep and all it imports: no OpenTelemetry among them
from orchestrator.runner.turn import tracing  # the sweep and all it imports: no OpenTelemetry among them
loop = lambda *a, **k: None
with tracing.exporting():
    tracing.request_started()
    launch = tracing.start_launch(None, "r", "initial", "x")
    tracing.launch_update(launch, {"ok": True}, end=True)
    wrapped = tracing.traced_loop(loop, launch)
print(json.dumps({"enabled": tracing.enabled(), "launch": launch, "same_loop": wrapped is loop,
                  "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


@pytest.mark.slow
def test_without_an_endpoint_nothing_is_installed_and_no_opentelemetry_module_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if k not in OTEL_VARS}
    done = subprocess.run([sys.executable, "-c", OFF_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"enabled": False, "launch": None, "same_loop": True, "otel": []}


def test_off_the_helpers_return_at_once_and_the_loop_is_the_loop_itself(no_endpoint: None) -> None:
    assert tracing.configure_from_env() is False and not tracing.enabled()
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}
    assert tracing.configure_from_env(disabled) is False and not tracing.enabled()
    assert tracing.start_launch(CONFIG, "r", "initial", "llamacpp-jinja") is None
    assert tracing.traced_loop(fake_loop, None) is fake_loop
    written: list[TurnRecord] = []
    final = tracing.traced_loop(fake_loop, None)(seed_ctx("s0"), written.append)
    assert final.end is SeedEnd.TURN_CAP and [r.turn for r in written] == [0, 1]


# ---- parenting across the seed pool (no server) ----------------------------------------------------------------


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_seed_spans_on_pool_threads_are_children_of_the_launch_and_turns_of_their_seed(
    spans: InMemorySpanExporter,
) -> None:
    launch = tracing.start_launch(CONFIG, "r", "initial", "llamacpp-jinja")
    tracing.launch_update(launch, {"ok": True, "start_s": 0.1, "ready_s": 1.5})
    written: list[TurnRecord] = []
    lock = threading.Lock()

    def write(turn: TurnRecord) -> None:
        with lock:
            written.append(turn)

    seeds = ["s0", "s1", "s2"]
    finals = map_seeds(
        lambda s: tracing.traced_loop(fake_loop, launch)(seed_ctx(s), write), seeds, 3, threading.Event()
    )
    tracing.launch_update(launch, {"ok": True, "teardown_s": 0.2}, end=True)
    assert len(finals) == 3
    done = spans.get_finished_spans()
    (launch_span,) = by_name(done, "launch")
    assert dict(launch_span.attributes or {}) == {
        "run_id": "r", "server_id": CONFIG.server_id, "stack": "llamacpp", "tool_config": "jinja",
        "stack_config": "llamacpp-jinja", "launcher": "process", "model": "m", "reason": "initial", "ready": True,
        "start_s": 0.1, "ready_s": 1.5, "teardown_s": 0.2, "stack_version": "b1",
    }  # fmt: skip
    seed_spans = {s.attributes["seed"]: s for s in by_name(done, "seed")}
    assert sorted(seed_spans) == seeds
    for seed in seed_spans.values():
        assert seed.parent is not None and seed.parent.span_id == launch_span.context.span_id
        assert seed.context.trace_id == launch_span.context.trace_id and seed.attributes["end"] == "turn_cap"
    turns = by_name(done, "turn")
    assert len(turns) == len(written) == 6
    for span in turns:
        seed = seed_spans[span.attributes["seed"]]
        assert span.parent is not None and span.parent.span_id == seed.context.span_id
        # It starts at its request (50 ms before the record), not at the record's 10 ms latency.
        assert span.end_time - span.start_time >= 45_000_000
        assert seed.start_time <= span.start_time <= span.end_time <= seed.end_time


def test_a_failed_launch_ends_its_span_as_an_error(spans: InMemorySpanExporter) -> None:
    launch = tracing.start_launch(CONFIG, "r", "initial", "llamacpp-jinja")
    tracing.launch_update(launch, {"ok": False, "error": "FileNotFoundError: llama-server"}, end=True)
    (span,) = spans.get_finished_spans()
    assert span.attributes["ready"] is False and span.attributes["error"] == "FileNotFoundError: llama-server"
    assert span.status.status_code.name == "ERROR"


def test_turn_attributes_are_the_records_fields_in_otel_types() -> None:
    turn = record("s0", 1, detail="x", flags=["cache:shared"], end=SeedEnd.LOOP, finish_reason="stop")
    attributes = tracing.turn_attributes(turn)
    assert attributes["outcome"] == "valid_call" and type(attributes["outcome"]) is str
    assert (
        attributes["tools_mode"] == "native" and attributes["end"] == "loop" and attributes["flags"] == ["cache:shared"]
    )
    assert (attributes["tokens.prompt"], attributes["tokens.completion"], attributes["http_status"]) == (5, 7, 200)
    assert (attributes["detail"], attributes["latency_s"], attributes["finish_reason"]) == ("x", 0.01, "stop")
    assert "error.type" not in attributes and "prompted_by" not in attributes  # None is left out
    assert all(isinstance(v, (str, bool, int, float, list)) for v in attributes.values())


# ---- OTLP export to a loopback collector ------------------------------------------------------------------------


class Collector(BaseHTTPRequestHandler):
    posts: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).posts.append((self.path, self.headers.get("Content-Type") or "", body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.mark.server
def test_with_an_endpoint_spans_are_posted_over_otlp_http(monkeypatch: pytest.MonkeyPatch, no_endpoint: None) -> None:
    Collector.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        with tracing.exporting():  # what Sweep.run does: set up from the environment, flushed on the way out
            assert tracing.enabled()
            launch = tracing.start_launch(CONFIG, "r", "initial", "llamacpp-jinja")
            tracing.traced_loop(fake_loop, launch)(seed_ctx("s0"), lambda _turn: None)
            tracing.launch_update(launch, {"ok": True}, end=True)
    finally:
        tracing.disable()
        server.shutdown()
    assert Collector.posts, "nothing reached the collector"
    names: list[str] = []
    for path, content_type, body in Collector.posts:
        assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
            assert service == "toolcall-matrix"
            names += [span.name for scope in resource_spans.scope_spans for span in scope.spans]
    assert sorted(names) == ["launch", "seed", "turn", "turn"]


# ---- a real run against llama-server ----------------------------------------------------------------------------

MATRIX = """\
name: tracing
stacks:
  - {stack: llamacpp, tool_config: jinja, launcher: process, ctx: 2048}
models:
  - name: qwen2.5-coder-0.5b-instruct
    sources: {llamacpp: {asset: qwen2.5-coder-0.5b-instruct}}
modes: [native, constrained]
tasks:
  - {suite: ops, count: 2}
decoding: {temperature: 0.0, max_tokens: 48, seed: 1}
turn_cap: 2
concurrency: 2
bootstrap: {resamples: 200}
"""
RECORD_FIELDS = (
    "cell_id", "seed", "seed_attempt", "turn", "attempt", "stack", "stack_config", "stack_version", "tools_mode",
    "http_status", "parser", "outcome", "detail", "latency_s", "finish_reason", "end",
)  # fmt: skip


KEY = ("cell_id", "seed", "seed_attempt", "turn", "attempt")
FAULTS = Path(__file__).resolve().parent / "faults"


def run_matrix(tmp_path: Path, text: str) -> tuple[int, list[dict[str, Any]]]:
    """The matrix run in this process, as `orchestrate matrix` runs it; its records as written."""
    path = tmp_path / "tracing.yaml"
    path.write_text(text)
    matrix, digest = load_matrix(path)
    store = start_run(matrix, path, digest, tmp_path / "results")
    try:
        executed = Sweep(matrix, store, Console(file=io.StringIO(), width=200)).run()
    finally:
        store.close()
    return executed, [json.loads(line) for line in store.turns_path.read_text().splitlines() if line.strip()]


def check_turns(turns: list[ReadableSpan], seeds: list[ReadableSpan], records: list[dict[str, Any]]) -> None:
    """One turn span per record, under the seed span of the same seed run, carrying the record's fields."""
    assert len(turns) == len(records)
    by_key = {tuple(r[k] for k in KEY): r for r in records}
    spans_by_key = {tuple(s.attributes[k] for k in KEY): s for s in turns}
    assert spans_by_key.keys() == by_key.keys()
    seed_by_id = {s.context.span_id: s for s in seeds}
    for key, span in spans_by_key.items():
        rec = by_key[key]
        seed = seed_by_id[span.parent.span_id] if span.parent else None
        assert seed is not None, key
        assert tuple(seed.attributes[k] for k in KEY[:3]) == key[:3]
        assert seed.start_time <= span.start_time <= span.end_time <= seed.end_time
        expected = {k: rec[k] for k in RECORD_FIELDS if rec.get(k) is not None}
        assert {k: span.attributes.get(k) for k in expected} == expected, key
        assert span.attributes.get("tool_config") == "jinja"  # the record names it only inside stack_config
        assert span.attributes.get("tokens.prompt") == rec["tokens"]["prompt"]
        assert span.attributes.get("tokens.completion") == rec["tokens"]["completion"]
        assert not [k for k in RECORD_FIELDS if rec.get(k) is None and k in span.attributes], key  # None: left out
        # The span covers the request at least: it starts when the request was sent.
        assert (span.end_time - span.start_time) / 1e9 >= rec["latency_s"] - 0.01


@pytest.mark.integration
def test_a_real_run_gives_one_turn_span_per_record_under_its_seed_under_its_launch(
    tmp_path: Path, llama_server_binary: str, spans: InMemorySpanExporter
) -> None:
    executed, records = run_matrix(tmp_path, MATRIX)
    assert executed == 4
    done = spans.get_finished_spans()
    (launch,) = by_name(done, "launch")
    seeds = by_name(done, "seed")
    assert len(seeds) == 4 and len(records) >= 4
    assert launch.attributes["ready"] is True and launch.attributes["stack_config"] == "llamacpp-jinja"
    assert launch.attributes["stack_version"] == records[0]["stack_version"] and launch.attributes["ready_s"] > 0
    for seed in seeds:
        assert seed.parent is not None and seed.parent.span_id == launch.context.span_id
        assert launch.start_time <= seed.start_time <= seed.end_time <= launch.end_time
    finals = {(r["cell_id"], r["seed"]): r["end"] for r in records if r.get("end")}
    assert {(s.attributes["cell_id"], s.attributes["seed"]): s.attributes["end"] for s in seeds} == finals
    check_turns(by_name(done, "turn"), seeds, records)


@pytest.mark.integration
def test_seeds_rerun_after_a_server_death_are_children_of_the_restart(
    tmp_path: Path, llama_server_binary: str, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tests/faults/dying-llama-server: the real binary, SIGKILLed when request 3 of its first launch starts (the
    # probe is 1): mid-seed. The sweep restarts it once and reruns the seeds that died (seed_attempt 1).
    plan = tmp_path / "plan"
    plan.write_text("3\n0\n")
    monkeypatch.setenv("TOOLCALL_FAULT_BINARY", llama_server_binary)
    monkeypatch.setenv("TOOLCALL_FAULT_PLAN", str(plan))
    text = MATRIX.replace("ctx: 2048}", f"ctx: 2048, binary: {FAULTS / 'dying-llama-server'}}}")
    text = text.replace("[native, constrained]", "[constrained]").replace("concurrency: 2", "concurrency: 1")
    _executed, records = run_matrix(tmp_path, text)
    done = spans.get_finished_spans()
    first, restart = sorted(by_name(done, "launch"), key=lambda s: s.start_time)
    assert first.attributes["reason"] == "initial" and str(restart.attributes["reason"]).startswith("restart")
    assert first.end_time <= restart.start_time and restart.attributes["ready"] is True
    seeds = by_name(done, "seed")
    launch_of = {first.context.span_id: 0, restart.context.span_id: 1}
    parents = {
        (s.attributes["seed"], s.attributes["seed_attempt"], s.attributes["end"]): launch_of[s.parent.span_id]
        for s in seeds
        if s.parent is not None
    }
    assert len(parents) == len(seeds)
    died = {key for key in parents if key[2] == "server_died"}
    assert died and all(parents[key] == 0 and key[1] == 0 for key in died)
    reruns = {key for key in parents if key[1] == 1}
    assert {key[0] for key in reruns} == {key[0] for key in died} and all(parents[key] == 1 for key in reruns)
    check_turns(by_name(done, "turn"), seeds, records)
