"""The formation MCP server and the runner's sync client, against real server processes on both transports.

Every test that needs a server talks to a real `python -m orchestrator.runner.suites.mcpformation` over stdio or
streamable HTTP; nothing is mocked. One server per transport is shared by the read-only tests (module scope);
the life-cycle tests start their own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.classify import tools_by_name, validate_call
from orchestrator.core.types import ParsedCall
from orchestrator.runner.suites import mcpclient
from orchestrator.runner.suites.mcpclient import McpError, McpToolServer, list_server_tools

TRANSPORTS = ["stdio", "http"]
TOOL_NAMES = {
    "form_entity",
    "register_agent",
    "add_shareholders",
    "entity_status",
    "name_available",
    "md5",
    "sha256",
    "base64_encode",
}
ADDRESS = {"street": "12 Main St", "city": "Dover", "state": "DE", "zip": "19901"}


@pytest.fixture(scope="module", params=TRANSPORTS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[McpToolServer, Path]]:
    log = tmp_path_factory.mktemp(f"mcp-{request.param}") / "calls.jsonl"
    with McpToolServer("formation", request.param, log_path=log) as client:
        yield client, log


@pytest.fixture()
def client(served: tuple[McpToolServer, Path]) -> McpToolServer:
    return served[0]


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def client_threads() -> set[threading.Thread]:
    """The clients' loop threads now alive (the shared module-scoped server's thread among them)."""
    return {thread for thread in threading.enumerate() if thread.name.startswith("mcp-")}


def resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (FastMCP puts nested models under $defs) or return the inline schema."""
    ref = schema.get("$ref")
    return root["$defs"][ref.removeprefix("#/$defs/")] if ref else schema


# -- tools/list ---------------------------------------------------------------------------------------------------


@pytest.mark.server
def test_lists_all_tools_in_openai_format(client: McpToolServer) -> None:
    tools = client.list_tools()
    assert {tool["function"]["name"] for tool in tools} == TOOL_NAMES
    assert len(tools) == len(TOOL_NAMES)
    for tool in tools:
        assert tool["type"] == "function"
        assert tool["function"]["description"].strip()
        assert tool["function"]["parameters"]["type"] == "object"


@pytest.mark.server
def test_schemas_carry_enums_nested_objects_and_arrays(client: McpToolServer) -> None:
    schemas = tools_by_name(client.list_tools())
    form = schemas["form_entity"]
    assert form["required"] == ["name", "entity_type", "state"]
    assert form["properties"]["entity_type"]["enum"] == [
        "ENTITY_TYPE_LLC",
        "ENTITY_TYPE_C_CORP",
        "ENTITY_TYPE_S_CORP",
        "ENTITY_TYPE_NONPROFIT",
    ]
    register = schemas["register_agent"]
    agent = resolve(register["properties"]["agent"], register)
    address = resolve(register["properties"]["address"], register)
    assert agent["type"] == "object" and set(agent["properties"]) == {"name"}
    assert set(address["properties"]) == {"street", "city", "state", "zip"}
    shareholders = schemas["add_shareholders"]["properties"]["shareholders"]
    item = resolve(shareholders["items"], schemas["add_shareholders"])
    assert shareholders["type"] == "array"
    assert item["properties"]["shares"]["type"] == "integer"


@pytest.mark.server
def test_the_runner_validator_reads_these_schemas(client: McpToolServer) -> None:
    """core.classify follows the $refs: a nested call validates, a wrong enum value and a bare agent do not."""
    offered = tools_by_name(client.list_tools())
    good = {"entity_id": "ent_7f3a", "agent": {"name": "Jane Doe"}, "address": ADDRESS}
    assert validate_call(ParsedCall(name="register_agent", arguments=good), offered) is None
    bare_agent = {**good, "agent": "Jane Doe"}
    assert validate_call(ParsedCall(name="register_agent", arguments=bare_agent), offered) == "schema:wrong_type"
    llc = {"name": "Blue Harbor", "entity_type": "LLC", "state": "DE"}
    assert validate_call(ParsedCall(name="form_entity", arguments=llc), offered) == "schema:not_in_enum"


# -- tools/call ---------------------------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("text", ["hello", "northwind", "héllo wörld ✓", ""])
def test_hash_and_encode_tools(client: McpToolServer, text: str) -> None:
    data = text.encode()
    assert client.call("md5", {"input": text}) == ({"result": hashlib.md5(data).hexdigest()}, False)
    assert client.call("sha256", {"input": text}) == ({"result": hashlib.sha256(data).hexdigest()}, False)
    assert client.call("base64_encode", {"input": text}) == ({"result": base64.b64encode(data).decode()}, False)


