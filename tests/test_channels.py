"""The model channel and the product channel's agent loop (runner/product/channelrun.py), each guard switched on
and off.

The model's replies come from the scripted loopback server (tests/fakes/scripted.py): a real model cannot be
made to stall, repeat a call or answer in JSON on demand. The tool server is the REAL formation MCP server
(`python -m orchestrator.runner.suites.mcpformation` over stdio), started once for the module with its `--log`, so each
test reads what the server itself received.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.scoring import is_unscored
from orchestrator.core.types import ToolsMode, TurnRecord
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.product.channelrun import run_model_case, run_product_case
from orchestrator.runner.suites.mcpclient import McpToolServer
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.suites.toolserver import mcp_executor
from orchestrator.runner.turn.agent import SeedContext
from orchestrator.runner.turn.guards import DEDUP_NOTE, FINAL_JSON_RETRY, GUARDS, STALL_REPROMPT, fallback_answer
from orchestrator.serving.chatapi import Decoding
from orchestrator.serving.registry import load_stack
from tests import bodies as b
from tests.fakes.scripted import Reply, chat_reply, scripted_server
from tests.seedcontexts import seed_context

pytestmark = pytest.mark.server

MD5_HELLO = "5d41402abc4b2a76b9719d911017c592"
STATUS_7F3A = {"entity_id": "ent_7f3a", "status": "FILED", "name": "Harbor Works LLC", "state": "DE"}
STALL = "I will choose a C corporation, let's continue."
ALL_ON = frozenset(GUARDS)


@dataclass
class ToolServer:
    server: McpToolServer
    log: Path
    suite: Suite

    def received(self) -> list[dict[str, Any]]:
        """Every tools/call the server logged so far (it appends one JSON line per call it received)."""
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolServer]:
    log = tmp_path_factory.mktemp("formation-mcp") / "calls.jsonl"
    with McpToolServer("formation", "stdio", log_path=log) as server:
        yield ToolServer(server, log, load_suite("formation"))


@dataclass
class Run:
    records: list[TurnRecord]
    requests: list[dict[str, Any]]  # the bodies the chat server received, in order
    written_after: list[int]  # per record: how many requests the chat server had received when it was written
    received: list[dict[str, Any]]  # the tools/calls the MCP server received during this run

    @property
    def last(self) -> TurnRecord:
        return self.records[-1]

    def events(self, turn: int, guard: str) -> list[dict[str, Any]]:
        return [e.model_dump() for r in self.records if r.turn == turn for e in r.guard_events if e.guard == guard]


def call(tool: str, **arguments: Any) -> Reply:
    """A call written as text, as the text-tools harness reads it."""
    return Reply(200, chat_reply(json.dumps({"name": tool, "arguments": arguments})))


def prose(text: str) -> Reply:
    return Reply(200, chat_reply(text))


def context(tools: ToolServer, url: str, seed: str, **overrides: Any) -> SeedContext:
    values: dict[str, Any] = dict(
        run_id="r",
        cell_id="c",
        stack_label="llamacpp-jinja",
        spec=load_stack("llamacpp"),
        parser=None,
        stack_version="v",
        base_url=url,
        model="m",
        mode=ToolsMode.TEXT_TOOLS,
        suite=tools.suite,
        seed_id=seed,
        decoding=Decoding(temperature=0.7, max_tokens=64, seed=7),
        turn_cap=6,
        loop_repeats=3,
        request_timeout_s=10,
        max_attempts=2,
        backoff_s=0.0,
        headers={},
        channel="product",
        guards=ALL_ON,
        execute_call=mcp_executor(tools.server, tools.suite),
    )
    values.update(overrides)
    return seed_context(**values)


def drive(tools: ToolServer, replies: list[Reply], seed: str, *, model: bool = False, **overrides: Any) -> Run:
    """One case through a channel; checks on the way that each record is on disk before the next request."""
    records: list[TurnRecord] = []
    written_after: list[int] = []
    before = len(tools.received())
    with scripted_server(replies) as (url, script):

        def record(turn: TurnRecord) -> None:
            written_after.append(len(script.requests))
            records.append(turn)

        ctx = context(tools, url, seed, **({"channel": "model"} | overrides if model else overrides))
        final = (run_model_case if model else run_product_case)(ctx, record)
        requests = [payload for _at, payload in script.requests]
    assert final == records[-1]
    return Run(records, requests, written_after, tools.received()[before:])


def last_message(request: dict[str, Any]) -> dict[str, Any]:
    return request["messages"][-1]


def result_sent_back(request: dict[str, Any], tool: str) -> Any:
    """The tool result the harness handed back to the model in text-tools form ("Result of <tool>: <json>")."""
    message = last_message(request)
    assert message["role"] == "user"
    prefix = f"Result of {tool}: "
    assert message["content"].startswith(prefix), message["content"]
    return json.loads(message["content"].removeprefix(prefix))


# ---- every record: written before the next request, with its channel and ablation fields ---------------------


def test_every_turn_is_recorded_before_the_next_request_with_its_channel_fields(tools: ToolServer) -> None:
    replies = [call("entity_status", entity_id="ent_7f3a"), call("entity_status", entity_id="ent_7f3a"), prose(STALL)]
    guards = ALL_ON - {"stall"}
    run = drive(tools, replies, "f-08", guards=guards, without="stall", cell_id="c__without-stall")
    assert len(run.requests) == 3
    assert run.written_after == [1, 2, 3]  # record k is written before request k+1 is sent
    assert [(r.turn, r.attempt) for r in run.records] == [(0, 0), (1, 0), (2, 0)]
    assert {(r.channel, r.without, r.cell_id, r.seed, r.suite) for r in run.records} == {
        ("product", "stall", "c__without-stall", "f-08", "formation")
    }
    assert [r.end for r in run.records] == [None, None, "answered"]
    assert all(e.guard != "stall" for r in run.records for e in r.guard_events)
    assert run.last.final_answer == STALL  # the stall guard is off: the stall is the answer


def test_a_retried_attempt_is_its_own_record_before_the_retry(tools: ToolServer) -> None:
    run = drive(tools, [Reply(503, b.LLAMACPP_LOADING), call("md5", input="hello")], "f-05")
    assert run.written_after == [1, 2]
    assert [(r.turn, r.attempt, r.end) for r in run.records] == [(0, 0, None), (0, 1, "short_circuit")]
    assert run.records[0].executions == [] and run.records[0].guard_events == []


# ---- repair -------------------------------------------------------------------------------------------------


def test_repair_sends_the_enum_value_and_the_record_keeps_the_raw_call(tools: ToolServer) -> None:
    replies = [
        call("form_entity", name="Blue Harbor", entity_type="LLC", state="DE"),
        prose("Blue Harbor LLC was accepted for formation in Delaware."),
    ]
    run = drive(tools, replies, "f-01")
    first = run.records[0]
    assert [c.arguments for c in first.calls] == [{"name": "Blue Harbor", "entity_type": "LLC", "state": "DE"}]
    (execution,) = first.executions
    assert execution.call.arguments == {"name": "Blue Harbor", "entity_type": "ENTITY_TYPE_LLC", "state": "DE"}
    assert (execution.sent, execution.error, execution.result["status"]) == (True, False, "accepted")
    (repair,) = run.events(0, "repair")
    assert (repair["fired"], repair["changed"]) == (True, True)
    assert (repair["before"]["entity_type"], repair["after"]["entity_type"]) == ("LLC", "ENTITY_TYPE_LLC")
    assert [(r["tool"], r["arguments"]["entity_type"], r["is_error"]) for r in run.received] == [
        ("form_entity", "ENTITY_TYPE_LLC", False)
    ]
    assert result_sent_back(run.requests[1], "form_entity")["status"] == "accepted"
    assert (run.last.end, run.last.final_answer) == (
        "answered",
        "Blue Harbor LLC was accepted for formation in Delaware.",
    )


def test_without_repair_the_server_gets_the_raw_value_and_answers_an_error(tools: ToolServer) -> None:
    replies = [call("form_entity", name="Blue Harbor", entity_type="LLC", state="DE"), prose("That did not work.")]
    run = drive(tools, replies, "f-01", guards=ALL_ON - {"repair"}, without="repair")
    (execution,) = run.records[0].executions
    assert execution.call.arguments["entity_type"] == "LLC"
    assert (execution.sent, execution.error) == (True, True)
    assert "entity_type" in json.dumps(execution.result)
    assert [(r["tool"], r["arguments"]["entity_type"], r["is_error"]) for r in run.received] == [
        ("form_entity", "LLC", True)
    ]
    assert run.events(0, "repair") == []
    assert run.last.end == "answered"


def test_a_valid_call_is_not_repaired(tools: ToolServer) -> None:
    run = drive(tools, [call("md5", input="hello")], "f-05")
    (repair,) = run.events(0, "repair")
    assert (repair["fired"], repair["changed"]) == (False, False)
    assert run.records[0].executions[0].call == run.records[0].calls[0]


# ---- dedup --------------------------------------------------------------------------------------------------


def test_dedup_holds_back_a_repeated_call_and_tells_the_model(tools: ToolServer) -> None:
    replies = [
        call("entity_status", entity_id="ent_7f3a"),
        call("entity_status", entity_id="ent_7f3a"),
        prose("Entity ent_7f3a is FILED."),
    ]
    run = drive(tools, replies, "f-08")
    first, second = run.records[0].executions, run.records[1].executions
    assert [(e.sent, e.error, e.result) for e in first] == [(True, False, STATUS_7F3A)]
    assert [(e.sent, e.error, e.result) for e in second] == [(False, False, {"note": DEDUP_NOTE})]
    assert [(e["fired"], e["changed"]) for e in run.events(0, "dedup")] == [(False, False)]
    assert [(e["fired"], e["changed"]) for e in run.events(1, "dedup")] == [(True, True)]
    assert result_sent_back(run.requests[1], "entity_status") == STATUS_7F3A
    assert result_sent_back(run.requests[2], "entity_status") == {"note": DEDUP_NOTE}
    assert len(run.received) == 1  # the server saw the call once
    assert (run.last.end, run.last.final_answer) == ("answered", "Entity ent_7f3a is FILED.")


def test_without_dedup_the_repeated_call_is_sent_again(tools: ToolServer) -> None:
    replies = [
        call("entity_status", entity_id="ent_7f3a"),
        call("entity_status", entity_id="ent_7f3a"),
        prose("Entity ent_7f3a is FILED."),
    ]
    run = drive(tools, replies, "f-08", guards=ALL_ON - {"dedup"}, without="dedup")
    sent = [(e.sent, e.result) for r in run.records for e in r.executions]
    assert sent == [(True, STATUS_7F3A), (True, STATUS_7F3A)]
    assert [(r["tool"], r["arguments"]) for r in run.received] == [("entity_status", {"entity_id": "ent_7f3a"})] * 2
    assert result_sent_back(run.requests[2], "entity_status") == STATUS_7F3A
    assert all(e.guard != "dedup" for r in run.records for e in r.guard_events)


def test_dedup_compares_the_repaired_call(tools: ToolServer) -> None:
    """ "LLC" then "ENTITY_TYPE_LLC": after the repair both are the same call, sent once."""
    replies = [
        call("form_entity", name="Blue Harbor", entity_type="LLC", state="DE"),
        call("form_entity", name="Blue Harbor", entity_type="ENTITY_TYPE_LLC", state="DE"),
        prose("Blue Harbor LLC was accepted."),
    ]
    run = drive(tools, replies, "f-01")
    assert [e.sent for r in run.records for e in r.executions] == [True, False]
    assert len(run.received) == 1


# ---- stall --------------------------------------------------------------------------------------------------


def test_a_stall_is_reprompted_once_and_the_next_turn_says_so(tools: ToolServer) -> None:
    replies = [
        prose(STALL),
        call("form_entity", name="Northwind Labs", entity_type="ENTITY_TYPE_C_CORP", state="DE"),
        prose("Northwind Labs was accepted for formation."),
    ]
    run = drive(tools, replies, "f-02")
    assert len(run.requests) == 3
    assert run.requests[1]["messages"][-2:] == [
        {"role": "assistant", "content": STALL},
        {"role": "user", "content": STALL_REPROMPT},
    ]
    assert [(e["fired"], e["changed"]) for e in run.events(0, "stall")] == [(True, True)]
    assert [r.prompted_by for r in run.records] == [None, "stall", None]
    assert [r.end for r in run.records] == [None, None, "answered"]
    assert [r["tool"] for r in run.received] == ["form_entity"]


def test_a_second_stall_ends_the_case_as_stalled(tools: ToolServer) -> None:
    run = drive(tools, [prose(STALL), prose("Sure, a C corporation it is. Let's proceed step by step.")], "f-02")
    assert len(run.requests) == 2
    assert [(r.turn, r.prompted_by, r.end) for r in run.records] == [(0, None, None), (1, "stall", "stalled")]
    assert run.last.final_answer == "Sure, a C corporation it is. Let's proceed step by step."
    assert [e["fired"] for e in run.events(1, "stall")] == [True]


def test_a_question_to_the_user_is_an_answer_not_a_stall(tools: ToolServer) -> None:
    question = "Which kind of company should I form, in which state, and under what name?"
    run = drive(tools, [prose(question), prose(STALL)], "f-10")
    assert len(run.requests) == 1
    assert (run.last.end, run.last.final_answer, run.last.prompted_by) == ("answered", question, None)
    assert [(e["fired"], e["changed"]) for e in run.events(0, "stall")] == [(False, False)]


def test_without_the_stall_guard_a_stall_is_the_answer(tools: ToolServer) -> None:
    run = drive(tools, [prose(STALL), prose("unused")], "f-02", guards=ALL_ON - {"stall"}, without="stall")
    assert len(run.requests) == 1
    assert (run.last.end, run.last.final_answer) == ("answered", STALL)


def test_every_attempt_of_a_reprompted_turn_carries_prompted_by(tools: ToolServer) -> None:
    """The re-prompted turn's first attempt finds the server loading (503) and is retried: both attempts are
    that turn's records, and the re-prompt made the turn."""
    replies = [
        prose(STALL),
        Reply(503, b.LLAMACPP_LOADING),
        call("form_entity", name="Northwind Labs", entity_type="ENTITY_TYPE_C_CORP", state="DE"),
        prose("Northwind Labs was accepted for formation."),
    ]
    run = drive(tools, replies, "f-02")
    assert run.written_after == [1, 2, 3, 4]
    assert [(r.turn, r.attempt, r.prompted_by) for r in run.records] == [
        (0, 0, None),
        (1, 0, "stall"),
        (1, 1, "stall"),
        (2, 0, None),
    ]


