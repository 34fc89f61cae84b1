"""Tool schema references (issue 28, defects 1 and 8): resolved offline only, every one checked up front.

A remote `$ref` was fetched over HTTP (and `classify` waited as long as the server did); a reference that loops
or leads nowhere passed the up-front check, and every call to its tool was then `hallucinated_call`. Each
surface that reads a schema (suite load, an MCP server's listing, `classify`, `audit`) now refuses such a schema
with one line naming the tool and the reference, and nothing ever connects anywhere."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.analysis.audit.trajectories import load_tools_file
from orchestrator.core.classify import classify
from orchestrator.core.jsonl import InputError
from orchestrator.core.toolschemas import schema_problem, tool_schema_problems
from orchestrator.core.types import Outcome
from orchestrator.runner.config.resolve import seeds_dir
from orchestrator.runner.suites import tasks
from orchestrator.runner.suites.tasks import Suite, SuiteError, with_listed_tools
from tests.cliinprocess import orchestrate

BOUND_S = 10.0  # each surface answers well within this; a fetch that waits on a silent server never would


def tool(parameters: Any, name: str = "lookup") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": parameters}}


def at_x(ref: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": {"$ref": ref}}, "required": ["x"]}


def reply(arguments: str, name: str = "lookup") -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}


BROKEN = {  # parameters -> what the one line says about the reference
    "self at the root": ({"$ref": "#"}, "at $: $ref '#' loops back"),
    "defs naming each other": (
        {**at_x("#/$defs/a"), "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
        "at $.$defs.a: $ref '#/$defs/b' loops back",
    ),
    "a property naming itself": (at_x("#/properties/x"), "at $.properties.x: $ref '#/properties/x' loops back"),
    "a loop through allOf": ({"allOf": [{"$ref": "#"}], "type": "object"}, "at $.allOf[0]: $ref '#' loops back"),
    "dangling pointer": (at_x("#/$defs/missing"), "$ref '#/$defs/missing': the schema has nothing at"),
    "dangling anchor": (at_x("#nowhere"), "$ref '#nowhere': the schema has no anchor 'nowhere'"),
    "another document": (at_x("other.json"), "$ref 'other.json': names a document outside the schema"),
    "a remote document": (at_x("https://example.invalid/s.json"), "names a document outside the schema"),
}


@pytest.mark.parametrize(("parameters", "says"), BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_reference_is_named_up_front(parameters: dict[str, Any], says: str) -> None:
    tools = [tool({"type": "object"}, "fine"), tool(parameters)]
    (problem,) = tool_schema_problems(tools)
    assert problem.startswith("tools[1] ('lookup'): parameters is not usable: ") and says in problem, problem
    # The classifier names the schema as the fault (configuration), never a model failure of its own kind.
    verdict = classify(refusals=(), mode="native", tools=tools, http_status=200, body=reply('{"x": 1}'))
    assert verdict.detail == "schema:invalid_tool_schema"


RECURSIVE = {  # references that read a smaller value each time, or name a metaschema jsonschema ships
    "a tree": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["name"],
    },
    "an anchor": {
        "$defs": {"n": {"$anchor": "node", "type": "object", "properties": {"c": {"$ref": "#node"}}}},
        "$ref": "#node",
    },
    "an absolute self id": {
        "$id": "https://tools.example/lookup",
        "type": "object",
        "properties": {"x": {"$ref": "https://tools.example/lookup#/$defs/leaf"}},
        "$defs": {"leaf": {"type": "integer"}},
    },
    "the metaschema": {"type": "object", "properties": {"x": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}},
    "a property called $id": {
        "type": "object",
        "properties": {"$id": {"type": "string"}, "y": {"$ref": "#/$defs/y"}},
        "$defs": {"y": {"type": "integer"}},
    },
}


@pytest.mark.parametrize("parameters", RECURSIVE.values(), ids=RECURSIVE.keys())
def test_references_that_resolve_without_looping_stay_usable(parameters: dict[str, Any]) -> None:
    assert schema_problem(parameters) is None


def test_a_recursive_schema_still_judges_the_arguments() -> None:
    tools = [tool(RECURSIVE["a tree"])]
    good = json.dumps({"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]})
    bad = json.dumps({"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]})
    assert classify(refusals=(), mode="native", tools=tools, http_status=200, body=reply(good)).outcome == (
        Outcome.VALID_CALL
    )
    verdict = classify(refusals=(), mode="native", tools=tools, http_status=200, body=reply(bad))
    assert (verdict.outcome, verdict.detail) == (Outcome.HALLUCINATED_CALL, "schema:wrong_type")


def test_an_identifier_no_uri_parser_reads_is_named() -> None:
    (problem,) = tool_schema_problems([tool({"$id": "http://[", "type": "object"})])
    assert problem.startswith("tools[0] ('lookup'): parameters is not usable: ") and "no URI" in problem


ref_text = (
    st.sampled_from(
        [
            "#",
            "#/",
            "#/$defs/a",
            "#/$defs/b",
            "#/properties/x",
            "#a",
            "http://[",
            "other.json",
            "urn:x",
            "#/$defs/a/allOf/0",
            "https://json-schema.org/draft/2020-12/schema",
        ]
    )
    | st.text()
)
subschema = st.recursive(
    st.fixed_dictionaries({}, optional={"$ref": ref_text, "type": st.sampled_from(["object", "string"])}),
    lambda kids: st.fixed_dictionaries(
        {},
        optional={
            "$ref": ref_text,
            "allOf": st.lists(kids, max_size=2),
            "properties": st.dictionaries(st.sampled_from("xy"), kids),
            "$anchor": st.sampled_from(["a", "b"]),
            "not": kids,
        },
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(root=subschema, defs=st.dictionaries(st.sampled_from(["a", "b"]), subschema, max_size=2))
def test_any_reference_graph_is_one_answer_or_one_line(root: dict[str, Any], defs: dict[str, Any]) -> None:
    # Whatever the references: the check answers (never raises), and a schema it accepts validates any
    # arguments without running out of stack or reaching for another document.
    schema = {**root, "$defs": defs} if defs else root
    problem = schema_problem(schema)
    if problem is None:
        verdict = classify(refusals=(), mode="native", tools=[tool(schema)], http_status=200, body=reply('{"x": {}}'))
        assert verdict.detail in (None, "schema:wrong_type", "schema:not"), verdict.detail
    else:
        assert "\n" not in problem


# ---------------------------------------------------------------- every surface that reads a schema


def _suite_with(parameters: dict[str, Any]) -> None:
    data = yaml.safe_load((seeds_dir() / "ops.yaml").read_text())
    data["tools"][0]["function"]["parameters"] = parameters
    Suite.model_validate(data)


def _mcp_listing(parameters: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    data = yaml.safe_load((seeds_dir() / "formation.yaml").read_text())
    suite = Suite.model_validate(data)
    monkeypatch.setattr(tasks, "_listed_tools", lambda server: [tool(parameters)])
    with_listed_tools(suite, Path("seeds/formation.yaml"))


def _classify_cli(parameters: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    exchange = {"id": 1, "stack": "vllm", "mode": "native", "tools": [tool(parameters)], "http_status": 200,
                "body": reply('{"x": 1}'), "error": None}  # fmt: skip
    path = tmp_path / "exchanges.jsonl"
    path.write_text(json.dumps(exchange) + "\n")
    done = orchestrate("classify", str(path))
    return done.returncode, done.stderr


def _audit_cli(parameters: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"x": 1}'}}
    messages = [{"role": "user", "content": "look it up"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps({"messages": messages, "tools": [tool(parameters)]}))
    done = orchestrate("audit", str(path), "--json")
    return done.returncode, done.stderr + done.stdout


def _refused_everywhere(parameters: dict[str, Any], says: str, tmp_path: Path, mp: pytest.MonkeyPatch) -> None:
    """Suite load, an MCP listing, `classify` and `audit` each refuse the schema with one line naming the tool."""
    with pytest.raises(ValueError, match=r"tools\[0\] \('\w+'\): parameters is not usable") as caught:
        _suite_with(parameters)
    assert says in str(caught.value)
    with pytest.raises(SuiteError, match="lists unusable tool schemas") as listed:
        _mcp_listing(parameters, mp)
    assert "'lookup'" in str(listed.value) and says in str(listed.value)
    for code, said in (_classify_cli(parameters, tmp_path), _audit_cli(parameters, tmp_path)):
        assert code == 2 and "'lookup'" in said and says in said and "Traceback" not in said, said


@pytest.mark.parametrize("which", ["self at the root", "defs naming each other", "dangling pointer"])
def test_every_surface_refuses_a_broken_reference(which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: audit scored the call 0.0 (hallucinated) where the schema was at fault; classify labelled it so.
    parameters, says = BROKEN[which]
    _refused_everywhere(parameters, says, tmp_path, monkeypatch)


def test_a_tools_file_with_a_broken_reference_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [tool(at_x("#/$defs/gone"))]}))
    with pytest.raises(InputError, match=r"tools\[0\] \('lookup'\): 'parameters' is not usable: .*#/\$defs/gone"):
        load_tools_file(path)


# ---------------------------------------------------------------- the network is never reached


class SilentServer:
    """A loopback listener that accepts, records what it was sent, and answers nothing for HOLD_S seconds before
    it hangs up: a fetch would wait that long (and then fail), so a contact shows both in `contacts` and in time."""

    HOLD_S = BOUND_S + 2

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.contacts: list[bytes] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            connection.settimeout(1)
            try:
                self.contacts.append(connection.recv(4096) or b"(connected)")
            except OSError:
                self.contacts.append(b"(connected)")
            threading.Timer(self.HOLD_S, connection.close).start()

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def _within_bound(check: Callable[[], None]) -> None:
    """`check` ends (in this thread: the in-process CLI sets signal handlers) well before a fetch would."""
    started = time.monotonic()
    check()
    assert time.monotonic() - started < BOUND_S


@pytest.mark.slow  # binds a listening socket
def test_no_schema_reference_reaches_the_network(
    silent_server: SilentServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{silent_server.port}/schema.json"
    remote = at_x(url)
    nested = {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}, {"$ref": url + "#/$defs/n"}]}}}
    for parameters, ref in ((remote, url), (nested, url + "#/$defs/n")):
        tools = [tool(parameters)]
        says = f"$ref {ref!r}: names a document outside the schema (references resolve offline only, never fetched)"

        def labelled(tools: list[Any] = tools) -> None:
            for arguments in ('{"x": 1}', '{"x": "s"}', "{}"):
                verdict = classify(refusals=(), mode="native", tools=tools, http_status=200, body=reply(arguments))
                assert verdict.detail == "schema:invalid_tool_schema"

        _within_bound(labelled)
        _within_bound(lambda p=parameters, s=says: _refused_everywhere(p, s, tmp_path, monkeypatch))
    assert silent_server.contacts == [], silent_server.contacts