@pytest.mark.server
def test_md5_of_hello_is_the_known_digest(client: McpToolServer) -> None:
    assert client.call("md5", {"input": "hello"}) == ({"result": "5d41402abc4b2a76b9719d911017c592"}, False)


@pytest.mark.server
def test_form_entity_id_is_a_pure_function_of_the_arguments(client: McpToolServer) -> None:
    arguments = {"name": "Blue Harbor", "entity_type": "ENTITY_TYPE_LLC", "state": "DE"}
    expected_id = "ent_" + hashlib.sha256(b"Blue Harbor|ENTITY_TYPE_LLC|DE").hexdigest()[:4]
    result = client.call("form_entity", arguments)
    assert result == ({"status": "accepted", "dry_run": True, "entity_id": expected_id}, False)
    assert client.call("form_entity", arguments) == result
    other, _ = client.call("form_entity", {**arguments, "entity_type": "ENTITY_TYPE_C_CORP"})
    assert other["entity_id"] != expected_id


@pytest.mark.server
def test_register_agent_and_add_shareholders(client: McpToolServer) -> None:
    registered = client.call("register_agent", {"entity_id": "ent_7f3a", "agent": {"name": "Jane"}, "address": ADDRESS})
    assert registered == ({"status": "registered", "dry_run": True, "entity_id": "ent_7f3a"}, False)
    people = [{"name": "Carol Smith", "shares": 1000}, {"name": "Dan Wu", "shares": 5}]
    recorded = client.call("add_shareholders", {"entity_id": "ent_19c2", "shareholders": people})
    assert recorded == ({"status": "recorded", "dry_run": True, "count": 2}, False)


@pytest.mark.server
@pytest.mark.parametrize(
    ("entity_id", "status", "reason"),
    [("ent_7f3a", "FILED", None), ("ent_19c2", "PENDING", None), ("ent_5b80", "REJECTED", "name conflict")],
)
def test_entity_status_answers_from_the_world(
    client: McpToolServer, entity_id: str, status: str, reason: str | None
) -> None:
    result, is_error = client.call("entity_status", {"entity_id": entity_id})
    assert not is_error
    assert result["entity_id"] == entity_id and result["status"] == status
    assert result.get("reason") == reason


@pytest.mark.server
def test_unknown_entity_is_a_tool_error_naming_it(client: McpToolServer) -> None:
    result, is_error = client.call("entity_status", {"entity_id": "ent_0000"})
    assert is_error is True
    assert isinstance(result, str) and "ent_0000" in result


@pytest.mark.server
@pytest.mark.parametrize(
    ("name", "state", "available"),
    [("Acme Robotics", "DE", False), ("ACME robotics", "DE", False), ("Acme Robotics", "CA", True),
     ("blue harbor", "CA", False), ("Fresh Start", "DE", True)],
)  # fmt: skip
def test_name_available(client: McpToolServer, name: str, state: str, available: bool) -> None:
    assert client.call("name_available", {"name": name, "state": state}) == (
        {"name": name, "state": state, "available": available},
        False,
    )


@pytest.mark.server
@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("form_entity", {"name": "Blue Harbor", "entity_type": "LLC", "state": "DE"}, "entity_type"),
        ("form_entity", {"name": "Blue Harbor", "state": "DE"}, "entity_type"),
        ("register_agent", {"entity_id": "ent_7f3a", "agent": "Jane Doe", "address": ADDRESS}, "agent"),
        ("add_shareholders", {"entity_id": "ent_19c2", "shareholders": [{"name": "C", "shares": "many"}]}, "shares"),
        ("no_such_tool", {}, "no_such_tool"),
    ],
)
def test_bad_calls_are_tool_errors_and_the_server_stays_usable(
    client: McpToolServer, tool: str, arguments: dict[str, Any], named: str
) -> None:
    result, is_error = client.call(tool, arguments)
    assert is_error is True
    assert isinstance(result, str) and named in result
    assert client.call("md5", {"input": "hello"}) == ({"result": "5d41402abc4b2a76b9719d911017c592"}, False)


