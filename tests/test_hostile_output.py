"""Hostile model output (issue 14): deep JSON, lone surrogates, huge texts, catastrophic patterns, broken
schemas and broken files each yield one outcome, or one clear error naming what and where; never a crash."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.core.callformats.base import MAX_JSON_CHARS
from orchestrator.core.classify import classify
from orchestrator.core.jsonsafe import TOO_DEEP, json_safe
from orchestrator.core.streamclassify import classify_stream
from orchestrator.core.streams import StreamEvent
from orchestrator.core.toolschemas import schema_problem, tool_schema_problems
from orchestrator.core.types import Classification, Outcome
from orchestrator.serving.streaming import parse_stream_text

SIX = set(Outcome)
PATTERN_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}},
        },
    }
]
DEEP = 100_000


def _body(content: Any = None, tool_calls: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"choices": [{"message": message, "finish_reason": "stop"}]}


def _call(arguments: Any, name: str = "f", call_id: Any = "c1") -> list[dict[str, Any]]:
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]


def _label(body: Any, mode: str = "native", tools: Any = PATTERN_TOOLS, status: int | None = 200) -> Classification:
    verdict = classify(refusals=(), mode=mode, tools=tools, http_status=status, body=body)
    assert verdict.outcome in SIX and (verdict.detail or verdict.outcome == Outcome.VALID_CALL)
    json.loads(verdict.model_dump_json().encode("utf-8"))  # recordable: UTF-8 JSON, whatever the reply held
    return verdict


def _deep_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


# ---------------------------------------------------------------- deep nesting

DEEP_OBJECT = '{"a":' * DEEP + "1" + "}" * DEEP


@pytest.mark.parametrize("mode", ["native", "text-tools"])
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (_body("[" * DEEP + "]" * DEEP), "prose:no_call"),  # a deep list is no call shape
        (_body('{"name": "f", "arguments": ' + DEEP_OBJECT + "}"), "parse:malformed_json"),
        (_body(None, _call(DEEP_OBJECT)), "parse:arguments_not_json"),
        (_body(None, _call(_deep_list(DEEP))), "parse:arguments_too_deep"),
        (_body(None, _call({"a": _deep_list(DEEP)})), "parse:arguments_too_deep"),
        (_body(None, _call("{}", call_id=_deep_list(DEEP))), None),  # a non-string id is no id: a valid call
    ],
)
def test_deep_json_is_one_outcome(mode: str, body: Any, detail: str | None) -> None:
    verdict = _label(body, mode)
    assert verdict.detail == (detail or verdict.detail)
    if detail is None:
        assert verdict.outcome == Outcome.VALID_CALL and verdict.calls[0].id is None


def test_deep_error_body_and_content_parts() -> None:
    refused = _label({"error": {"message": _deep_list(DEEP)}}, status=400)
    assert refused.outcome == Outcome.REJECTED_REQUEST
    assert _label(_body({"parts": _deep_list(DEEP)})).outcome == Outcome.NON_RESPONSE  # no text to read


def test_json_safe_cuts_deep_and_replaces_surrogates() -> None:
    safe = json_safe({"k\ud800": _deep_list(DEEP), "s": "x\udfffy"})
    assert safe["s"] == "x\ufffdy" and "k\ufffd" in safe
    json.dumps(safe, ensure_ascii=False).encode("utf-8")
    assert TOO_DEEP in json.dumps(safe)


# ---------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize("mode", ["native", "text-tools"])
@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        (_body("hello \ud800 world"), Outcome.NO_CALL_PROSE),
        (_body('{"name": "f", "arguments": {"x": "a\ud800"}}'), None),
        (_body(None, _call('{"x": "\ud800"}')), Outcome.HALLUCINATED_CALL),  # raw surrogate in the text
        (_body(None, _call('{"x": "\\udfff"}')), Outcome.HALLUCINATED_CALL),  # escaped: decodes to one
        (_body(None, _call("{}", name="f\ud800", call_id="\udc00")), Outcome.HALLUCINATED_CALL),
    ],
)
def test_lone_surrogates_are_recordable(mode: str, body: Any, outcome: Outcome | None) -> None:
    verdict = _label(body, mode)
    assert outcome is None or verdict.outcome == outcome
    if outcome == Outcome.HALLUCINATED_CALL and verdict.calls and verdict.calls[0].arguments:
        assert verdict.detail == "schema:pattern"


# ---------------------------------------------------------------- size and time bounds

_TIMED = """
import json, sys, time
from orchestrator.core.classify import classify
case = sys.argv[1]
tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties":
         {"x": {"type": "string", "pattern": "^(a+)+$"}}, "patternProperties": {"^(b+)+$": {}},
         "additionalProperties": False}}}]
