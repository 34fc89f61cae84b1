"""Call-format recognisers: the stacks' own parser test cases (tests/data/call_formats/cases.yaml), and
focused cases per family: what each reads, what is prose or code, and what is a malformed attempt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.core.textcalls import FORMATS, TextCallParse, extract_text_calls

CASES_FILE = Path(__file__).parent / "data" / "call_formats" / "cases.yaml"


def _load_cases() -> list[dict[str, Any]]:
    return list(yaml.safe_load(CASES_FILE.read_text(encoding="utf-8"))["cases"])


def _pairs(parse: TextCallParse) -> list[tuple[str, Any]]:
    return [(call.name, call.arguments) for call in parse.calls]


def _expected(case: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(call["name"], call["arguments"]) for call in case.get("expected") or []]


# Cases this harness deliberately reads otherwise than the stack they come from: why, and how they read here.
# The table keeps the stack's own expectation; the tests check this reading, and that it really differs.
DISAGREEMENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm-llama3-missing-arguments": (
        "a JSON object with a call's name and no arguments key is a call with no arguments here (the json "
        "family's shapes are kept as they were; a tool without parameters is called so); vLLM's llama3_json "
        "returns it as content",
        {"kind": "call", "expected": [{"name": "toolWithoutParams", "arguments": {}}]},
    ),
    "vllm-minimax-m2-untyped-number": (
        "with no schema type (no tools passed) an XML value that parses as JSON becomes that JSON value here "
        "(5, not '5'), as the issue asks; vLLM keeps every untyped value a string",
        {"expected": [{"name": "get_weather", "arguments": {"city": "Seattle", "days": 5}}]},
    ),
}


def as_read_here(case: dict[str, Any]) -> dict[str, Any]:
    """The case with this harness's deliberate reading where it differs from the stack's."""
    return {**case, **DISAGREEMENTS[case["id"]][1]} if case["id"] in DISAGREEMENTS else case


STACK_CASES = _load_cases()
CASES = [as_read_here(case) for case in STACK_CASES]


def test_the_case_table_is_there_and_every_disagreement_is_real() -> None:
    assert len(STACK_CASES) >= 80
    by_id = {case["id"]: case for case in STACK_CASES}
    for case_id, (_, reading) in DISAGREEMENTS.items():
        stack = by_id[case_id]
        assert any(stack.get(key) != value for key, value in reading.items()), case_id


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_stack_case(case: dict[str, Any]) -> None:
    tools = case.get("tools")
    parse = extract_text_calls(case["text"], tools=tools)
    if case["kind"] == "call":
        assert parse.ok, (parse.call_format, parse.failure)
        assert parse.call_format == case["format"]
        assert _pairs(parse) == _expected(case)
        assert extract_text_calls(case["text"], tools=tools, call_format=case["format"]) == parse
    elif case["kind"] == "prose":
        assert not parse.attempted, (parse.call_format, parse.failure)
        assert parse.calls == []
        assert parse.call_format is None
    else:
        assert case["kind"] == "malformed"
        assert parse.attempted
        assert parse.failure
        assert not parse.ok


# --- the API ------------------------------------------------------------------------------------------------


def test_formats_are_in_the_fixed_auto_order() -> None:
    assert FORMATS[-1] == "json"
    assert FORMATS.index("harmony") < FORMATS.index("qwen3_xml") < FORMATS.index("pythonic") < FORMATS.index("json")
    assert FORMATS.index("mistral") < FORMATS.index("pythonic")
    assert len(set(FORMATS)) == len(FORMATS)


def test_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="qwen3_xml") as info:
        extract_text_calls("[TOOL_CALLS]f{}", call_format="nope")
    assert "'nope'" in str(info.value)
    assert "auto" in str(info.value)


def test_nothing_attempted_has_no_format() -> None:
    parse = extract_text_calls("The answer is 42.")
    assert parse == TextCallParse()
    assert parse.call_format is None
    assert extract_text_calls(None) == TextCallParse()


def test_a_named_format_tries_only_that_one() -> None:
    text = '[TOOL_CALLS]add{"a": 1}'
    assert extract_text_calls(text, call_format="mistral").ok
    assert not extract_text_calls(text, call_format="qwen3_xml").attempted


def test_json_shapes_are_the_json_family() -> None:
    parse = extract_text_calls('{"name": "pod_status", "arguments": {"name": "api-1"}}')
    assert parse.ok
    assert parse.call_format == "json"


# --- per family: what is read, what is not, what fails --------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "ratio": {"type": "number"},
                    "where": {"type": "object"},
                    "tags": {"type": "array"},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    }
]

READS = [
    ("pythonic", "[get_weather(city='SF', metric='celsius')]", [("get_weather", {"city": "SF", "metric": "celsius"})]),
    (
        "pythonic",
        "[a(x=-1, y=[1, 2], z={'k': None}), b()]",
        [("a", {"x": -1, "y": [1, 2], "z": {"k": None}}), ("b", {})],
    ),
    ("pythonic", '<|python_start|>[get_weather(city="SF")]<|python_end|>', [("get_weather", {"city": "SF"})]),
    ("pythonic", '<|tool_call_start|>[get_weather(city="SF")]<|tool_call_end|>', [("get_weather", {"city": "SF"})]),
    ("pythonic", '```tool_code\nprint(get_weather(city="SF"))\n```', [("get_weather", {"city": "SF"})]),
    ("pythonic", "Checking.\n[get_weather(city='SF')]\n", [("get_weather", {"city": "SF"})]),
    ("mistral", '[TOOL_CALLS]add{"a": 3.5}', [("add", {"a": 3.5})]),
    ("mistral", '[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{"b": 2}', [("add", {"a": 1}), ("mul", {"b": 2})]),
    ("mistral", '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}]', [("add", {"a": 1})]),
    (
        "qwen3_xml",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSF\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>\n</tool_call>",
        [("get_weather", {"city": "SF", "days": 3})],
    ),
    (
        "qwen3_xml",
        "<function=get_weather>\n<parameter=city>\na</parameter>b\n</parameter>\n</function>",
        [("get_weather", {"city": "a</parameter>b"})],
    ),
    (
        "glm_xml",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>SF</arg_value>\n"
        "<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n</tool_call>",
        [("get_weather", {"city": "SF", "metric": True})],
    ),
    ("glm_xml", "<tool_call>get_weather\n</tool_call>", [("get_weather", {})]),
    (
        "deepseek",
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "SF"}\n```'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        [("get_weather", {"city": "SF"})],
    ),
    (
        "deepseek",
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "SF"}<｜tool▁call▁end｜>'
        "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        [("get_weather", {"city": "SF"}), ("f", {})],
    ),
    (
        "kimi_k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0 <|tool_call_argument_begin|>"
        '{"city": "SF"}<|tool_call_end|><|tool_calls_section_end|>',
        [("get_weather", {"city": "SF"})],
    ),
    (
        "harmony",
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"SF"}<|call|>',
        [("get_weather", {"city": "SF"})],
    ),
    (
        "harmony",
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "SF"}<|call|>',
        [("get_weather", {"city": "SF"})],
    ),
    (
        "gemma4",
        '<|tool_call>call:get_weather{city:<|"|>San Francisco, CA<|"|>,days:3,where:{a:[1,<|"|>x<|"|>]},metric:true}'
        "<tool_call|>",
        [("get_weather", {"city": "San Francisco, CA", "days": 3, "where": {"a": [1, "x"]}, "metric": True})],
    ),
    (
        "command_r",
        'Action: ```json\n[{"tool_name": "get_weather", "parameters": {"city": "SF"}}]\n```',
        [("get_weather", {"city": "SF"})],
    ),
    (
        "command_r",
        '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "SF"}}]'
        "<|END_ACTION|>",
        [("get_weather", {"city": "SF"})],
    ),
    ("functionary", '<function=get_weather>{"city": "SF"}</function>', [("get_weather", {"city": "SF"})]),
    ("functionary", '>>>all\nLet me look.>>>get_weather\n{"city": "SF"}', [("get_weather", {"city": "SF"})]),
    (
        "minimax",
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">SF</parameter>\n'
        '<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>',
        [("get_weather", {"city": "SF", "days": 3})],
    ),
    (
        "minimax",
        "<invoke name='get_weather'><parameter name='city'>SF</parameter></invoke>",
        [("get_weather", {"city": "SF"})],
    ),
    ("json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "SF"}}', [("get_weather", {"city": "SF"})]),
    (
        "granite",
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "SF"}}]',
        [("get_weather", {"city": "SF"})],
    ),
    ("functools", 'Sure.\nfunctools[{"name": "get_weather", "arguments": {}}]', [("get_weather", {})]),
    (
        "seed_oss",
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>SF\n</parameter>\n</function>\n</seed:tool_call>",
        [("get_weather", {"city": "SF\n"})],
    ),
    (
        "deepseek_dsml",
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">'
        '42</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        [("get_weather", {"city": "42", "days": 3})],
    ),
    (
        "step3",
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>get_weather\n"
        '<steptml:invoke name="get_weather"><steptml:parameter name="city"> SF </steptml:parameter>'
        '<steptml:parameter name="days"> 3 </steptml:parameter></steptml:invoke>'
        "<｜tool_call_end｜><｜tool_calls_end｜>",
        [("get_weather", {"city": " SF ", "days": 3})],
    ),
    ("mistral", '[THINK]maybe [TOOL_CALLS]f{"a": 1}[/THINK][TOOL_CALLS]g{"b": 2}', [("g", {"b": 2})]),
    ("json", 'I should call it.</think>{"name": "f", "arguments": {}}', [("f", {})]),
    (
        "pythonic",
        "<|tool_call_start|>[set_date(month=07, note='it's fine\nreally')]<|tool_call_end|>",
        [("set_date", {"month": 7, "note": "it's fine\nreally"})],
    ),
    ("pythonic", "[bad(x=b'z'), get_weather(city='SF')]", [("get_weather", {"city": "SF"})]),
    ("json", '[{"get_weather": {"city": "SF"}}]', [("get_weather", {"city": "SF"})]),
]


@pytest.mark.parametrize(("family", "text", "calls"), READS, ids=[f"{r[0]}-{i}" for i, r in enumerate(READS)])
def test_family_reads(family: str, text: str, calls: list[tuple[str, Any]]) -> None:
    parse = extract_text_calls(text, tools=TOOLS)
    assert parse.ok, parse.failure
    assert parse.call_format == family
    assert _pairs(parse) == calls
    assert extract_text_calls(text, tools=TOOLS, call_format=family) == parse


MALFORMED = [
    ("mistral", "[TOOL_CALLS] not json"),
    ("mistral", '[TOOL_CALLS]add{"a": '),
    ("mistral", '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}'),
    ("pythonic", "[foo(x=1])]"),
    ("pythonic", "[get_weather(city=)]"),
    ("pythonic", "[get_weather(city=some_variable)]"),
    ("pythonic", "[get_weather('SF')]"),  # positional arguments to an offered tool: a call, malformed
    ("pythonic", "<|python_start|>get_weather(city=<|python_end|>"),
    ("qwen3_xml", "<function=get_weather>\n<parameter=city>\nSF"),
    ("qwen3_xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\nSF\n</parameter>\n"),
    ("glm_xml", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>SF"),
    ("deepseek", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": <｜tool▁call▁end｜>'),
    ("deepseek", "<｜tool▁calls▁begin｜>get_weather"),
    ("kimi_k2", "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{bad}<|tool_call_end|>"),
    (
        "kimi_k2",
        '<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a": 1}<|tool_call_begin|>functions.g:1'
        "<|tool_call_argument_begin|>{}<|tool_call_end|>",
    ),
    ("harmony", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: SF}<|call|>"),
    ("gemma4", '<|tool_call>call:get_weather{city:<|"|>London'),
    ("command_r", "<|START_ACTION|>[{not json}]<|END_ACTION|>"),
    ("command_r", '<|START_ACTION|>[{"tool_name": "f", "parameters": {}}]'),
    ("functionary", '<function=get_weather>{"city": '),
    ("minimax", '<minimax:tool_call><invoke name="get_weather"><parameter name="city">SF'),
    ("json", '{"name": "pod_status", "arguments": {"name": "api-1"}'),
]


@pytest.mark.parametrize(("family", "text"), MALFORMED, ids=[f"{m[0]}-{i}" for i, m in enumerate(MALFORMED)])
def test_malformed_attempts_fail_in_their_family(family: str, text: str) -> None:
    parse = extract_text_calls(text, tools=TOOLS)
    assert parse.attempted
    assert parse.failure and parse.failure.startswith("parse:")
    assert parse.call_format == family
    assert not parse.ok
    if family != "json":
        assert parse.failure.startswith(f"parse:{family}_")
        assert parse.calls == []


NOT_ATTEMPTS = [
    "I would call get_weather(city='SF') if I could.",
    "print(foo(1))",
    "```python\n[get_weather(city='SF')]\n```",
    "```python\nresult = get_weather(city='SF')\nprint(result)\n```",
    "```py\nfor x in [f(y=1) for y in z]:\n    pass\n```",
    "The list [1, 2, 3] has three items.",
    "See [the docs](https://example.com/a(b)).",
    "[see(this)] is a link label, then prose.",
    'The record is {"name": "Alice", "age": 3}.',
    '[{"name": "Alice", "age": 3}, {"name": "Bob", "age": 4}]',
    "Use the <function> tag or a tool_call if needed.",
    ">>> print(1)\n1",
    "Action: take a walk.",
    "<|channel|>final<|message|>It is sunny.<|return|>",
    "Set x to=5 first.<|channel|>final<|message|>Done.<|return|>",
    "<think>[TOOL_CALLS]f{}</think>I will not call anything.",
    "x = [get_weather(city='SF')]",
    "The tokens [TOOL_CALLS and <tool_call are special.",
    'The data:\n```json\n[{"user": {"name": "Bob"}}]\n```\nOne user.',
    '[{"api-1": {"status": "running"}}]',  # one-key objects naming no offered tool: data
    "As shown in:\n[Smith(2020), Jones(2021)]",  # positional arguments only: a citation
    ">>> [get_weather(city='SF')]\n['sunny']",  # a Python prompt and what it printed
]


@pytest.mark.parametrize("text", NOT_ATTEMPTS)
def test_prose_and_code_are_not_attempts(text: str) -> None:
    parse = extract_text_calls(text, tools=TOOLS)
    assert not parse.attempted, (parse.call_format, parse.failure)
    assert parse.calls == []


# --- XML value typing -----------------------------------------------------------------------------------------


def _qwen(parameter: str, value: str) -> str:
    return f"<function=get_weather>\n<parameter={parameter}>\n{value}\n</parameter>\n</function>"


@pytest.mark.parametrize(
    ("parameter", "value", "expected"),
    [
        ("city", "42", "42"),
        ("city", "  padded  ", "  padded  "),
        ("days", "3", 3),
        ("days", "three", "three"),
        ("metric", "True", True),
        ("metric", "maybe", "maybe"),
        ("ratio", "1.5", 1.5),
        ("ratio", "2", 2),
        ("where", '{"a": 1}', {"a": 1}),
        ("where", "{'a': 1}", {"a": 1}),
        ("tags", "[1, 2]", [1, 2]),
        ("note", "null", None),
        ("note", "text", "text"),
        ("unknown", "[1, 2]", [1, 2]),
        ("unknown", "plain words", "plain words"),
    ],
)
def test_xml_values_are_typed_by_the_schema(parameter: str, value: str, expected: Any) -> None:
    parse = extract_text_calls(_qwen(parameter, value), tools=TOOLS)
    assert parse.ok
    assert parse.calls[0].arguments == {parameter: expected}
    assert type(parse.calls[0].arguments[parameter]) is type(expected)


def test_without_tools_json_looking_xml_values_become_json() -> None:
    parse = extract_text_calls(_qwen("days", "3") + _qwen("city", "SF"))
    assert [call.arguments for call in parse.calls] == [{"days": 3}, {"city": "SF"}]


@pytest.mark.parametrize(
    "quoted",
    ['<invoke name="a">', "[TOOL_CALLS]", "functools[", "<|START_ACTION|>", "<tool_call>", "</think>", "<|tool_call|>"],
)
def test_a_json_call_quoting_another_formats_markers_stays_json(quoted: str) -> None:
    text = json.dumps({"name": "write_file", "arguments": {"content": f"x {quoted} y"}})
    parse = extract_text_calls(text)
    assert (parse.call_format, parse.ok) == ("json", True), parse.failure
    assert _pairs(parse) == [("write_file", {"content": f"x {quoted} y"})]


@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("functionary", '<function=a>{"a": "[TOOL_CALLS]"}</function>'),  # found by the property test
        ("qwen3_xml", '<function=a>\n<parameter=b>\nsee <invoke name="x"> and [TOOL_CALLS]\n</parameter>\n</function>'),
        ("glm_xml", "<tool_call>f\n<arg_key>a</arg_key><arg_value>Action: ```json\n[1]\n```</arg_value></tool_call>"),
    ],
)
def test_a_call_quoting_an_earlier_formats_marker_is_read_in_its_own(family: str, text: str) -> None:
    parse = extract_text_calls(text)
    assert (parse.call_format, parse.ok) == (family, True), parse.failure


def test_a_mistral_call_quoting_xml_stays_mistral() -> None:
    text = '[TOOL_CALLS]write{"content": "<function=x>\\n<parameter=y>\\n</parameter></function>"}'
    parse = extract_text_calls(text)
    assert parse.call_format == "mistral"
    assert parse.ok
