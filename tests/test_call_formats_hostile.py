"""Hostile input: every recogniser returns a result, never an exception, on 10 MB of repeated markers,
100k-deep nesting and unclosed tags.

Linear time is a property of the code, not asserted here (a timing assertion would flake on a loaded
machine): every loop in `orchestrator/core/callformats` advances through the text, each marker is searched
for at most once per position it passes (`scan.MarkerFinder`), no regex has a nested or overlapping
quantifier that can backtrack (possessive quantifiers where two could compete), JSON goes through the C
decoder (RecursionError / MemoryError caught), Python through `ast.parse` under a 256k-character bound, and
the embedded-JSON scan charges its decoding to a budget of 8 x the text's length. Run this file with
``--durations=0`` to see the cost: each 10 MB input takes well under a few seconds.
"""

from __future__ import annotations

import pytest

from orchestrator.core.callformats.base import MAX_CALLS
from orchestrator.core.textcalls import FORMATS, TextCallParse, extract_text_calls

TEN_MB = 10_000_000
DEPTH = 100_000

# Each family's markers, repeated: opening and closing tokens, half-written calls, separators.
MARKERS = {
    "harmony": ["<|message|>", "<|channel|>commentary to=functions.a<|message|>{", "to=functions.a<|message|>"],
    "step3": ["<steptml:invoke name=", '<steptml:invoke name="a"><steptml:parameter name="b">'],
    "deepseek_dsml": ["<｜DSML｜function_calls>", '<｜DSML｜invoke name="a">'],
    "deepseek": ["<｜tool▁call▁begin｜>", "<｜tool▁calls▁begin｜>", "<｜tool_call_begin｜>a<｜tool_sep｜>{"],
    "kimi_k2": [
        "<|tool_call_begin|>",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>a:0<|tool_call_argument_begin|>",
    ],
    "gemma4": ["<|tool_call>", "<|tool_call>call:a{", '<|tool_call>call:a{b:<|"|>', "{a:{"],
    "mistral": ["[TOOL_CALLS]", "[TOOL_CALLS]a{", "[TOOL_CALLS]a[ARGS]", "[TOOL_CALLS] [{"],
    "command_r": ["<|START_ACTION|>", "Action: ```json\n", "Action: ```json\n[{"],
    "granite": ["<|tool_call|>", "<|tool_call|>[{"],
    "minimax": ["<minimax:tool_call>", "<invoke name=", '<invoke name="a"><parameter name="b">'],
    "seed_oss": ["<seed:tool_call>", "<seed:tool_call><function=a>"],
    "qwen3_xml": ["<function=", "<function=a>", "<function=a>\n<parameter=", "<parameter=b>\nx\n</parameter>\n"],
    "glm_xml": ["<tool_call>", "<tool_call>a<arg_key>", "<arg_key>b</arg_key><arg_value>"],
    "functionary": ["<function=a>{", ">>>a\n{", ">>>"],
    "functools": ["functools[", "functools[{"],
    "pythonic": ["[a(x=", "[a(x=1)]\n", "<|python_start|>", "<|tool_call_start|>[a(", "```tool_code\n", "("],
    "json": ['{"name": ', '[{"name": "a", "arguments": {', "{", "[", '{"a":', "```", "```json\n{", '"', "\\"],
}


def test_every_format_has_hostile_markers() -> None:
    assert set(MARKERS) == set(FORMATS)


def _check(parse: TextCallParse) -> None:
    assert isinstance(parse, TextCallParse)
    assert len(parse.calls) <= MAX_CALLS
    assert (parse.call_format is not None) == parse.attempted
    assert not (parse.ok and parse.failure)


