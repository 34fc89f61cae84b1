"""Task suites, dry-run tools and the mode axis (pure)."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest

from orchestrator.core.modes import call_schema
from orchestrator.core.types import Classification, Outcome, ParsedCall, ToolsMode
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.suites.tasks import Seed, Suite, answer_correct, execute
from orchestrator.runner.turn.prompts import build_request, continue_messages, initial_messages, template_sha256
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
    seed = suite.seeds[0]  # email -> user -> order -> total
    email = EMAIL.search(seed.request).group()  # the table also holds users nobody asked about
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
    openai = continue_messages("openai", server, results, turn=0, mode=ToolsMode.NATIVE)
    assert openai[0]["tool_calls"][0]["function"]["arguments"] == json.dumps({"name": "x"})
    assert openai[1] == {
        "role": "tool",
        "tool_call_id": "abc",
        "name": "pod_status",
        "content": json.dumps(results[0].result),
    }
    ollama = continue_messages("ollama", server, results, turn=0, mode=ToolsMode.NATIVE)
    assert ollama[0]["tool_calls"][0]["function"]["arguments"] == {"name": "x"}
    text = Classification(outcome=Outcome.VALID_CALL, parse_path="harness", calls=[call], raw_content="{...}")
    text_messages = continue_messages("openai", text, results, turn=0, mode=ToolsMode.TEXT_TOOLS)
    assert [m["role"] for m in text_messages] == ["assistant", "user"]
    assert text_messages[1]["content"].startswith("Result of pod_status:")


# --- Seeds differ in substance: a scripted solver through the dry-run tools -------------------------------------

POD = re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b")
EMAIL = re.compile(r"[a-z0-9._+-]+@[a-z0-9.-]+\.[a-z]+")
USER_ID = re.compile(r"\b(?:u\d{3,5}|usr_\d{4}|\d{5})\b")
REGION = re.compile(r"\b(north|south|east|west)\b")


class Solver:
    """An ideal agent: reads the request, makes only the calls the task needs, submits. Counts its calls."""

    def __init__(self, suite: Suite, seed: Seed) -> None:
        self.suite, self.seed, self.calls = suite, seed, 0

    def call(self, tool: str, /, **arguments: Any) -> Any:
        self.calls += 1
        result = execute(self.suite, self.seed, ParsedCall(name=tool, arguments=arguments))
        assert not result.error, (self.seed.id, tool, arguments, result.result)
        return result

    def solve(self) -> Any:
        answer = {"ops": self.ops, "aggregation": self.aggregation, "dependency-chain": self.chain}[self.suite.suite]()
        return self.call("submit", answer=answer).answer

    def ops(self) -> Any:
        names = [n for n in POD.findall(self.seed.request) if any(c.isdigit() for c in n)]
        rows = [self.call("pod_status", name=name).result for name in names]
        phases = [row["status"] if isinstance(row["status"], str) else row["status"]["phase"] for row in rows]
        restarts = [
            int(row["restarts"]) if "restarts" in row else sum(c["restarts"] for c in row["containers"]) for row in rows
        ]
        return str(
            {
                "status": lambda: phases[0],
                "restarts": lambda: restarts[0],
                "termination": lambda: rows[0]["last_termination"]["reason"],
                "compare-restarts": lambda: names[restarts.index(max(restarts))],
                "count-running": lambda: phases.count("Running"),
                "find-unhealthy": lambda: next(n for n, p in zip(names, phases, strict=True) if p != "Running"),
            }[self.seed.template]()
        )

    def aggregation(self) -> float:
        ids = self.call("list_records").result["record_ids"]
        rows = [self.call("read_record", record_id=i).result for i in ids]

        def amount(row: dict[str, Any]) -> float:
            if "amount_cents" in row:
                return row["amount_cents"] / 100
            value = row["amount"]
            return float(value["value"] if isinstance(value, dict) else value)

        amounts = [amount(row) for row in rows]
        if self.seed.template == "sum-region":
            region = REGION.search(self.seed.request).group(1)
            return sum(a for a, row in zip(amounts, rows, strict=True) if row["region"] == region)
        if self.seed.template == "count-above":
            threshold = float(re.search(r"\d+", self.seed.request).group())
            return sum(a > threshold for a in amounts)
        return {"sum": sum, "max": max, "mean": lambda v: round(sum(v) / len(v), 2)}[self.seed.template](amounts)

    def chain(self) -> float:
        if self.seed.template == "total-by-user-id":
            user = USER_ID.search(self.seed.request).group()
        else:
            email = EMAIL.search(self.seed.request).group()
            found = self.call("find_user", email=email).result
            if self.seed.template == "referrer-total":
                found = self.call("find_user", email=found["referred_by"]).result
            user = found["user_id"]
        order_id = self.call("latest_order", user_id=user).result["order_id"]
        order = self.call("get_order", order_id=order_id).result
        if self.seed.template == "item-count":
            return sum(item["qty"] for item in order["items"])
        if "total_cents" in order:
            return order["total_cents"] / 100
        total = order["total"]
        return float(total["amount"] if isinstance(total, dict) else total)


def solved(name: str) -> list[tuple[Seed, int, Any]]:
    """(seed, tool calls the ideal solver needed including submit, its answer) for every seed of a suite."""
    suite = load_suite(name)
    rows = []
    for seed in suite.seeds:
        solver = Solver(suite, seed)
        answer = solver.solve()
        rows.append((seed, solver.calls, answer))
    return rows


def skeleton(request: str) -> str:
    """The request with its entities masked: what is left is the wording."""
    request = EMAIL.sub("<email>", request)
    request = POD.sub(lambda m: "<pod>" if any(c.isdigit() for c in m.group()) else m.group(), request)
    request = USER_ID.sub("<id>", request)
    request = REGION.sub("<region>", request)
    request = re.sub(r"\b\d+(\.\d+)?\b", "<n>", request)
    return re.sub(r"namespace \w+", "namespace <ns>", request)


def shape(value: Any) -> Any:
    """A tool result's structure: key paths and leaf types, values dropped."""
    if isinstance(value, dict):
        return tuple(sorted((k, shape(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", shape(value[0]) if value else None)
    return type(value).__name__


@pytest.mark.parametrize("name", SUITES)
def test_every_seed_is_solved_by_the_scripted_solver(name: str) -> None:
    for seed, _calls, answer in solved(name):
        assert answer_correct(seed.expected, answer), (seed.id, seed.expected, answer)


@pytest.mark.parametrize("name", SUITES)
def test_suites_differ_in_substance(name: str) -> None:
    rows = solved(name)
    seeds = [seed for seed, _, _ in rows]
    assert len(seeds) >= 10
    assert [s.id for s in seeds] == [f"{s.id.rsplit('-', 1)[0]}-{i:02d}" for i, s in enumerate(seeds)]
    # What is asked: at least three templates, and at least three wordings once entities are masked.
    assert len({s.template for s in seeds}) >= 3
    assert len({skeleton(s.request) for s in seeds}) >= 3
    # How much work it is: the number of calls an ideal solver needs varies (at least three different counts).
    steps = [calls for _, calls, _ in rows]
    assert len(set(steps)) >= 3, steps
    # What the data looks like: tables of different sizes and rows of different structure.
    assert len({sum(len(table) for table in s.data.values()) for s in seeds}) >= 3
    tables = [table for s in seeds for table in s.data.values()]
    assert len({shape(row) for t in tables for row in t.values()}) >= 3
    # The answers themselves differ.
    assert len({json.dumps(s.expected) for s in seeds}) >= len(seeds) // 2
    # Matrices run the first `count` seeds: the first 8 already vary in template and in steps.
    assert len({s.template for s in seeds[:8]}) >= 3 and len(set(steps[:8])) >= 2


@pytest.mark.parametrize("name", SUITES)
def test_seed_files_are_what_make_seeds_writes(name: str) -> None:
    spec = importlib.util.spec_from_file_location("make_seeds", REPO_ROOT / "scripts" / "make_seeds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render(module.build()[name]) == (REPO_ROOT / "seeds" / f"{name}.yaml").read_text()
