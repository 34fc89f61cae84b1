"""Task suites, dry-run tools and the mode axis (pure)."""

from __future__ import annotations

import json

import pytest

from orchestrator.core.modes import call_schema
from orchestrator.core.types import Classification, Outcome, ParsedCall, ToolsMode
from orchestrator.runner.modes import build_request, continue_messages, initial_messages, template_sha256
from orchestrator.runner.tasks import answer_correct, execute, load_suite
from orchestrator.serving.registry import REPO_ROOT

SUITES = ["aggregation", "dependency-chain", "ops"]


@pytest.mark.parametrize("name", SUITES)
def test_suites_have_eight_seeds_and_solvable_data(name: str) -> None:
    suite = load_suite(name)
    assert len(suite.seeds) >= 8 and suite.submit_tool == "submit"
    assert (REPO_ROOT / "seeds" / f"{name}.yaml").is_file()


def test_aggregation_seed_is_solvable_through_its_tools() -> None:
    suite = load_suite("aggregation")
    seed = suite.seeds[0]
    ids = execute(suite, seed, ParsedCall(name="list_records", arguments={})).result["record_ids"]
    total = sum(
        execute(suite, seed, ParsedCall(name="read_record", arguments={"record_id": i})).result["amount"] for i in ids
    )
    result = execute(suite, seed, ParsedCall(name="submit", arguments={"answer": total}))
    assert result.submitted and answer_correct(seed.expected, result.answer)


def test_dependency_chain_needs_each_returned_id() -> None:
    suite = load_suite("dependency-chain")
    seed = suite.seeds[3]
    email = next(iter(seed.data["users"]))
    user = execute(suite, seed, ParsedCall(name="find_user", arguments={"email": email})).result["user_id"]
    order = execute(suite, seed, ParsedCall(name="latest_order", arguments={"user_id": user})).result["order_id"]
    total = execute(suite, seed, ParsedCall(name="get_order", arguments={"order_id": order})).result["total"]
    assert total == seed.expected
    guessed = execute(suite, seed, ParsedCall(name="latest_order", arguments={"user_id": "u000"}))
    assert guessed.error and "not found" in guessed.result["error"]


def test_dry_run_is_pure_and_rejects_bad_calls() -> None:
    suite = load_suite("ops")
    seed = suite.seeds[0]
    pod = next(iter(seed.data["pods"]))
    call = ParsedCall(name="pod_status", arguments={"name": pod})
    assert execute(suite, seed, call) == execute(suite, seed, call)
    assert execute(suite, seed, ParsedCall(name="reboot", arguments={})).result == {"error": "unknown tool 'reboot'"}
    bad = execute(suite, seed, ParsedCall(name="pod_status", arguments={"name": pod, "force": True}))
    assert bad.error and "schema:unexpected_property" in bad.result["error"]


@pytest.mark.parametrize(
    ("expected", "answer", "ok"),
    [
        (90, "90", True),
        (90, 90.004, True),
        (90, "1,090", False),
        ("Running", "running", True),
        ("Running", "Pending", False),
    ],
)
def test_answer_scoring(expected: object, answer: object, ok: bool) -> None:
    assert answer_correct(expected, answer) is ok


def test_modes_build_the_right_requests() -> None:
    suite = load_suite("ops")
    tools = suite.tools
    for mode, sends, schema in [
        (ToolsMode.NATIVE, True, False),
        (ToolsMode.NATIVE_HINT, True, False),
        (ToolsMode.TEXT_TOOLS, False, False),
        (ToolsMode.CONSTRAINED, False, True),
    ]:
        messages = initial_messages(mode, suite.system_prompt, suite.seeds[0].request, tools)
        request = build_request(mode, messages, tools)
        assert (request.tools is not None) == sends
        assert (request.response_schema is not None) == schema
        hint_in_prompt = '"arguments"' in messages[0]["content"]
        assert hint_in_prompt == (mode is not ToolsMode.NATIVE)
    assert call_schema(tools)["properties"]["name"]["enum"] == ["pod_status", "submit"]
    assert len({template_sha256(m) for m in ToolsMode}) == 3  # native+hint and text-tools share a template


def test_continuation_form_follows_the_parse_path() -> None:
    suite = load_suite("ops")
    seed = suite.seeds[0]
    call = ParsedCall(name="pod_status", arguments={"name": "x"}, id="abc")
    results = [execute(suite, seed, call)]
    server = Classification(outcome=Outcome.VALID_CALL, parse_path="server", calls=[call], raw_content="")
    openai = continue_messages("openai", server, results, turn=0)
    assert openai[0]["tool_calls"][0]["function"]["arguments"] == json.dumps({"name": "x"})
    assert openai[1] == {
        "role": "tool",
        "tool_call_id": "abc",
        "name": "pod_status",
        "content": json.dumps(results[0].result),
    }
    ollama = continue_messages("ollama", server, results, turn=0)
    assert ollama[0]["tool_calls"][0]["function"]["arguments"] == {"name": "x"}
    text = Classification(outcome=Outcome.VALID_CALL, parse_path="harness", calls=[call], raw_content="{...}")
    text_messages = continue_messages("openai", text, results, turn=0)
    assert [m["role"] for m in text_messages] == ["assistant", "user"]
    assert text_messages[1]["content"].startswith("Result of pod_status:")
