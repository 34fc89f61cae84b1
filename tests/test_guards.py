"""The product channel's guards and the reply-text predicates they read, at the boundaries the articles draw
(seeds/001: stall rule and schema-driven repair; seeds/004: short-circuit, dedup, JSON in a final answer)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import orchestrator
from orchestrator.core.classify import validate_call
from orchestrator.core.replytext import is_question, is_refusal, is_small_talk, looks_like_json_answer
from orchestrator.core.types import ParsedCall, ToolExecution
from orchestrator.runner.turn.guards import (
    DEDUP_NOTE,
    FINAL_JSON_RETRY,
    GUARDS,
    GUARDS_ENV,
    STALL_REPROMPT,
    GuardConfigError,
    active_guards,
    call_signature,
    dedup_check,
    fallback_answer,
    final_json_check,
    repair_call,
    repair_value,
    short_circuit_check,
    stall_check,
)

# Tool schemas the way pydantic writes them for an MCP server: $defs/$ref for models and enums, anyOf for Optional.
ENTITY_TYPE = {
    "enum": ["ENTITY_TYPE_LLC", "ENTITY_TYPE_C_CORP", "ENTITY_TYPE_S_CORP"],
    "title": "EntityType",
    "type": "string",
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "form_entity": {
        "$defs": {"EntityType": ENTITY_TYPE},
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "entity_type": {"$ref": "#/$defs/EntityType"},
            "state": {"title": "State", "type": "string"},
        },
        "required": ["name", "entity_type", "state"],
        "title": "form_entityArguments",
        "type": "object",
    },
    "register_agent": {
        "$defs": {
            "Agent": {
                "properties": {"name": {"title": "Name", "type": "string"}},
                "required": ["name"],
                "title": "Agent",
                "type": "object",
            },
            "Address": {
                "properties": {
                    "street": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Street"},
                    "city": {"title": "City", "type": "string"},
                    "state": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "State"},
                },
                "required": ["city"],
                "title": "Address",
                "type": "object",
            },
        },
        "properties": {
            "entity_id": {"title": "Entity Id", "type": "string"},
            "agent": {"$ref": "#/$defs/Agent"},
            "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
            "backup_agent": {"anyOf": [{"$ref": "#/$defs/Agent"}, {"type": "null"}], "default": None},
        },
        "required": ["entity_id", "agent"],
        "title": "register_agentArguments",
        "type": "object",
    },
    "add_shareholders": {
        "$defs": {
            "EntityType": ENTITY_TYPE,
            "Shareholder": {
                "properties": {
                    "name": {"title": "Name", "type": "string"},
                    "shares": {"title": "Shares", "type": "integer"},
                    "kind": {"anyOf": [{"$ref": "#/$defs/EntityType"}, {"type": "null"}], "default": None},
                },
                "required": ["name", "shares"],
                "title": "Shareholder",
                "type": "object",
            },
        },
        "properties": {
            "entity_id": {"title": "Entity Id", "type": "string"},
            "shareholders": {"items": {"$ref": "#/$defs/Shareholder"}, "title": "Shareholders", "type": "array"},
        },
        "required": ["entity_id", "shareholders"],
        "type": "object",
    },
    "md5": {"properties": {"input": {"type": "string"}}, "required": ["input"], "type": "object"},
}

CAROL = {"name": "Carol Smith", "shares": 1000}
FORM = {"name": "Blue Harbor", "state": "DE"}
AGENT = {"entity_id": "ent_7f3a", "agent": {"name": "Jane Doe"}}

# (tool, arguments the model wrote, arguments after repair, fired)
REPAIRS: dict[str, tuple[str, dict[str, Any], dict[str, Any], bool]] = {
    "enum-suffix-LLC": (
        "form_entity",
        {**FORM, "entity_type": "LLC"},
        {**FORM, "entity_type": "ENTITY_TYPE_LLC"},
        True,
    ),
    "enum-lowercase-spaced": (
        "form_entity",
        {**FORM, "entity_type": "c corp"},
        {**FORM, "entity_type": "ENTITY_TYPE_C_CORP"},
        True,
    ),
    "enum-exact-other-case": (
        "form_entity",
        {**FORM, "entity_type": "entity-type-s-corp"},
        {**FORM, "entity_type": "ENTITY_TYPE_S_CORP"},
        True,
    ),
    "enum-ambiguous-left": ("form_entity", {**FORM, "entity_type": "corp"}, {**FORM, "entity_type": "corp"}, True),
    "enum-no-match-left": ("form_entity", {**FORM, "entity_type": "LP"}, {**FORM, "entity_type": "LP"}, True),
    "enum-wrapped-and-suffix": (
        "form_entity",
        {**FORM, "entity_type": {"value": "LLC"}},
        {**FORM, "entity_type": "ENTITY_TYPE_LLC"},
        True,
    ),
    "flat-to-wrapped": ("register_agent", {"entity_id": "ent_7f3a", "agent": "Jane Doe"}, AGENT, True),
    "wrapped-to-flat": (
        "register_agent",
        {"entity_id": {"id": "ent_7f3a"}, "agent": {"name": "Jane Doe"}},
        AGENT,
        True,
    ),
    "single-key-arguments": ("md5", {"input": {"text": "hello"}}, {"input": "hello"}, True),
    "json-string-object": ("register_agent", {"entity_id": "ent_7f3a", "agent": '{"name": "Jane Doe"}'}, AGENT, True),
    "optional-ref-json-string": (
        "register_agent",
        {**AGENT, "address": '{"city": "Dover", "state": "DE"}'},
        {**AGENT, "address": {"city": "Dover", "state": "DE"}},
        True,
    ),
    "optional-ref-flat-to-wrapped": (
        "register_agent",
        {**AGENT, "backup_agent": "John Roe"},
        {**AGENT, "backup_agent": {"name": "John Roe"}},
        True,
    ),
    "flat-into-several-properties-left": (
        "register_agent",
        {**AGENT, "address": "Dover"},
        {**AGENT, "address": "Dover"},
        True,
    ),
    "optional-string-unwrapped": (
        "register_agent",
        {**AGENT, "address": {"city": "Dover", "street": {"line": "12 Main St"}}},
        {**AGENT, "address": {"city": "Dover", "street": "12 Main St"}},
        True,
    ),
    "single-object-to-array": (
        "add_shareholders",
        {"entity_id": "ent_19c2", "shareholders": CAROL},
        {"entity_id": "ent_19c2", "shareholders": [CAROL]},
        True,
    ),
    "json-string-array": (
        "add_shareholders",
        {"entity_id": "ent_19c2", "shareholders": json.dumps([CAROL])},
        {"entity_id": "ent_19c2", "shareholders": [CAROL]},
        True,
    ),
    "enum-inside-array-item-ref": (
        "add_shareholders",
        {"entity_id": "ent_19c2", "shareholders": [{**CAROL, "kind": "llc"}]},
        {"entity_id": "ent_19c2", "shareholders": [{**CAROL, "kind": "ENTITY_TYPE_LLC"}]},
        True,
    ),
    "no-type-coercion": (
        "add_shareholders",
        {"entity_id": "ent_19c2", "shareholders": [{"name": "Carol Smith", "shares": "1000"}]},
        {"entity_id": "ent_19c2", "shareholders": [{"name": "Carol Smith", "shares": "1000"}]},
        True,
    ),
    "missing-key-not-added": (
        "form_entity",
        {"name": "Blue Harbor", "entity_type": "LLC"},
        {
            "name": "Blue Harbor",
            "entity_type": "ENTITY_TYPE_LLC",
        },
        True,
    ),
    "unknown-key-untouched": (
        "form_entity",
        {**FORM, "entity_type": "LLC", "extra": {"id": "x"}},
        {**FORM, "entity_type": "ENTITY_TYPE_LLC", "extra": {"id": "x"}},
        True,
    ),
    "valid-call-not-fired": (
        "form_entity",
        {**FORM, "entity_type": "ENTITY_TYPE_LLC"},
        {
            **FORM,
            "entity_type": "ENTITY_TYPE_LLC",
        },
        False,
    ),
    "unknown-tool-not-fired": ("file_taxes", {"entity_type": "LLC"}, {"entity_type": "LLC"}, False),
}


@pytest.mark.parametrize(("tool", "arguments", "expected", "fired"), list(REPAIRS.values()), ids=list(REPAIRS))
def test_repair_call(tool: str, arguments: dict[str, Any], expected: dict[str, Any], fired: bool) -> None:
    original = json.loads(json.dumps(arguments))
    call = ParsedCall(name=tool, arguments=arguments, id="c1")
    repaired, event = repair_call(call, SCHEMAS)
    assert repaired.arguments == expected
    assert (repaired.name, repaired.id) == (tool, "c1")
    assert event.guard == "repair"
    assert event.fired is fired
    assert event.changed is (expected != original)
    assert (event.before, event.after) == (original, expected)
    assert arguments == original  # the model's arguments are recorded as they were, not repaired in place


def test_repair_leaves_non_object_arguments_alone() -> None:
    call = ParsedCall(name="md5", arguments='{"input": "hello"}')
    repaired, event = repair_call(call, SCHEMAS)
    assert repaired is call
    assert (event.fired, event.changed) == (False, False)


def test_repaired_calls_validate_where_the_repair_is_complete() -> None:
    for case in ("enum-suffix-LLC", "flat-to-wrapped", "wrapped-to-flat", "single-object-to-array"):
        tool, arguments, _, _ = REPAIRS[case]
        repaired, _ = repair_call(ParsedCall(name=tool, arguments=arguments), SCHEMAS)
        assert validate_call(repaired, SCHEMAS) is None, case


@pytest.mark.parametrize(
    ("value", "expected"),
    [("LLC", "ENTITY_TYPE_LLC"), ({"type": "c_corp"}, "ENTITY_TYPE_C_CORP"), ("corp", "corp"), (3, 3)],
    ids=["ref-enum", "wrapped-enum", "ambiguous", "not-a-string"],
)
def test_repair_value_resolves_refs_against_the_root(value: Any, expected: Any) -> None:
    root = SCHEMAS["form_entity"]
    assert repair_value(value, root["properties"]["entity_type"], root) == expected


# A value that is either a code string (by `pattern`) or an object {"v": ...}: the repair wraps a string the
# pattern rejects, so what the guard calls "valid" shows in its output.
def _code_or_wrapped(pattern: str) -> dict[str, Any]:
    union = {
        "anyOf": [{"type": "string", "pattern": pattern}, {"type": "object", "properties": {"v": {"type": "string"}}}]
    }
    return {"type": "object", "properties": {"code": union}, "required": ["code"]}


@pytest.mark.parametrize(
    ("pattern", "code"),
    [
        # Catastrophic backtracking for `re` (minutes at this length); RE2 answers in linear time.
        (r"^(a+)+$", "a" * 40 + "!"),
        # RE2's \d is ASCII (as ECMA-262's); Python's `re` would accept this Arabic-Indic three.
        (r"^\d+$", "\u0663"),
    ],
    ids=["catastrophic-backtracking", "unicode-digit"],
)
def test_repair_judges_patterns_as_core_validates_them(pattern: str, code: str) -> None:
    schemas = {"lookup": _code_or_wrapped(pattern)}
    call = ParsedCall(name="lookup", arguments={"code": code})
    assert validate_call(call, schemas) == "schema:anyOf"  # core: the pattern rejects the string
    repaired, event = repair_call(call, schemas)
    # The guard agrees with core that the string is no code, so the one branch left is the wrapper...
    assert (event.fired, event.changed) == (True, True)
    assert repaired.arguments == {"code": {"v": code}}
    # ...and core accepts what the guard produced.
    assert validate_call(repaired, schemas) is None


def test_only_core_toolschemas_imports_a_jsonschema_validator() -> None:
    # Model-written arguments are checked in one place, in linear time: a module that imports jsonschema's own
    # validators (Draft*Validator, validate, validator_for) would match patterns with backtracking `re`.
    # (jsonschema.protocols.Validator, a type only, validates nothing.)
    package = Path(orchestrator.__file__).parent
    importers = set()
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jsonschema":
                if node.module != "jsonschema.protocols" and any(
                    re.fullmatch(r"Draft\d+Validator|validate|validator_for|extend|create|validators", alias.name)
                    for alias in node.names
                ):
                    importers.add(path.relative_to(package).as_posix())
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "jsonschema" for a in node.names):
                importers.add(path.relative_to(package).as_posix())
    assert importers == {"core/toolschemas.py"}


def test_repair_leaves_arguments_alone_when_core_calls_the_schema_unusable() -> None:
    # A look-ahead is no linear-time pattern: core refuses the schema, and so does the guard (a backtracking
    # validator would accept the schema and repair the enum).
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["ENTITY_TYPE_LLC"]}, "name": {"type": "string", "pattern": "^(?=B)"}},
    }
    call = ParsedCall(name="form", arguments={"kind": "LLC", "name": "Blue"})
    assert validate_call(call, {"form": schema}) == "schema:invalid_tool_schema"
    repaired, event = repair_call(call, {"form": schema})
    assert repaired.arguments == {"kind": "LLC", "name": "Blue"}
    assert (event.fired, event.changed) == (True, False)


def _same_keys(before: Any, after: Any) -> bool:
    """Every object that stays an object keeps exactly its keys, at every depth."""
    if isinstance(before, dict) and isinstance(after, dict):
        return before.keys() == after.keys() and all(_same_keys(before[k], after[k]) for k in before)
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return all(_same_keys(b, a) for b, a in zip(before, after, strict=True))
    return True


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.sampled_from(["LLC", "corp", "Jane", "1000"]))
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["name", "shares", "kind", "city", "id", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = st.sampled_from(
    ["name", "entity_type", "state", "entity_id", "agent", "backup_agent", "address", "shareholders", "input", "extra"]
)


@settings(max_examples=300, deadline=None)
@given(tool=st.sampled_from(sorted(SCHEMAS)), arguments=st.dictionaries(KEYS, JSON_VALUES, max_size=5))
def test_repair_never_adds_or_removes_keys(tool: str, arguments: dict[str, Any]) -> None:
    repaired, event = repair_call(ParsedCall(name=tool, arguments=arguments), SCHEMAS)
    assert isinstance(repaired.arguments, dict)
    assert _same_keys(arguments, repaired.arguments)
    assert event.changed is (repaired.arguments != arguments)
    if validate_call(ParsedCall(name=tool, arguments=arguments), SCHEMAS) is None:
        assert (event.fired, repaired.arguments) == (False, arguments)


# (reply, user request, tool results seen, last call refused, fired)
STALLS: dict[str, tuple[str | None, str, int, bool, bool]] = {
    "announces-and-stops": (
        "I will choose a C corporation, let's continue.",
        "Form a C corp named X in DE.",
        0,
        False,
        True,
    ),
    "okay-nothing-done": ("Okay.", "Register Jane Doe as agent of ent_7f3a.", 0, False, True),
    "empty-reply": ("", "Form an LLC named Blue Harbor in DE.", 0, False, True),
    "none-reply": (None, "Form an LLC named Blue Harbor in DE.", 0, False, True),
    "asks-the-user": ("Which state should I form it in?", "Form an LLC named Blue Harbor.", 0, False, False),
    "asks-without-question-mark": ("Please provide the state of formation.", "Form an LLC.", 0, False, False),
    "refusal-that-asks": ("I can't do that, could you tell me which state?", "Form an LLC.", 0, False, False),
    "plain-refusal": ("I'm sorry, but I cannot file taxes.", "File my taxes for ent_7f3a.", 0, False, False),
    "summary-after-result": (
        "Blue Harbor LLC was formed as ent_9a1b.",
        "Form an LLC named Blue Harbor.",
        1,
        False,
        False,
    ),
    "small-talk": ("You're welcome, have a great day.", "Thanks, that's all!", 0, False, False),
    "after-refused-call": ("The server did not accept that request.", "Form an LLC named X in DE.", 0, True, False),
}


@pytest.mark.parametrize(("reply", "request_text", "seen", "refused", "fired"), list(STALLS.values()), ids=list(STALLS))
def test_stall_check(reply: str | None, request_text: str, seen: int, refused: bool, fired: bool) -> None:
    event = stall_check(reply, user_request=request_text, tool_results_seen=seen, last_call_refused=refused)
    assert (event.guard, event.fired, event.changed, event.before) == ("stall", fired, fired, reply)
    assert event.after == (STALL_REPROMPT if fired else None)


def test_stall_reprompt_names_no_tool() -> None:
    # The article: naming the next tool would push a model that should show options into inventing arguments.
    for tool in SCHEMAS:
        assert tool not in STALL_REPROMPT
    assert "ask" in STALL_REPROMPT.lower()


def test_dedup() -> None:
    first = ParsedCall(name="entity_status", arguments={"entity_id": "ent_7f3a", "verbose": True})
    executed: set[str] = set()
    assert dedup_check(first, executed).fired is False
    executed.add(call_signature(first))
    reordered = ParsedCall(name="entity_status", arguments={"verbose": True, "entity_id": "ent_7f3a"}, id="other")
    repeat = dedup_check(reordered, executed)
    assert (repeat.guard, repeat.fired, repeat.changed) == ("dedup", True, True)
    assert repeat.before == reordered.model_dump()
    other_args = ParsedCall(name="entity_status", arguments={"entity_id": "ent_19c2", "verbose": True})
    other_name = ParsedCall(name="entity_history", arguments={"entity_id": "ent_7f3a", "verbose": True})
    assert dedup_check(other_args, executed).fired is False
    assert dedup_check(other_name, executed).fired is False
    assert call_signature(first) == call_signature(reordered)
    assert "same arguments" in DEDUP_NOTE and "final answer" in DEDUP_NOTE


FINALS: dict[str, tuple[str | None, bool]] = {
    "final-object": ('{"final": "Blue Harbor LLC was formed."}', True),
    "nested-json-final": ('{"final":"{\\"error\\":\\"tool sha1 does not exist\\"}"}', True),
    "array": ('  ["ent_7f3a", "ent_19c2"]', True),
    "fenced-json": ('```json\n{"status": "filed"}\n```', True),
    "tool-call-shaped": ('<tool_call>{"name": "md5", "arguments": {"input": "hello"}}</tool_call>', True),
    "mistral-call-text": ('[TOOL_CALLS]md5{"input": "hello"}', True),
    "plain-sentence": ("The entity ent_7f3a is filed.", False),
    "braces-in-the-middle": ("The result is {ok}.", False),
    "empty": ("", False),
    "none": (None, False),
}


@pytest.mark.parametrize(("reply", "fired"), list(FINALS.values()), ids=list(FINALS))
def test_final_json_check(reply: str | None, fired: bool) -> None:
    event = final_json_check(reply)
    assert (event.guard, event.fired, event.changed, event.before) == ("final_json", fired, fired, reply)
    assert looks_like_json_answer(reply) is fired


def test_final_json_retry_asks_for_plain_sentences() -> None:
    assert "plain sentences" in FINAL_JSON_RETRY and "not JSON" in FINAL_JSON_RETRY


HASH = "5d41402abc4b2a76b9719d911017c592"
MD5_OK = ToolExecution(call=ParsedCall(name="md5", arguments={"input": "hello"}), result={"result": HASH})
DETERMINISTIC = frozenset({"md5", "sha256", "base64_encode"})
STATUS_OK = ToolExecution(call=ParsedCall(name="entity_status", arguments={"entity_id": "e"}), result={"status": "ok"})

# (this turn's executions, observations before it, fired, answer)
SHORT_CIRCUITS: dict[str, tuple[list[ToolExecution], int, bool, str | None]] = {
    "only-observation": ([MD5_OK], 0, True, HASH),
    "text-result": ([MD5_OK.model_copy(update={"result": HASH})], 0, True, HASH),
    "second-observation": ([MD5_OK], 1, False, None),
    "two-executions": ([MD5_OK, STATUS_OK], 0, False, None),
    "not-deterministic": ([STATUS_OK], 0, False, None),
    "errored": ([MD5_OK.model_copy(update={"error": True, "result": "bad input"})], 0, False, None),
    "not-sent": ([MD5_OK.model_copy(update={"sent": False, "result": None})], 0, False, None),
    "no-execution": ([], 0, False, None),
}


@pytest.mark.parametrize(
    ("executions", "before", "fired", "answer"), list(SHORT_CIRCUITS.values()), ids=list(SHORT_CIRCUITS)
)
def test_short_circuit_check(executions: list[ToolExecution], before: int, fired: bool, answer: str | None) -> None:
    event = short_circuit_check(executions, DETERMINISTIC, before)
    assert (event.guard, event.fired, event.changed, event.after) == ("short_circuit", fired, fired, answer)


FALLBACKS: dict[str, tuple[list[Any], str]] = {
    "none": ([], ""),
    "last-success-first": (
        [{"status": "filed"}, {"entity_id": "ent_7f3a", "name": "Blue Harbor"}],
        "entity_id: ent_7f3a; name: Blue Harbor\nstatus: filed",
    ),
    "errors-skipped": (
        [MD5_OK, MD5_OK.model_copy(update={"error": True, "result": {"message": "boom"}}), {"error": "no such tool"}],
        f"result: {HASH}",
    ),
    "text-and-nested": (["  ok  ", {"agent": {"name": "Jane Doe"}}], 'agent: {"name":"Jane Doe"}\nok'),
}


@pytest.mark.parametrize(("results", "answer"), list(FALLBACKS.values()), ids=list(FALLBACKS))
def test_fallback_answer(results: list[Any], answer: str) -> None:
    assert fallback_answer(results) == answer
    assert fallback_answer(results) == fallback_answer(list(results))


ACTIVE: dict[str, tuple[dict[str, bool], dict[str, str], frozenset[str]]] = {
    "defaults-all-on": ({}, {}, frozenset(GUARDS)),
    "configured-off": ({"dedup": False, "stall": True}, {}, frozenset(GUARDS) - {"dedup"}),
    "env-wins": ({"dedup": False}, {GUARDS_ENV: " stall , dedup "}, frozenset({"stall", "dedup"})),
    "empty-env-none-on": ({}, {GUARDS_ENV: ""}, frozenset()),
    "other-env-ignored": ({"repair": False}, {"PATH": "/bin"}, frozenset(GUARDS) - {"repair"}),
}


@pytest.mark.parametrize(("configured", "environ", "expected"), list(ACTIVE.values()), ids=list(ACTIVE))
def test_active_guards(configured: dict[str, bool], environ: dict[str, str], expected: frozenset[str]) -> None:
    assert active_guards(configured, environ) == expected


@pytest.mark.parametrize(
    ("configured", "environ"),
    [({"stal": True}, {}), ({}, {GUARDS_ENV: "stall,retry"}), ({"bogus": False}, {GUARDS_ENV: "stall"})],
    ids=["unknown-in-config", "unknown-in-env", "unknown-in-config-under-env"],
)
def test_active_guards_rejects_unknown_names(configured: dict[str, bool], environ: dict[str, str]) -> None:
    with pytest.raises(GuardConfigError) as raised:
        active_guards(configured, environ)
    unknown = next(iter(configured), None) if configured else "retry"
    assert repr(unknown) in str(raised.value)
    assert all(name in str(raised.value) for name in GUARDS)


QUESTIONS: dict[str, tuple[str | None, bool]] = {
    "question-mark": ("Which state should I use?", True),
    "fullwidth-question-mark": ("您想在哪个州注册？", True),
    "question-in-bold-quotes": ('Should I use **"Delaware?"**  ', True),
    "question-mid-reply": ("Which state? I need it for the filing", True),
    "please-confirm": ("Please confirm the company name.", True),
    "let-me-know": ("Let me know the agent's address.", True),
    "could-you-share": ("Could you share the shareholder list.", True),
    "i-need-your": ("I need your entity id to continue.", True),
    "statement": ("I will choose a C corporation, let's continue.", False),
    "url-with-query": ("See https://example.com/?q=1 for details.", False),
    "empty": ("   ", False),
    "none": (None, False),
}


@pytest.mark.parametrize(("text", "expected"), list(QUESTIONS.values()), ids=list(QUESTIONS))
def test_is_question(text: str | None, expected: bool) -> None:
    assert is_question(text) is expected


REFUSALS: dict[str, tuple[str | None, bool]] = {
    "cant": ("I can't file taxes.", True),
    "curly-apostrophe": ("I can\u2019t help with that.", True),
    "cannot": ("Sorry, I cannot do this.", True),
    "unable": ("I am unable to register that agent.", True),
    "sorry-but": ("I'm sorry, but that is not possible.", True),
    "not-allowed": ("I am not allowed to change filings.", True),
    "wont": ("I WON'T do that.", True),
    "success": ("The company was formed.", False),
    "none": (None, False),
}


@pytest.mark.parametrize(("text", "expected"), list(REFUSALS.values()), ids=list(REFUSALS))
def test_is_refusal(text: str | None, expected: bool) -> None:
    assert is_refusal(text) is expected


SMALL_TALK: dict[str, tuple[str | None, bool]] = {
    "thanks-thats-all": ("Thanks, that's all for today!", True),
    "hi": ("Hi!", True),
    "how-are-you": ("Hello, how are you?", True),
    "goodbye": ("Bye, see you!", True),
    "form-a-company": ("Form a company for me.", False),
    "thanks-then-task": ("Thanks! Now check ent_7f3a.", False),
    "hash-request": ("Hi, what is the md5 of hello?", False),
    "long-social": ("Thanks so much, you have been really very helpful and kind to me all day long, bye", False),
    "not-social": ("The weather is mild.", False),
    "empty": ("", False),
}


@pytest.mark.parametrize(("text", "expected"), list(SMALL_TALK.values()), ids=list(SMALL_TALK))
def test_is_small_talk(text: str | None, expected: bool) -> None:
    assert is_small_talk(text) is expected