# ---- final_json ---------------------------------------------------------------------------------------------


def test_a_json_final_answer_is_retried_then_replaced_by_the_results(tools: ToolServer) -> None:
    replies = [call("entity_status", entity_id="ent_7f3a"), prose('{"final": "done"}'), prose('{"final": "done"}')]
    run = drive(tools, replies, "f-08")
    assert len(run.requests) == 3
    assert run.requests[2]["messages"][-2:] == [
        {"role": "assistant", "content": '{"final": "done"}'},
        {"role": "user", "content": FINAL_JSON_RETRY},
    ]
    assert [(r.turn, r.prompted_by, r.end) for r in run.records] == [
        (0, None, None),
        (1, None, None),
        (2, "final_json", "answered"),
    ]
    assert [(e["fired"], e["after"]) for e in run.events(1, "final_json")] == [(True, "retry")]
    expected = fallback_answer([STATUS_7F3A])
    assert run.last.final_answer == expected
    assert "FILED" in expected and "{" not in expected
    assert [(e["fired"], e["after"]) for e in run.events(2, "final_json")] == [(True, expected)]


def test_a_plain_answer_after_the_json_retry_is_the_answer(tools: ToolServer) -> None:
    replies = [call("entity_status", entity_id="ent_7f3a"), prose('{"status": "FILED"}'), prose("It is FILED.")]
    run = drive(tools, replies, "f-08")
    assert (run.last.turn, run.last.prompted_by, run.last.end, run.last.final_answer) == (
        2,
        "final_json",
        "answered",
        "It is FILED.",
    )