def _repeated(marker: str) -> str:
    return marker * (TEN_MB // len(marker))


@pytest.mark.parametrize(
    ("family", "marker"), [(f, m) for f, ms in MARKERS.items() for m in ms], ids=lambda v: repr(v)[:40]
)
def test_ten_megabytes_of_repeated_markers(family: str, marker: str) -> None:
    text = _repeated(marker)
    _check(extract_text_calls(text))
    _check(extract_text_calls(text, call_format=family))


NESTINGS = [
    ("[", "]"),
    ("{", "}"),
    ('{"a": ', "}"),
    ('[{"name": "f", "arguments": ', "}]"),
    ("(", ")"),
    ("[a(x=", ")]"),
    ("<|tool_call>call:a{b:", "}<tool_call|>"),
    ("<function=a>\n<parameter=b>\n", "\n</parameter>\n</function>"),
    ('<invoke name="a"><parameter name="b">', "</parameter></invoke>"),
    ("<tool_call>", "</tool_call>"),
]


@pytest.mark.parametrize(("opening", "closing"), NESTINGS, ids=[n[0][:20] for n in NESTINGS])
@pytest.mark.parametrize("closed", [False, True], ids=["unclosed", "closed"])
def test_deep_nesting(opening: str, closing: str, closed: bool) -> None:
    text = opening * DEPTH + (closing * DEPTH if closed else "")
    _check(extract_text_calls(text))


WRAPPED = [
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>",
    "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
    "[TOOL_CALLS]f[ARGS]",
    "<|START_ACTION|>",
    "<|tool_call|>",
    "functools",
    "<|python_start|>",
    "<|tool_call_start|>",
    "```tool_code\n",
    "<function=f>",
    "<tool_call>",
    "```json\n",
    "<|tool_call>call:f",
]


@pytest.mark.parametrize("prefix", WRAPPED)
@pytest.mark.parametrize("body", ["[" * DEPTH, "{" * DEPTH, '{"a":' * DEPTH, "(" * DEPTH, "-" * DEPTH + "1"])
def test_deep_bodies_inside_each_wrapper(prefix: str, body: str) -> None:
    _check(extract_text_calls(prefix + body))


UNCLOSED = [
    "<function=get_weather>\n<parameter=city>\nSF",
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>SF",
    '<minimax:tool_call><invoke name="a"><parameter name="b">',
    "<seed:tool_call><function=a><parameter=b>",
    '<｜DSML｜function_calls><｜DSML｜invoke name="a"><｜DSML｜parameter name="b" string="true">',
    '<steptml:invoke name="a"><steptml:parameter name="b">',
    '<|tool_call>call:a{b:<|"|>x',
    "<think>",
    "</think>",
    "[THINK]",
    "<|channel|>",
    "```",
]


@pytest.mark.parametrize("tag", UNCLOSED)
def test_unclosed_tags_alone_and_repeated(tag: str) -> None:
    _check(extract_text_calls(tag))
    _check(extract_text_calls(tag * (1_000_000 // len(tag))))


@pytest.mark.parametrize("tag", ["<invoke ", "<steptml:invoke ", "<｜DSML｜function_calls><｜DSML｜invoke "])
def test_a_long_tag_header_without_attributes_is_read_once(tag: str) -> None:
    # The attribute regex once restarted at every character of a name run: 100k characters took ~30 s.
    _check(extract_text_calls(tag + "a" * TEN_MB + ">"))
    _check(extract_text_calls(tag + "a-" * (TEN_MB // 2) + '="x">'))


@pytest.mark.parametrize(
    "text",
    [
        "<|tool_call>call:f{a:" + "[" * DEPTH + "]" * DEPTH + "}<tool_call|>",
        '{"name": "f", "arguments": {"a": ' + "[" * 300 + "]" * 300 + "}}",
    ],
    ids=["gemma4", "json"],
)
def test_arguments_nested_too_deep_to_record_fail(text: str) -> None:
    parse = extract_text_calls(text)
    assert parse.failure is not None and parse.failure.endswith("_too_deep")
    assert parse.calls == []


def test_many_valid_calls_are_bounded() -> None:
    parse = extract_text_calls('[TOOL_CALLS]f{"a": 1}' * (MAX_CALLS + 10))
    assert parse.attempted
    assert parse.failure == "parse:mistral_too_many_calls"
    assert parse.calls == []