def called(arguments):
    return {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": json.dumps(arguments)}}]}
if case == "braces":
    message = {"content": '{"' * 3_000_000}  # 6 MB
elif case == "big_args":
    message = called({"x": "a" * 10_000_000})
elif case == "redos_value":
    message = called({"x": "a" * 100_000 + "!"})
else:
    message = called({"b" * 100_000 + "!": 1})
start = time.perf_counter()
body = {"choices": [{"message": message}]}
verdict = classify(refusals=(), mode=sys.argv[2], tools=tools, http_status=200, body=body)
print(json.dumps([verdict.outcome, verdict.detail, time.perf_counter() - start]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "mode", "detail"),
    [
        ("braces", "native", "prose:no_call"),
        ("braces", "text-tools", "prose:no_call"),
        ("big_args", "native", None),  # 10 MB of arguments: validated (a valid call)
        ("redos_value", "native", "schema:pattern"),  # ^(a+)+$: minutes under `re`, linear under RE2
        ("redos_key", "native", "schema:unexpected_property"),  # patternProperties key, additionalProperties
    ],
)
def test_hostile_sizes_finish_under_a_hard_timeout(case: str, mode: str, detail: str | None) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _TIMED, case, mode], capture_output=True, text=True, timeout=20, check=True
    )
    outcome, got, _seconds = json.loads(done.stdout)
    assert got == detail and outcome == ("valid_call" if detail is None else outcome)


def test_json_past_the_size_cap_is_not_decoded() -> None:
    text = json.dumps({"x": "a" * (MAX_JSON_CHARS + 1)})
    assert _label(_body(None, _call(text))).detail == "parse:arguments_not_json"
    start = time.perf_counter()
    verdict = _label(_body('{"name": "f", "arguments": ' + text + "}"), "text-tools")
    assert verdict.outcome == Outcome.UNPARSEABLE_TEXT and time.perf_counter() - start < 20


# ---------------------------------------------------------------- tool schemas (configuration)


@pytest.mark.parametrize(
    ("parameters", "says"),
    [
        ({"type": "frobnicate"}, "at $.type"),
        ({"type": "object", "properties": {"x": {"pattern": "(?=a)"}}}, "not linear-time"),
        ({"type": "object", "properties": {"x": {"pattern": "(a)\\1"}}}, "not linear-time"),
        ({"patternProperties": {"^a": {}}, "unevaluatedProperties": False}, "unevaluatedProperties"),
        ("not a schema", "not a JSON object"),
    ],
)
def test_unusable_schemas_are_named(parameters: Any, says: str) -> None:
    tools = [{"type": "function", "function": {"name": "ok", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "bad", "parameters": parameters}}]
    (problem,) = tool_schema_problems(tools)
    assert problem.startswith("tools[1] ('bad'): parameters") and says in problem
    verdict = _label(_body(None, _call("{}", name="bad")), tools=tools)
    # A non-object `parameters` is read as "no schema" by the classifier; the loaders refuse it (above).
    assert verdict.detail == ("schema:invalid_tool_schema" if isinstance(parameters, dict) else None)


def test_data_named_pattern_is_not_a_pattern() -> None:
    assert schema_problem({"type": "object", "enum": [{"pattern": "(?=a)"}], "default": {"pattern": "("}}) is None


def test_suite_with_an_unusable_schema_is_refused_at_load() -> None:
    import yaml

    from orchestrator.runner.config.resolve import seeds_dir
    from orchestrator.runner.suites.tasks import Suite

    data = yaml.safe_load((seeds_dir() / "ops.yaml").read_text())
    Suite.model_validate(data)  # the real suite loads
    data["tools"][0]["function"]["parameters"] = {"type": "frobnicate"}
    name = data["tools"][0]["function"]["name"]
    with pytest.raises(ValueError, match=rf"tools\[0\] \('{name}'\): parameters is not a valid JSON Schema"):
        Suite.model_validate(data)


# ---------------------------------------------------------------- hostile files on the command line

runner = CliRunner()
GOOD = {"id": 1, "stack": "vllm", "mode": "native", "tools": [], "http_status": 200, "body": _body("hi")}
_BAD_SCHEMA = {**GOOD, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "x"}}}]}
HOSTILE_EXCHANGES = {
    "binary": bytes(range(256)) * 8,
    "latin1": json.dumps({**GOOD, "body": _body("café")}, ensure_ascii=False).encode("latin-1"),
    "torn": (json.dumps(GOOD) + "\n" + json.dumps(GOOD)[:40]).encode(),
    "wrong_type": json.dumps({**GOOD, "tools": "nope"}).encode(),
    "not_object": b"[1, 2]\n",
    "deep": b'{"id": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    "bad_schema": json.dumps(_BAD_SCHEMA).encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_EXCHANGES))
def test_classify_command_names_file_and_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(HOSTILE_EXCHANGES[name])
    result = runner.invoke(app, ["classify", str(path)])
    line = 2 if name == "torn" else 1
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert f"{path.name}:{line}" in result.output.replace("\n", "") and "Traceback" not in result.output


def test_classify_command_writes_hostile_output_as_utf8(tmp_path: Path) -> None:
    rows = [{**GOOD, "id": "\ud800", "body": _body("x\udfff")},
            {**GOOD, "body": _body(None, _call(DEEP_OBJECT))},
            {**GOOD, "stream": True, "body": "data: " + "[" * DEEP + "\n\ndata: [DONE]\n\n"}]
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    result = runner.invoke(app, ["classify", str(path)])
    assert result.exit_code == 0, result.output
    labelled = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["id"] for row in labelled] == ["\ufffd", 1, 1]
    assert labelled[1]["detail"] == "parse:arguments_not_json" and all(r["outcome"] in SIX for r in labelled)


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HOSTILE_TRAJECTORIES = {
    "binary.json": bytes(range(256)) * 8,
    "latin1.json": json.dumps({"messages": [{"role": "assistant", "content": "é"}], "tools": TOOLS},
                              ensure_ascii=False).encode("latin-1"),
    "torn.jsonl": (json.dumps({"role": "assistant", "content": "a"}) + "\n" + '{"role": "assi').encode(),
    "wrong_type.json": json.dumps({"messages": "x", "tools": TOOLS}).encode(),
    "deep.json": b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    "bad_schema.json": json.dumps({"messages": [], "tools": [{"function": {"name": "f", "parameters": {
        "pattern": "(?<=a)"}}}]}).encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TRAJECTORIES))
