"""The committed BFCL example run (matrices/bfcl-cpu.yaml, real llama.cpp and vLLM CPU): every recorded verdict
is what BFCL's checker gives again offline from the run's own snapshot; the cells' figures are the ones the
README quotes from; a tampered snapshot is refused by `report --reclassify` with the file named and the report
left as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.analysis.report.reclassify import reclassify, run_bfcl_cases
from orchestrator.runner.run.provenance import run_stacks
from orchestrator.runner.store.runstore import RunStore
from tests.cliinprocess import orchestrate
from tests.conftest import committed_runs

BFCL_RUNS = [run for run in committed_runs() if (run / "bfcl" / "cases.jsonl").is_file()]


def test_there_is_a_committed_bfcl_example() -> None:
    assert BFCL_RUNS, "results/examples holds no BFCL run"


@pytest.mark.parametrize("run", BFCL_RUNS, ids=lambda run: run.name)
def test_every_recorded_verdict_is_bfcls_checker_again_from_the_snapshot(run: Path) -> None:
    store = RunStore(run)
    turns = store.read_turns()
    cells = {cell["cell_id"]: cell for cell in store.read_cells()}
    again = reclassify(turns, cells, run_stacks(store), None, run_bfcl_cases(store, cells))
    assert len(again) == len(turns) > 0
    for before, after in zip(turns, again, strict=True):
        assert after["bfcl"] == before["bfcl"], (before["cell_id"], before["seed"])
        assert after["outcome"] == before["outcome"]
    judged = [t for t in turns if t["bfcl"]["valid"] is not None]
    assert any(t["bfcl"]["valid"] != t["bfcl"]["valid_as_said"] for t in judged)  # the README's served/said gap


@pytest.mark.parametrize("run", BFCL_RUNS, ids=lambda run: run.name)
def test_a_tampered_snapshot_is_refused_by_reclassify_naming_the_file(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    report_before = (copy / "report" / "bfcl_cells.csv").read_bytes()
    snapshot = copy / "bfcl" / "cases.jsonl"
    lines = snapshot.read_text().splitlines()
    case = json.loads(lines[0])
    case["ground_truth"] = [{"anything": {}}] if case["ground_truth"] else None
    snapshot.write_text("\n".join([json.dumps(case, sort_keys=True), *lines[1:]]) + "\n")
    done = orchestrate("report", str(copy), "--reclassify")
    assert done.returncode == 2
    assert f"{snapshot}: not the BFCL cases this run recorded (sha256" in done.stderr, done.stderr
    assert (copy / "report" / "bfcl_cells.csv").read_bytes() == report_before
