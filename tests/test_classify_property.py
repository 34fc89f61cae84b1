"""Property: arbitrary statuses, bodies, contents and tool calls map to exactly one outcome, never raising."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.classify import classify, tools_by_name
from orchestrator.core.textcalls import extract_text_calls
from orchestrator.core.types import Outcome, ToolsMode, TransportError
from orchestrator.serving.registry import load_stack, stack_names
from tests import bodies as b

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
json_value = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=15,
)
# Text that often contains call-ish structure.
fragments = st.sampled_from(
    [
        '{"name": ',
        '"pod_status"',
        '"arguments": ',
        "{",
        "}",
        "[",
        "]",
        "<tool_call>",
        "</tool_call>",
        "```json\n",
        "```",
        '"tool_calls": ',
        '"function": ',
        ", ",
        '"x"',
        "1",
        "null",
        "prose ",
        '"',
        "\\",
    ]
)
call_text = st.lists(fragments | st.text(max_size=8), max_size=25).map("".join)
raw_tool_call = (
    st.fixed_dictionaries(
        {
            "function": st.fixed_dictionaries(
                {"name": st.text(max_size=12) | st.just("pod_status"), "arguments": json_value | call_text}
            )
        }
    )
    | json_value
)
reasoning = st.none() | st.text(max_size=10) | json_value
message = st.fixed_dictionaries(
    {
        "role": st.just("assistant"),
        "content": st.none() | call_text | json_value,
        "tool_calls": st.none() | st.lists(raw_tool_call, max_size=3) | json_value,
    },
    optional={"reasoning_content": reasoning, "reasoning": reasoning, "thinking": reasoning},
)
finish_reason = st.none() | st.sampled_from(["stop", "length", "tool_calls"]) | json_value
openai_body = st.fixed_dictionaries(
    {
        "choices": st.lists(
            st.fixed_dictionaries({"message": message | json_value}, optional={"finish_reason": finish_reason}),
            max_size=2,
        )
    }
)
ollama_body = st.fixed_dictionaries(
    {"message": message, "done": st.booleans()}, optional={"done_reason": finish_reason}
)
# Error bodies, some carrying a stack's parser-failure or context-overflow text followed by arbitrary output.
error_text = st.sampled_from(
    [
        "Failed to parse input at pos 0: ",
        "The model produced output that does not match the expected peg-native format",
        "error parsing tool call: raw='",
        "exceeds the available context size",
        "tools param requires --jinja flag",
        "Loading model",
    ]
).flatmap(lambda prefix: call_text.map(lambda tail: prefix + tail))
error_body = st.fixed_dictionaries(
    {"error": error_text | st.fixed_dictionaries({"message": error_text}, optional={"type": json_value})}
)
body = openai_body | ollama_body | error_body | json_value | call_text
status = st.none() | st.sampled_from([200, 201, 400, 404, 422, 429, 500, 502, 503]) | st.integers(100, 599)
KNOWN_FLAGS = {"truncated:max_tokens", "constraint:violated", "finish:tool_calls_empty"}
tools = st.just(b.TOOLS) | st.lists(json_value, max_size=3)
error = st.none() | st.builds(
    TransportError, kind=st.sampled_from(["timeout", "connection", "protocol"]), message=st.text(max_size=10)
)


@settings(max_examples=600, deadline=None)
@given(
    stack=st.sampled_from(stack_names()),
    mode=st.sampled_from(list(ToolsMode)),
    tools=tools,
    status=status,
    body=body,
    error=error,
)
def test_any_exchange_maps_to_exactly_one_outcome(
    stack: str, mode: ToolsMode, tools: Any, status: Any, body: Any, error: TransportError | None
) -> None:
    spec = load_stack(stack)
    verdict = classify(
        refusals=spec.refusals,
        parser_failures=spec.parser_failures,
        mode=mode,
        tools=tools,
        http_status=status,
        body=body,
        transport_error=error,
    )
    if verdict.outcome is Outcome.VALID_CALL:
        assert verdict.calls and verdict.detail is None
        assert {call.name for call in verdict.calls} <= set(tools_by_name(tools))
    if verdict.outcome in (Outcome.REJECTED_REQUEST, Outcome.NON_RESPONSE):
        assert not verdict.calls
    # A retry only when no model output arrived: never for an answer, a refusal or a parser failure.
    if verdict.retryable:
        assert verdict.outcome is Outcome.NON_RESPONSE
    if error is None and status is not None and 200 <= status < 300:
        assert not verdict.retryable
    if "truncated:max_tokens" in verdict.flags:
        assert verdict.finish_reason == "length"
    assert set(verdict.flags) <= KNOWN_FLAGS and len(set(verdict.flags)) == len(verdict.flags)


@settings(max_examples=600, deadline=None)
@given(text=call_text)
def test_text_extraction_never_raises(text: str) -> None:
    parse = extract_text_calls(text)
    assert parse.attempted or (not parse.calls and parse.failure is None)
