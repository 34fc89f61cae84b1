"""The committed streamed example run (matrices/stream-cpu.yaml, real llama.cpp and vLLM CPU): every streamed
turn re-assembled from its side file and re-labelled offline gives the outcome, detail, flags and calls the
live run recorded, and its side files hold every streamed attempt once."""

from __future__ import annotations

import json

import pytest

from orchestrator.analysis.report.reclassify import reclassify
from orchestrator.core.constraints import CONSTRAINT_FLAGS, REQUIRED_IGNORED, UNJUDGED_TRUNCATED
from orchestrator.runner.run.provenance import run_stacks
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.store.streamstore import attempt_key, read_streams
from tests.conftest import committed_runs

STREAMED_RUNS = [run for run in committed_runs() if (run / "streams").is_dir()]


@pytest.fixture(params=STREAMED_RUNS, ids=lambda run: run.name)
def store(request: pytest.FixtureRequest) -> RunStore:
    return RunStore(request.param)


def test_there_is_a_committed_streamed_example() -> None:
    assert STREAMED_RUNS, "results/examples holds no run with streams/"


def _final_attempts(turns: list[dict]) -> list[dict]:
    """Reclassify keeps a retried attempt's recorded verdict (it made it retried): only final ones are relabelled."""
    last: dict[tuple, int] = {}
    for turn in turns:
        key = (turn["cell_id"], turn["seed"], turn.get("seed_attempt", 0), turn["turn"])
        last[key] = max(last.get(key, 0), turn["attempt"])
    return [t for t in turns if t["attempt"] == last[(t["cell_id"], t["seed"], t.get("seed_attempt", 0), t["turn"])]]


def test_every_streamed_turn_relabels_offline_to_what_was_recorded(store: RunStore) -> None:
    turns = store.read_turns()
    cells = {cell["cell_id"]: cell for cell in store.read_cells()}
    streams = read_streams(store.dir)
    streamed = [turn for turn in _final_attempts(turns) if turn.get("stream_ref")]
    assert len(streamed) > 100
    assert {turn["stream_ref"] for turn in streamed} <= set(streams)  # no streamed turn lost its events
    again = {attempt_key(t): t for t in reclassify(turns, cells, run_stacks(store), streams) if t.get("stream_ref")}
    fields = ("outcome", "detail", "calls")
    unjudged = 0
    for turn in streamed:
        fresh = again[attempt_key(turn)]
        assert [fresh[f] for f in fields] == [turn[f] for f in fields], turn["stream_ref"]
        other = [f for f in fresh["flags"] if f not in CONSTRAINT_FLAGS]
        assert sorted(other) == sorted(f for f in turn["flags"] if f not in CONSTRAINT_FLAGS), turn["stream_ref"]
        if UNJUDGED_TRUNCATED in fresh["flags"]:  # a rule added after the run: cut before any call is unjudged
            assert turn["finish_reason"] == "length" and REQUIRED_IGNORED in turn["flags"], turn["stream_ref"]
            assert fresh["constraint_honoured"] is None
            unjudged += 1
        else:
            assert fresh["constraint_honoured"] == turn["constraint_honoured"], turn["stream_ref"]
    assert unjudged < len(streamed)


def test_each_side_file_line_is_one_attempt(store: RunStore) -> None:
    for path in (store.dir / "streams").glob("*.jsonl"):
        keys = [json.dumps(json.loads(line)["key"], sort_keys=True) for line in path.read_text().splitlines()]
        assert len(keys) == len(set(keys)), path.name


def test_a_lost_side_file_keeps_the_recorded_verdicts_and_says_so(store: RunStore, tmp_path) -> None:
    import shutil

    copy = tmp_path / store.dir.name
    shutil.copytree(store.dir, copy)
    lost = sorted((copy / "streams").glob("*.jsonl"))[0]
    lost.unlink()
    run = RunStore(copy)
    turns = run.read_turns()
    cells = {cell["cell_id"]: cell for cell in run.read_cells()}
    again = reclassify(turns, cells, run_stacks(RunStore(copy)), read_streams(copy))
    hit = [(old, new) for old, new in zip(turns, again, strict=True)
           if (old.get("stream_ref") or "").startswith(f"streams/{lost.name}:")]
    assert hit
    for old, new in hit:
        assert (new["outcome"], new["detail"]) == (old["outcome"], old["detail"])
        assert new["flags"] == [*old["flags"], "stream:events_missing"] or new["flags"] == old["flags"]
    assert any("stream:events_missing" in new["flags"] for _, new in hit)
