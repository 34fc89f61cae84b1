"""NaN and Infinity in model-written arguments (issue 28, defect 10). JSON has no NaN or Infinity, though Python's
decoder reads them (and reads 1e999 as infinity): such arguments were `valid_call` while the turn record wrote
the value as null. They are no JSON, so no call: `unparseable_text`, with the raw text recorded as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.classify import classify
from orchestrator.core.replyfacts import violates_constraint
from orchestrator.core.types import Classification, Outcome
from tests.cliinprocess import orchestrate

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
NUMBER_TOOLS = [
    {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}},
    }
]
NOT_JSON = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "[1, NaN]", '{"y": Infinity}']


def _native(arguments: Any, tools: Any = TOOLS) -> Classification:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    return classify(refusals=(), mode="native", tools=tools, http_status=200, body=body)


def _text(content: str, tools: Any = TOOLS) -> Classification:
    body = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    return classify(refusals=(), mode="text-tools", tools=tools, http_status=200, body=body)


def _recorded(verdict: Classification) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(verdict.model_dump_json())
    assert not any(call["arguments"].get("x", "") is None for call in record.get("calls") or [])
    return record


@pytest.mark.parametrize("value", NOT_JSON)
def test_native_arguments_holding_nan_or_infinity_are_not_json(value: str) -> None:
    arguments = f'{{"x": {value}}}'
    verdict = _native(arguments)
    assert (verdict.outcome, verdict.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:arguments_not_json")
    assert _recorded(verdict)["raw_tool_calls"][0]["function"]["arguments"] == arguments  # the text as written


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), [1.0, float("nan")]])
def test_arguments_decoded_by_the_reply_holding_nan_are_not_json(value: Any) -> None:
    # Ollama sends arguments as an object; Python's reading of the body accepts NaN there too.
    verdict = _native({"x": value})
    assert (verdict.outcome, verdict.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:arguments_not_json")


@pytest.mark.parametrize("value", NOT_JSON)
@pytest.mark.parametrize(
    "template",
    [
        '{{"name": "f", "arguments": {{"x": {v}}}}}',
        '<tool_call>{{"name": "f", "arguments": {{"x": {v}}}}}</tool_call>',
        'I will call it.\n```json\n{{"name": "f", "arguments": {{"x": {v}}}}}\n```',
    ],
)
def test_text_calls_holding_nan_or_infinity_are_not_calls(template: str, value: str) -> None:
    content = template.format(v=value)
    verdict = _text(content)
    assert verdict.outcome == Outcome.UNPARSEABLE_TEXT, verdict
    assert _recorded(verdict)["raw_content"] == content


def test_other_formats_never_turn_an_out_of_range_number_into_a_valid_call() -> None:
    pythonic = _text("[f(x=1e999)]", NUMBER_TOOLS)  # a Python literal: infinity, which no JSON can write
    assert pythonic.outcome == Outcome.UNPARSEABLE_TEXT and not pythonic.calls
    gemma = _text("<|tool_call>call:f{x:NaN}<tool_call|>", NUMBER_TOOLS)  # a bare word, not a number
    assert (gemma.outcome, gemma.detail) == (Outcome.HALLUCINATED_CALL, "schema:wrong_type")
    assert _recorded(gemma)["calls"][0]["arguments"] == {"x": "NaN"}


@pytest.mark.parametrize("value", ["1.5e3", "-0.0", "1e308", "-2.5", "12345678901234567890123"])
def test_finite_numbers_stay_valid(value: str) -> None:
    for verdict in (
        _native(f'{{"x": {value}}}', NUMBER_TOOLS),
        _text(f'{{"name": "f", "arguments": {{"x": {value}}}}}', NUMBER_TOOLS),
    ):
        assert verdict.outcome == Outcome.VALID_CALL, verdict
        assert _recorded(verdict)["calls"][0]["arguments"]["x"] == json.loads(value)


def test_constrained_content_holding_nan_does_not_conform() -> None:
    assert violates_constraint('{"name": "f", "arguments": {"x": NaN}}', NUMBER_TOOLS)
    assert not violates_constraint('{"name": "f", "arguments": {"x": 1}}', NUMBER_TOOLS)


def test_classify_command_labels_nan_arguments_unparseable(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": NaN}'}}
    body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    exchange = {
        "id": 1,
        "stack": "vllm",
        "mode": "native",
        "tools": NUMBER_TOOLS,
        "http_status": 200,
        "body": body,
        "error": None,
    }
    path = tmp_path / "exchanges.jsonl"
    path.write_text(json.dumps(exchange) + "\n")
    done = orchestrate("classify", str(path))
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert (row["outcome"], row["detail"]) == ("unparseable_text", "parse:arguments_not_json")
