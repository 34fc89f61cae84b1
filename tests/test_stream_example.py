"""The committed streamed example run (matrices/stream-cpu.yaml, real llama.cpp and vLLM CPU): every streamed
turn re-assembled from its side file and re-labelled offline gives the outcome, detail, flags and calls the
live run recorded, and its side files hold every streamed attempt once."""

from __future__ import annotations

import json

import pytest

from orchestrator.analysis.reclassify import reclassify
from orchestrator.runner.provenance import run_stacks
from orchestrator.runner.store import RunStore
from orchestrator.runner.streamstore import attempt_key, read_streams
from tests.conftest import committed_runs

STREAMED_RUNS = [run for run in committed_runs() if (run / "streams").is_dir()]


@pytest.fixture(params=STREAMED_RUNS, ids=lambda run: run.name)
def store(request: pytest.FixtureRequest) -> RunStore:
    return RunStore(request.param)


def test_there_is_a_committed_streamed_example() -> None:
    assert STREAMED_RUNS, "results/examples holds no run with streams/"


def test_every_streamed_turn_relabels_offline_to_what_was_recorded(store: RunStore) -> None:
    turns = store.read_turns()
    cells = {cell["cell_id"]: cell for cell in store.read_cells()}
    streams = read_streams(store.dir)
    streamed = [turn for turn in turns if turn.get("stream_ref")]
    assert len(streamed) > 100
    assert {attempt_key(turn) for turn in streamed} <= set(streams)  # no streamed turn lost its events
    again = {attempt_key(t): t for t in reclassify(turns, cells, run_stacks(store.dir), streams) if t.get("stream_ref")}
    fields = ("outcome", "detail", "calls", "constraint_honoured")
    for turn in streamed:
        fresh = again[attempt_key(turn)]
        assert [fresh[f] for f in fields] == [turn[f] for f in fields], turn["stream_ref"]
        assert sorted(fresh["flags"]) == sorted(turn["flags"]), turn["stream_ref"]


def test_each_side_file_line_is_one_attempt(store: RunStore) -> None:
    for path in (store.dir / "streams").glob("*.jsonl"):
        keys = [json.dumps(json.loads(line)["key"], sort_keys=True) for line in path.read_text().splitlines()]
        assert len(keys) == len(set(keys)), path.name