def test_without_final_json_the_json_is_the_answer(tools: ToolServer) -> None:
    replies = [call("entity_status", entity_id="ent_7f3a"), prose('{"final": "done"}')]
    run = drive(tools, replies, "f-08", guards=ALL_ON - {"final_json"}, without="final_json")
    assert len(run.requests) == 2
    assert (run.last.end, run.last.final_answer) == ("answered", '{"final": "done"}')


# ---- short_circuit ------------------------------------------------------------------------------------------


def test_a_deterministic_tool_result_is_the_answer_after_one_request(tools: ToolServer) -> None:
    run = drive(tools, [call("md5", input="hello"), prose("The MD5 hash is 12345.")], "f-05")
    assert len(run.requests) == 1
    assert (run.last.end, run.last.final_answer) == ("short_circuit", MD5_HELLO)
    assert [(e["fired"], e["after"]) for e in run.events(0, "short_circuit")] == [(True, MD5_HELLO)]
    assert [(r["tool"], r["arguments"]) for r in run.received] == [("md5", {"input": "hello"})]


def test_without_short_circuit_the_model_retells_the_result(tools: ToolServer) -> None:
    replies = [call("md5", input="hello"), prose("The MD5 hash is 12345.")]
    run = drive(tools, replies, "f-05", guards=ALL_ON - {"short_circuit"}, without="short_circuit")
    assert len(run.requests) == 2
    assert result_sent_back(run.requests[1], "md5") == {"result": MD5_HELLO}
    assert (run.last.end, run.last.final_answer) == ("answered", "The MD5 hash is 12345.")