@pytest.mark.server
def test_log_has_one_line_per_call_with_the_received_arguments(served: tuple[McpToolServer, Path]) -> None:
    client, log = served
    before = log.read_text().splitlines() if log.exists() else []
    sent = [
        ("sha256", {"input": "logged"}),
        ("form_entity", {"name": "Logged Co", "entity_type": "LLC", "state": "DE", "extra": [1, 2]}),
        ("entity_status", {"entity_id": "ent_19c2"}),
    ]
    answers = [client.call(tool, arguments) for tool, arguments in sent]
    lines = [json.loads(line) for line in log.read_text().splitlines()[len(before) :]]
    assert [(line["tool"], line["arguments"]) for line in lines] == sent
    assert [line["is_error"] for line in lines] == [is_error for _result, is_error in answers] == [False, True, False]
    assert all(datetime.fromisoformat(line["at"]).tzinfo is not None for line in lines)


@pytest.mark.server
def test_concurrent_calls_from_four_threads_all_answer(client: McpToolServer) -> None:
    texts = [f"thread-input-{index}" for index in range(24)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda text: client.call("sha256", {"input": text}), texts))
    assert answers == [({"result": hashlib.sha256(text.encode()).hexdigest()}, False) for text in texts]


@pytest.mark.server
def test_describe(client: McpToolServer) -> None:
    described = client.describe()
    assert described["server"] == "formation" and described["transport"] == client.transport
    assert isinstance(described["pid"], int) and pid_exists(described["pid"])
    assert described["sdk_version"].startswith("1.")
    if client.transport == "http":
        assert described["url"].startswith("http://127.0.0.1:") and described["url"].endswith("/mcp")
    else:
        assert described["url"] is None


@pytest.mark.server
def test_http_server_listens_on_loopback_only() -> None:
    """The kernel's table of listening sockets shows the server's port bound to 127.0.0.1 and nothing else."""
    with McpToolServer("formation", "http") as client:
        port = int(client.describe()["url"].rsplit(":", 1)[1].split("/")[0])
        listening = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for row in Path(table).read_text().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    listening.append(local.rsplit(":", 1)[0])
    assert listening == ["0100007F"]  # 127.0.0.1, little-endian hex


# -- life cycle ---------------------------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_close_stops_the_process_and_the_thread(transport: str) -> None:
    before = client_threads()
    client = McpToolServer("formation", transport).start()
    pid = client.describe()["pid"]
    assert pid_exists(pid) and client_threads() - before
    client.close()
    assert not pid_exists(pid)
    assert client_threads() == before
    client.close()  # idempotent
    with pytest.raises(McpError, match="not connected"):
        client.call("md5", {"input": "late"})


@pytest.mark.server
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_server_that_cannot_start_leaves_nothing_behind(transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(mcpclient.MCP_SERVERS, "broken", "orchestrator.runner.no_such_server_module")
    before = client_threads()
    client = McpToolServer("broken", transport, start_timeout_s=10)
    with pytest.raises(McpError, match=r"broken[\s\S]*No module named orchestrator\.runner\.no_such_server_module"):
        client.start()
    assert client.pid is not None and not pid_exists(client.pid)
    assert client_threads() == before


@pytest.mark.server
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_start_that_times_out_leaves_nothing_behind(transport: str) -> None:
    before = client_threads()
    client = McpToolServer("formation", transport, start_timeout_s=0.05)
    with pytest.raises(McpError, match=r"did not become ready within 0\.05 s"):
        client.start()
    assert client.pid is None or not pid_exists(client.pid)
    assert client_threads() == before


@pytest.mark.server
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_dead_server_is_a_transport_error_not_a_hang(transport: str) -> None:
    before = client_threads()
    with McpToolServer("formation", transport, call_timeout_s=5) as client:
        os.kill(client.describe()["pid"], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(McpError, match="tools/call md5"):
            for _ in range(20):  # the death reaches the session within a few calls at most
                client.call("md5", {"input": "after death"})
                time.sleep(0.1)
        assert time.monotonic() - started < 8
    assert client_threads() == before


def test_unknown_server_and_transport_are_refused() -> None:
    with pytest.raises(McpError, match="unknown MCP server 'nope'"):
        McpToolServer("nope", "stdio")
    with pytest.raises(McpError, match="unknown transport 'sse'"):
        McpToolServer("formation", "sse")  # type: ignore[arg-type]


@pytest.mark.server
def test_list_server_tools_starts_lists_and_stops() -> None:
    before = client_threads()
    tools = list_server_tools("formation")
    assert {tool["function"]["name"] for tool in tools} == TOOL_NAMES
    assert client_threads() == before