def test_audit_command_names_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(HOSTILE_TRAJECTORIES[name])
    result = runner.invoke(app, ["audit", "--json", str(path)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    where = f"{name}:2" if name == "torn.jsonl" else name
    assert where in result.output.replace("\n", "") and "Traceback" not in result.output


def test_audit_labels_hostile_turns(tmp_path: Path) -> None:
    messages = [{"role": "assistant", "content": "\ud800", "tool_calls": _call(json.dumps({"x": "a" * 5000 + "!"}))},
                {"role": "assistant", "content": _deep_list(900)}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": messages, "tools": PATTERN_TOOLS}), encoding="utf-8")
    result = runner.invoke(app, ["audit", "--json", "--resamples", "10", str(path)])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)["outcomes"]["naive"]
    assert counts["hallucinated_call"] == 1 and sum(counts.values()) == 2


# ---------------------------------------------------------------- properties

any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)  # surrogates included
leaf = st.none() | st.booleans() | st.integers() | st.floats() | any_text
tree = st.recursive(leaf, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(any_text, kids, max_size=4),
                    max_leaves=25)
deep_tree = st.integers(1, 3000).map(_deep_list)
call_text = st.lists(st.sampled_from(['{"name": "f", "arguments": ', '{"x": ', "[{", "}", "]", '"a', "\\ud800",
                                      "<tool_call>", "[TOOL_CALLS]", "```json\n", "\ud800"]) | any_text,
                     max_size=20).map("".join)
message = st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | call_text | tree | deep_tree,
                                 "tool_calls": st.none() | tree | st.lists(st.fixed_dictionaries({
                                     "id": tree | deep_tree, "function": st.fixed_dictionaries({
                                         "name": any_text | st.just("f"),
                                         "arguments": call_text | tree | deep_tree})}), max_size=3)})
choice = st.fixed_dictionaries({"message": message | tree}, optional={"finish_reason": tree})
reply = st.fixed_dictionaries({"choices": st.lists(choice, max_size=2)})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=reply | tree | deep_tree, mode=st.sampled_from(["native", "text-tools", "raw-template"]),
       status=st.sampled_from([200, 400, 500]) | st.none())
def test_any_reply_is_one_recordable_outcome(body: Any, mode: str, status: int | None) -> None:
    _label(body, mode, status=status)


sse_chunk = st.sampled_from(["data: ", "event: ", ": c", "\n", "\r\n", "\n\n", "[DONE]", '{"choices": [{"delta": ',
                             '{"tool_calls": [{"index": ', "0", "1e400", '"id": "\\ud800"', '"function": {"name": "f"',
                             '"arguments": "{\\"x\\""', "}", "]", ",", '"finish_reason": "stop"', '"error": {}'])
sse_text = st.lists(sse_chunk | any_text, max_size=40).map("".join)
ndjson = st.lists(tree.map(lambda v: json.dumps(v)) | any_text, max_size=6).map("\n".join)


@settings(max_examples=400, deadline=None)
@given(text=sse_text | ndjson | st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
       api=st.sampled_from(["openai", "ollama"]), mode=st.sampled_from(["native", "text-tools"]))
def test_any_stream_is_one_recordable_outcome(text: str, api: str, mode: str) -> None:
    events = parse_stream_text(text, api)  # type: ignore[arg-type]
    verdict = classify_stream(refusals=(), mode=mode, tools=PATTERN_TOOLS, events=events, api=api)  # type: ignore[arg-type]
    assert verdict.outcome in SIX and (verdict.detail or verdict.outcome == Outcome.VALID_CALL)
    json.loads(verdict.model_dump_json().encode("utf-8"))


@settings(max_examples=300, deadline=None)
@given(items=st.lists(tree | st.tuples(tree, tree, tree, tree).map(list), max_size=8))
def test_any_stored_events_are_one_outcome(items: list[Any]) -> None:
    events = [StreamEvent.from_list(item) for item in items]
    verdict = classify_stream(refusals=(), mode="native", tools=PATTERN_TOOLS, events=events, api="openai")
    assert verdict.outcome in SIX and (verdict.detail or verdict.outcome == Outcome.VALID_CALL)
    json.loads(verdict.model_dump_json().encode("utf-8"))