def test_a_non_deterministic_tool_does_not_short_circuit(tools: ToolServer) -> None:
    run = drive(tools, [call("entity_status", entity_id="ent_7f3a"), prose("It is FILED.")], "f-08")
    assert len(run.requests) == 2
    assert [e["fired"] for e in run.events(0, "short_circuit")] == [False]


# ---- the stack cuts the case short --------------------------------------------------------------------------


def test_a_refused_product_request_ends_rejected_with_nothing_executed(tools: ToolServer) -> None:
    run = drive(tools, [Reply(400, b.VLLM_AUTO_REFUSAL_WRAPPED)], "f-01", spec=load_stack("vllm"))
    assert len(run.requests) == 1
    assert [(r.end, r.executions, r.guard_events, r.final_answer) for r in run.records] == [("rejected", [], [], None)]
    assert run.received == []


# ---- the model channel --------------------------------------------------------------------------------------


def test_the_model_channel_sends_one_request_and_scores_the_first_answer(tools: ToolServer) -> None:
    replies = [call("form_entity", name="Blue Harbor", entity_type="LLC", state="DE"), prose("unused")]
    run = drive(tools, replies, "f-01", model=True)
    assert len(run.requests) == 1
    (only,) = run.records
    assert (only.channel, only.end, only.executions, only.guard_events) == ("model", "first_answer", [], [])
    assert [c.arguments["entity_type"] for c in only.calls] == ["LLC"]  # as the model wrote it: no repair
    assert (only.final_answer, only.prompted_by) == (None, None)
    assert run.received == []  # the model channel never calls the tool server


