"""Streamed answers: assembly (core/streams.py), labelling (core/streamclassify.py), the unit table of recorded
streams (tests/data/streams: broken shapes replayed from the stacks' sources, and real captures from llama.cpp
and vLLM CPU under captured/), each labelled the same live, by `orchestrate classify` and by `--reclassify`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.report.reclassify import reclassify
from orchestrator.core.labelling import StreamInput, label_turn
from orchestrator.core.streams import INDEX_COLLISION_FLAG, StreamEvent, assemble
from orchestrator.core.types import Outcome
from orchestrator.runner.store.streamstore import StreamStore, read_streams
from orchestrator.serving.registry import load_stack
from orchestrator.serving.streaming import parse_stream_text
from tests.cliinprocess import orchestrate

DATA = Path(__file__).parent / "data" / "streams"
FIXTURES = sorted(DATA.rglob("*.json"))
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def sse(*payloads: Any, done: bool = True, newline: str = "\n") -> str:
    lines = [f"data: {p if isinstance(p, str) else json.dumps(p)}{newline}{newline}" for p in payloads]
    return "".join(lines) + (f"data: [DONE]{newline}{newline}" if done else "")


def delta(**fields: Any) -> dict[str, Any]:
    finish = fields.pop("finish_reason", None)
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def call_delta(index: int, call_id: str | None = None, name: str | None = None, arguments: Any = "") -> dict:
    function: dict[str, Any] = {"arguments": arguments}
    if name:
        function["name"] = name
    item: dict[str, Any] = {"index": index, "function": function}
    if call_id:
        item.update(id=call_id, type="function")
    return delta(tool_calls=[item])


def label(text: str, *, stack: str = "vllm", mode: str = "native", tools: list | None = None, **kw: Any):
    spec = load_stack(stack)
    api = "ollama" if spec.api == "ollama" else "openai"
    stream = StreamInput(parse_stream_text(text, api), api, kw.pop("cut", None))
    return label_turn(**spec.signatures(), mode=mode, tools=WEATHER if tools is None else tools, http_status=200,
                      stream=stream, **kw)


def test_a_call_split_over_deltas_is_assembled_by_index() -> None:
    text = sse(
        delta(role="assistant", content=None),
        call_delta(0, "c1", "get_weather", ""),
        call_delta(0, arguments='{"ci'),
        call_delta(0, arguments='ty": "Paris"}'),
        delta(finish_reason="tool_calls"),
    )
    verdict = label(text)
    assert verdict.outcome is Outcome.VALID_CALL
    assert [(c.name, c.arguments, c.id) for c in verdict.calls] == [("get_weather", {"city": "Paris"}, "c1")]
    assert verdict.stream_facts["call_indexes"] == [0]
    assert verdict.finish_reason == "tool_calls"


def test_two_parallel_calls_keep_their_own_indexes_and_ids() -> None:
    text = sse(
        call_delta(0, "a", "get_weather", '{"city": "Paris"}'),
        call_delta(1, "b", "get_weather", '{"city": "Oslo"}'),
        delta(finish_reason="tool_calls"),
    )
    verdict = label(text)
    assert verdict.outcome is Outcome.VALID_CALL
    assert [c.id for c in verdict.calls] == ["a", "b"]
    assert verdict.stream_facts["call_indexes"] == [0, 1]


def test_two_ids_under_one_index_are_a_collision_not_a_model_failure() -> None:
    text = sse(
        call_delta(0, "a", "get_weather", '{"city": "Paris"}'),
        call_delta(0, "b", "get_weather", '{"city": "Oslo"}'),
        delta(finish_reason="tool_calls"),
    )
    verdict = label(text)
    assert verdict.outcome is Outcome.UNPARSEABLE_TEXT
    assert verdict.detail == INDEX_COLLISION_FLAG
    assert INDEX_COLLISION_FLAG in verdict.flags


def test_lost_brace_and_null_arguments() -> None:
    lost = sse(call_delta(0, "a", "get_weather", '{"city": "Paris"'), delta(finish_reason="tool_calls"))
    assert (label(lost).outcome, label(lost).detail) == (Outcome.UNPARSEABLE_TEXT, "parse:arguments_not_json")
    null = sse(call_delta(0, "a", "get_weather", None), delta(finish_reason="tool_calls"))
    verdict = label(null)
    assert (verdict.outcome, verdict.detail) == (Outcome.HALLUCINATED_CALL, "schema:missing_required")
    assert "stream:null_arguments" in verdict.flags


def test_finish_tool_calls_without_calls_is_empty_and_named() -> None:
    verdict = label(sse(delta(role="assistant"), delta(finish_reason="tool_calls")))
    assert (verdict.outcome, verdict.detail) == (Outcome.NON_RESPONSE, "finish:tool_calls_empty")
    assert not verdict.retryable  # a 2xx answer, however empty, is final


def test_content_and_reasoning_are_kept_apart() -> None:
    text = sse(delta(reasoning_content="think "), delta(reasoning_content="more"), delta(content="It is sunny."),
               delta(finish_reason="stop"))
    assembly = assemble(parse_stream_text(text, "openai"), "openai")
    message = assembly.body["choices"][0]["message"]
    assert message["content"] == "It is sunny." and message["reasoning_content"] == "think more"
    assert label(text).outcome is Outcome.NO_CALL_PROSE


def test_crlf_lines_and_ping_comments_are_read_like_lf() -> None:
    plain = sse(delta(content="Hel"), delta(content="lo"), delta(finish_reason="stop"))
    crlf = sse(delta(content="Hel"), ": ping", delta(content="lo"), delta(finish_reason="stop"), newline="\r\n")
    crlf = crlf.replace("data: : ping", ": ping")
    a, b = (assemble(parse_stream_text(t, "openai"), "openai") for t in (plain, crlf))
    assert a.body == b.body and b.n_comments == 1 and b.terminated


def test_no_terminator_and_a_cut_are_truncated_and_retried_only_without_output() -> None:
    partial = sse(call_delta(0, "a", "get_weather", '{"city": "Pa'), done=False)
    verdict = label(partial)
    assert (verdict.outcome, verdict.detail) == (Outcome.NON_RESPONSE, "transport:stream_truncated")
    assert not verdict.retryable and verdict.raw_tool_calls  # it had output: final, kept, never executed
    assert verdict.calls == []
    nothing = label(sse(delta(role="assistant"), done=False))
    assert nothing.retryable
    stalled = label(sse(delta(content="Hi"), done=False), cut="stalled")
    assert stalled.detail == "transport:stream_stalled"


def test_a_named_error_event_carries_the_parser_failure_as_the_models_turn() -> None:
    error = {"error": {"code": 500, "message": "The model produced output that does not match the expected format",
                       "type": "server_error"}}
    text = sse(delta(content="{"), done=False) + f"event: error\ndata: {json.dumps(error)}\n\n"
    verdict = label(text, stack="llamacpp")
    assert (verdict.outcome, verdict.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:server_rejected_output")
    other = sse(delta(content="x"), done=False) + 'event: error\ndata: {"error": {"code": 500, "message": "boom"}}\n\n'
    verdict = label(other, stack="llamacpp")
    assert (verdict.outcome, verdict.detail, verdict.retryable) == (Outcome.NON_RESPONSE, "stream:error_event", False)


def test_ollama_ndjson_until_done() -> None:
    lines = [
        {"message": {"role": "assistant", "content": ""}, "done": False},
        {"message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Lima"}}}]},
         "done": False},
        {"message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop", "eval_count": 9},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    verdict = label(text, stack="ollama")
    assert verdict.outcome is Outcome.VALID_CALL and verdict.calls[0].arguments == {"city": "Lima"}
    cut = label("".join(json.dumps(line) + "\n" for line in lines[:2]), stack="ollama")
    assert cut.detail == "transport:stream_truncated"


@pytest.mark.parametrize(
    ("body", "detail", "flag"),
    [
        ("", "transport:stream_truncated", None),  # no terminator: the stream did not end as streams end
        ("garbage \x00 {{{", "transport:stream_truncated", None),
        ("data: {not json\n\n", "transport:stream_truncated", "stream:bad_event"),
        ("data: [1, 2]\n\ndata: [DONE]\n\n", "empty:no_content", "stream:bad_event"),
        ("event: error\n\n", "stream:error_event", "stream:error_event"),  # a named error event, no data
        ("data: " + "[" * 5000 + "\n\ndata: [DONE]\n\n", "empty:no_content", "stream:bad_event"),
        ('data: {"choices": [{"delta": {"tool_calls": [7]}}]}\n\n', "transport:stream_truncated", "stream:bad_event"),
        ('data: {"choices":[{"text":"Hi"}]}\n\n', "transport:stream_truncated", None),  # a completion chunk, cut
    ],
)
def test_malformed_streams_get_one_outcome(body: str, detail: str, flag: str | None) -> None:
    verdict = label(body)
    assert (verdict.outcome, verdict.detail) == (Outcome.NON_RESPONSE, detail)
    assert flag is None or flag in verdict.flags


def test_an_error_field_that_is_null_is_no_error() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}], "error": None}
    verdict = label("data: " + json.dumps(chunk) + "\n\ndata: [DONE]\n\n")
    assert (verdict.outcome, verdict.raw_content) == (Outcome.NO_CALL_PROSE, "Hi")
    line = {"message": {"role": "assistant", "content": "Hi"}, "done": True, "error": None}
    assert label(json.dumps(line) + "\n", stack="ollama").outcome is Outcome.NO_CALL_PROSE


def test_a_refusal_after_model_output_is_a_cut_answer_not_a_refusal() -> None:
    early = label('event: error\ndata: {"error": {"code": 400, "message": "bad tool_choice"}}\n\n')
    assert early.outcome is Outcome.REJECTED_REQUEST
    late = label(sse(delta(content="Par"), delta(content="is"), done=False)
                 + 'event: error\ndata: {"error": {"code": 400, "message": "context exceeded"}}\n\n')
    assert (late.outcome, late.detail, late.retryable) == (Outcome.NON_RESPONSE, "stream:error_event", False)
    assert late.raw_content == "Paris"


def _fixture(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_the_unit_table_has_enough_recorded_streams() -> None:
    fixtures = [_fixture(p) for p in FIXTURES]
    assert len(fixtures) >= 20
    captured = {f["stack"] for f in fixtures if "captured" in f["source"]}
    assert {"llamacpp", "vllm"} <= captured, "real captures from both CPU stacks"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_recorded_stream_labels_and_reclassify_agree(path: Path, tmp_path: Path) -> None:
    fixture = _fixture(path)
    spec = load_stack(fixture["stack"])
    events = parse_stream_text(fixture["body"], fixture["api"])
    live = label_turn(
        **spec.signatures(),
        mode=fixture["mode"],
        tools=fixture["tools"],
        http_status=fixture.get("http_status", 200),
        stream=StreamInput(events, fixture["api"]),
    )
    assert {"outcome": live.outcome.value, "detail": live.detail} == fixture["expected"]
    # Offline: the side file as the runner writes it, then --reclassify.
    store = StreamStore(tmp_path)
    key = {"cell_id": "c", "seed": "s", "seed_attempt": 0, "sample": 0, "turn": 0, "attempt": 0}
    ref = store.append("c", {"key": key, "api": fixture["api"], "cut": None, "events": [e.to_list() for e in events]})
    store.close()
    turn = {**key, "stack": fixture["stack"], "tools_mode": fixture["mode"], "http_status": 200, "stream": True,
            "stream_ref": ref, "outcome": "valid_call", "detail": None, "flags": []}
    again = reclassify([turn], {"c": {"stack": fixture["stack"], "tools": {"x": fixture["tools"]}, "suites": ["x"]}},
                       load_stack, streams=read_streams(tmp_path))[0]
    assert {"outcome": again["outcome"], "detail": again["detail"]} == fixture["expected"]
    if "plain_body" in fixture:  # a real capture: the same request without streaming
        plain = label_turn(**spec.signatures(), mode=fixture["mode"], tools=fixture["tools"], http_status=200,
                           body=fixture["plain_body"])
        assert {"outcome": plain.outcome.value, "detail": plain.detail} == fixture["expected_plain"]


def test_stored_event_lists_survive_malformed_entries() -> None:
    assert StreamEvent.from_list([0.5, "event", "", "x"]) == StreamEvent(kind="event", data="x", t=0.5)
    odd = StreamEvent.from_list({"not": "a list"})
    assert odd.kind == "comment"
    assert StreamEvent.from_list([True, "weird", 3, 4]).kind == "comment"


def test_classify_cli_reads_streams_and_never_tracebacks(tmp_path: Path) -> None:
    good = sse(call_delta(0, "a", "get_weather", '{"city": "Paris"}'), delta(finish_reason="tool_calls"))
    rows = [
        {"id": 1, "stack": "vllm", "mode": "native", "tools": WEATHER, "http_status": 200, "stream": True,
         "body": good},
        {"id": 2, "stack": "vllm", "mode": "native", "tools": WEATHER, "http_status": 200, "stream": True,
         "body": "data: {\"choices\": [{\"delta\": {\"content\": \"\\ud800\"}}]}\n\n\x00\x01"},
        {"id": 3, "stack": "vllm", "mode": "native", "tools": WEATHER, "http_status": 400, "stream": True,
         "body": {"error": {"message": "bad", "code": 400}}},
        {"id": 4, "stack": "ollama", "mode": "native", "tools": WEATHER, "http_status": 200, "stream": True,
         "body": "{\"done\": tru\n", "tool_choice": "required"},
    ]
    path = tmp_path / "exchanges.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = orchestrate("classify", str(path))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o["outcome"], o["detail"]) for o in out] == [
        ("valid_call", None),
        ("non_response", "transport:stream_truncated"),
        ("rejected_request", "refused:http_400"),
        ("non_response", "transport:stream_truncated"),
    ]
