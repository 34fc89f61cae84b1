"""How a seed ends, over the scripted server: a right and a wrong submit (task success), a constrained
loop (the same call `loop_repeats` times), a mode without loop detection running into the turn cap, and
the store surviving a torn last line and a killed run's partial seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.types import ToolsMode, TurnRecord
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.turn.agent import run_seed
from tests.fakes.scripted import Reply, chat_reply, scripted_server
from tests.test_agent_integrity import context


def call(tool: str, **arguments: object) -> Reply:
    return Reply(200, chat_reply(json.dumps({"name": tool, "arguments": arguments})))


def run(replies: list[Reply], **overrides: object) -> list[TurnRecord]:
    records: list[TurnRecord] = []
    with scripted_server(replies) as (url, _script):
        run_seed(context(url, **overrides), records.append)
    return records


@pytest.mark.server
def test_a_right_submit_succeeds_and_a_wrong_one_fails() -> None:
    seed = load_suite("ops").seeds[0]
    right = run([call("submit", answer=str(seed.expected))], seed_id=seed.id)
    wrong = run([call("submit", answer="certainly-not-the-answer")], seed_id=seed.id)
    assert [(r.end, r.task_success) for r in right] == [("submitted", True)]
    assert [(r.end, r.task_success) for r in wrong] == [("submitted", False)]


@pytest.mark.server
def test_constrained_mode_ends_a_repeated_call_as_a_loop() -> None:
    pod = next(iter(load_suite("ops").seeds[0].data["pods"]))
    records = run([call("pod_status", name=pod)], mode=ToolsMode.CONSTRAINED, turn_cap=10, loop_repeats=3)
    assert [r.end for r in records] == [None, None, "loop"]


@pytest.mark.server
def test_a_mode_without_loop_detection_runs_into_the_turn_cap() -> None:
    pod = next(iter(load_suite("ops").seeds[0].data["pods"]))
    records = run([call("pod_status", name=pod)], mode=ToolsMode.TEXT_TOOLS, turn_cap=4, loop_repeats=3)
    assert [r.end for r in records] == [None, None, None, "turn_cap"]


def test_a_torn_last_line_is_ignored_and_resume_supersedes_partial_seeds(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.create({"run_id": "run", "matrix": {}})
    base = {"cell_id": "c", "turn": 0, "tools_mode": "text-tools", "outcome": "valid_call"}
    finished = {**base, "seed": "s1", "end": "turn_cap"}
    partial = {**base, "seed": "s2"}
    store.turns_path.write_text(json.dumps(finished) + "\n" + json.dumps(partial) + "\n" + '{"cell_id": "c", "se')
    assert [r["seed"] for r in store.read_turns()] == ["s1", "s2"]
    assert store.completed_seeds() == {("c", "s1")}
    assert store.supersede_unfinished() == 1
    assert store.read_turns() == [finished, {**partial, "superseded": True}]
    assert store.next_seed_attempt(("c", "s2")) == 1  # the rerun is a new seed attempt
    assert store.turns_path.with_name("turns.jsonl.torn").read_text() == '{"cell_id": "c", "se\n'
