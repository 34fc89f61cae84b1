"""The store and report over synthetic records (no server): a seed whose server died is never finished,
its rerun supersedes its records without deleting them, statistics count each seed once, and task success
is taken only over seeds that ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.report.report import long_table
from orchestrator.runner.store.runstore import RunStore, counted_turns

BASE: dict[str, Any] = {
    "run_id": "r",
    "cell_id": "c",
    "suite": "ops",
    "attempt": 0,
    "model": "m",
    "stack": "llamacpp",
    "stack_config": "llamacpp-jinja",
    "tools_mode": "text-tools",
    "hint": True,
    "http_status": 200,
    "parse_path": "harness",
}


def turn(seed: str, number: int, outcome: str, **extra: Any) -> dict[str, Any]:
    return {**BASE, "seed": seed, "turn": number, "outcome": outcome, **extra}


def make_run(tmp_path: Path, records: list[dict[str, Any]], cell: dict[str, Any] | None = None) -> RunStore:
    store = RunStore(tmp_path / "run")
    store.create({"run_id": "run", "matrix": {"bootstrap": {"resamples": 200}}})
    store.turns_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    store.write_cell("c", {"cell_id": "c", "order": 0, "stack_label": "llamacpp-jinja", "stack": "llamacpp",
                           "model": "m", "tools_mode": "text-tools", "status": "complete", **(cell or {})})  # fmt: skip
    return store


DIED_THEN_RERUN = [
    turn("s1", 0, "valid_call"),
    turn("s1", 1, "non_response", end="server_died"),
    turn("s2", 0, "valid_call", end="turn_cap"),
    turn("s1", 0, "no_call_prose", seed_attempt=1, end="prose"),
]


def test_a_seed_whose_server_died_is_not_complete_and_gets_a_new_attempt(tmp_path: Path) -> None:
    store = make_run(tmp_path, DIED_THEN_RERUN[:3])
    assert store.completed_seeds() == {("c", "s2")}
    assert store.next_seed_attempt(("c", "s1")) == 1
    assert store.next_seed_attempt(("c", "s3")) == 0


def test_resume_supersedes_the_aborted_runs_and_keeps_every_record(tmp_path: Path) -> None:
    partial = turn("s3", 0, "valid_call")  # a killed run's unfinished seed
    store = make_run(tmp_path, [*DIED_THEN_RERUN[:3], partial])
    assert store.supersede_unfinished() == 3  # s1's run that died (2 records) and s3's cut-short one
    assert [(r["seed"], r.get("end"), r.get("superseded", False)) for r in store.read_turns()] == [
        ("s1", None, True),
        ("s1", "server_died", True),
        ("s2", "turn_cap", False),
        ("s3", None, True),
    ]
    assert store.next_seed_attempt(("c", "s1")) == 1 and store.next_seed_attempt(("c", "s3")) == 1
    assert store.supersede_unfinished() == 0  # a second resume marks nothing again
    assert [r["seed"] for r in counted_turns(store.read_turns())] == ["s2"]


def test_marking_superseded_keeps_every_record(tmp_path: Path) -> None:
    store = make_run(tmp_path, DIED_THEN_RERUN[:3])
    assert store.mark_superseded({("c", "s1")}) == 2
    rows = store.read_turns()
    assert len(rows) == 3
    assert [r.get("superseded", False) for r in rows] == [True, True, False]


def test_counted_turns_skip_superseded_and_died_runs() -> None:
    counted = counted_turns(DIED_THEN_RERUN)
    assert [(r["seed"], r.get("seed_attempt", 0), r["outcome"]) for r in counted] == [
        ("s2", 0, "valid_call"),
        ("s1", 1, "no_call_prose"),
    ]


def test_report_counts_each_seed_once_after_a_rerun(tmp_path: Path) -> None:
    store = make_run(tmp_path, DIED_THEN_RERUN)
    row = long_table(store).iloc[0]
    # s1's aborted run (1 valid of 1 eligible) must not count: s1 = 0/1 (prose), s2 = 1/1.
    assert (row["n_valid"], row["n_eligible_turns"], row["n_seeds"]) == (1, 2, 2)
    assert row["per_seed_mean"] == pytest.approx(0.5)
    assert (row["n_superseded_records"], row["seeds_server_died"]) == (2, 1)


def test_task_success_is_only_over_seeds_that_ran(tmp_path: Path) -> None:
    records = [
        turn("s1", 0, "valid_call", end="submitted", task_success=True),
        turn("s2", 0, "rejected_request", http_status=400, end="rejected"),
        turn("s3", 0, "non_response", http_status=None, end="retries_exhausted"),
        turn("s4", 0, "valid_call", end="submitted", task_success=False),
    ]
    row = long_table(make_run(tmp_path, records)).iloc[0]
    assert row["seeds_ran"] == 2
    assert row["task_success"] == pytest.approx(0.5)


def test_report_counts_truncation_constraint_empty_and_overflow(tmp_path: Path) -> None:
    records = [
        turn("s1", 0, "valid_call", finish_reason="length", flags=["truncated:max_tokens"]),
        turn("s1", 1, "unparseable_text", flags=["truncated:max_tokens", "constraint:violated"], end="unparseable"),
        turn("s2", 0, "non_response", detail="empty:reasoning_only", end="empty"),
        turn("s3", 0, "valid_call"),
        turn("s3", 1, "rejected_request", http_status=400, detail="refused:context_overflow", end="context_overflow"),
    ]
    row = long_table(make_run(tmp_path, records)).iloc[0]
    assert (row["n_truncated"], row["n_constraint_violated"]) == (2, 1)
    assert (row["n_empty"], row["n_reasoning_only"]) == (1, 1)
    assert (row["n_context_overflow"], row["seeds_context_overflow"]) == (1, 1)
    # Context overflow and empty answers stay out of the denominator; s3's task was cut short by the stack.
    assert (row["n_eligible_turns"], row["seeds_ran"]) == (3, 2)


def test_a_cell_whose_server_died_for_good_says_so(tmp_path: Path) -> None:
    records = [*DIED_THEN_RERUN[:3]]
    row = long_table(make_run(tmp_path, records, {"status": "server_died"})).iloc[0]
    assert row["text"].endswith("server_died")
    assert row["n_seeds"] == 1  # only s2 finished


def test_a_cell_refused_only_by_context_overflow_does_not_read_as_a_tool_refusal(tmp_path: Path) -> None:
    overflow = {"http_status": 400, "detail": "refused:context_overflow", "end": "context_overflow"}
    records = [turn("s1", 0, "rejected_request", **overflow), turn("s2", 0, "rejected_request", **overflow)]
    row = long_table(make_run(tmp_path, records)).iloc[0]
    assert row["text"] == "overflow n2" and row["n_rejected"] == 2
    mixed = [*records, turn("s3", 0, "valid_call", end="turn_cap")]
    row = long_table(make_run(tmp_path / "b", mixed)).iloc[0]
    assert row["text"].endswith(" ovf2")


def test_unusable_2xx_answers_and_shared_caches_are_counted(tmp_path: Path) -> None:
    records = [
        turn("s1", 0, "non_response", detail="body:no_message", end="empty", flags=["cache:shared"]),
        turn("s2", 0, "valid_call", end="turn_cap", flags=["cache:shared"]),
    ]
    row = long_table(make_run(tmp_path, records)).iloc[0]
    assert (row["n_unusable_2xx"], row["n_empty"], row["n_cache_shared"]) == (1, 0, 2)
