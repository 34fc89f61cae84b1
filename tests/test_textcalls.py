"""Call extraction from text: every accepted shape, and what is not a call attempt."""

from __future__ import annotations

import pytest

from orchestrator.core.textcalls import extract_text_calls

ARGS = {"name": "api-1"}

SHAPES = [
    ('{"name": "pod_status", "arguments": {"name": "api-1"}}', "bare"),
    ('{"name": "pod_status", "parameters": {"name": "api-1"}}', "parameters key"),
    ('{"name": "pod_status", "arguments": "{\\"name\\": \\"api-1\\"}"}', "arguments as JSON string"),
    ('{"function": {"name": "pod_status", "arguments": {"name": "api-1"}}}', "function wrapper"),
    ('{"type": "function", "function": {"name": "pod_status", "arguments": "{\\"name\\": \\"api-1\\"}"}}', "openai"),
    ('{"tool": "pod_status", "args": {"name": "api-1"}}', "tool/args"),
    ('{"tool_call": {"name": "pod_status", "arguments": {"name": "api-1"}}}', "tool_call wrapper"),
    ('{"tool_calls": [{"name": "pod_status", "arguments": {"name": "api-1"}}]}', "tool_calls list"),
    ('[{"name": "pod_status", "arguments": {"name": "api-1"}}]', "list"),
    ('```json\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n```', "fenced json"),
    ('Sure:\n```\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n```\nDone.', "fenced, no lang, prose around"),
    ('<tool_call>\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n</tool_call>', "qwen tags"),
    ('I will check. {"name": "pod_status", "arguments": {"name": "api-1"}} Let me know.', "embedded in prose"),
]


@pytest.mark.parametrize(("text", "label"), SHAPES, ids=[s[1] for s in SHAPES])
def test_accepted_shapes(text: str, label: str) -> None:
    parse = extract_text_calls(text)
    assert parse.ok, label
    assert [(c.name, c.arguments) for c in parse.calls] == [("pod_status", ARGS)]


def test_several_tag_blocks_give_several_calls() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>'
    )
    parse = extract_text_calls(text)
    assert [c.name for c in parse.calls] == ["a", "b"]
    assert parse.failure is None


def test_list_of_two_calls() -> None:
    parse = extract_text_calls('[{"name": "a", "arguments": {}}, {"tool": "b", "args": {}}]')
    assert [c.name for c in parse.calls] == ["a", "b"]


@pytest.mark.parametrize(
    "text",
    [
        "I would call the function pod_status, using a tool_call, if I could.",
        "The answer is 42.",
        '```python\ndef f():\n    return {"name": x}\n```',
        'The record is {"name": "Alice", "age": 3}.',
        "",
        "   ",
    ],
)
def test_not_a_call_attempt(text: str) -> None:
    parse = extract_text_calls(text)
    assert not parse.attempted
    assert parse.calls == []


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        ('```json\n{"name": "pod_status", "arguments": {"name": "api', "parse:malformed_json"),
        ('{"name": "pod_status", "arguments": {"name": "api-1"}', "parse:malformed_json"),
        ('<tool_call>\n{"name": "pod_status", "arguments": {"na', "parse:tag_body"),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", ', "parse:tag_body"),
        ('{"name": "pod_status", "arguments": "{name: api-1}"}', "parse:arguments_not_json"),
        ("<tool_call>hello</tool_call>", "parse:tag_body"),
    ],
)
def test_failed_attempts_are_unparseable(text: str, failure: str) -> None:
    parse = extract_text_calls(text)
    assert parse.attempted
    assert parse.failure == failure
    assert not parse.ok