def test_the_model_channel_takes_prose_as_its_first_answer(tools: ToolServer) -> None:
    run = drive(tools, [prose(STALL)], "f-02", model=True)
    assert [(r.channel, r.end, r.raw_content) for r in run.records] == [("model", "first_answer", STALL)]


def test_a_refused_model_channel_request_ends_rejected(tools: ToolServer) -> None:
    run = drive(tools, [Reply(400, b.VLLM_AUTO_REFUSAL_WRAPPED)], "f-01", model=True, spec=load_stack("vllm"))
    assert len(run.requests) == 1
    assert [(r.channel, r.outcome.value, r.end) for r in run.records] == [("model", "rejected_request", "rejected")]


def test_the_model_channel_request_is_the_product_channels_first_request(tools: ToolServer) -> None:
    """Same case, same sample: the same body, sampling seed included (the channels differ only after it)."""
    model = drive(tools, [call("md5", input="hello")], "f-05", model=True, sample=2)
    product = drive(tools, [call("md5", input="hello")], "f-05", sample=2)
    assert model.requests[0] == product.requests[0]
    assert model.records[0].sampling_seed == product.records[0].sampling_seed is not None


def test_the_product_channel_over_streamable_http_repairs_and_executes(tmp_path: Path) -> None:
    """The same loop with the MCP server on its other transport (streamable HTTP on loopback)."""
    log = tmp_path / "calls.jsonl"
    with McpToolServer("formation", "http", log_path=log) as server:
        http = ToolServer(server, log, load_suite("formation"))
        replies = [call("entity_status", entity_id={"id": "ent_7f3a"}), prose("ent_7f3a is FILED.")]
        run = drive(http, replies, "f-08")
    assert server.describe()["transport"] == "http"
    assert [(r["tool"], r["arguments"]) for r in run.received] == [("entity_status", {"entity_id": "ent_7f3a"})]
    assert run.records[0].executions[0].result == STATUS_7F3A
    assert (run.last.end, run.last.final_answer) == ("answered", "ent_7f3a is FILED.")


def test_a_tool_server_that_stopped_answering_ends_the_case_unscored(tmp_path: Path) -> None:
    """The call never reached a server: not `sent`, flagged, and the case ends as the tool server's failure
    (an unran end: no dimension is scored as the model's)."""
    log = tmp_path / "calls.jsonl"
    server = McpToolServer("formation", "stdio", log_path=log).start()
    stopped = ToolServer(server, log, load_suite("formation"))
    server.close()  # the server is gone before the model's call arrives
    run = drive(stopped, [call("entity_status", entity_id="ent_7f3a"), prose("It is FILED.")], "f-08")
    assert len(run.requests) == 1 and run.received == []
    assert run.last.end == "tool_server_died" and "tool_server:unreachable" in run.last.flags
    assert [(e.sent, e.error) for e in run.last.executions] == [(False, True)]
    assert is_unscored([r.model_dump(mode="json") for r in run.records])
