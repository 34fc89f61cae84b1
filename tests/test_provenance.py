"""Provenance that survives resume, driven by stored runs only (no server): the first committed example run
(schema version 1, now a fixture) still reports the figures it was committed with, unknown schema versions are
refused with a clear error, a resume with drifted stacks/seeds/templates refuses unless allowed (and records the drift),
`--reclassify` uses the run's own stack snapshot, model identity says verified or claimed, and the port is
no part of a stack config's identity."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis.report.reclassify import reclassify
from orchestrator.analysis.report.report import long_table
from orchestrator.runner.config.cellconfig import config_sha256
from orchestrator.runner.run.provenance import drift, fingerprint, git_state, run_stacks
from orchestrator.runner.run.runs import DriftError, resume_run
from orchestrator.runner.store.runstore import RunStore, StoreError
from orchestrator.serving.registry import REPO_ROOT
from tests.conftest import V1_CPU_RUN, committed_runs

EXAMPLE = V1_CPU_RUN


@pytest.fixture
def example(tmp_path: Path) -> RunStore:
    copy = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, copy)
    return RunStore(copy)


def test_the_committed_v1_example_reports_what_it_was_committed_with(example: RunStore) -> None:
    committed = pd.read_csv(EXAMPLE / "report" / "cells_long.csv").set_index("cell_id")
    fresh = long_table(example).set_index("cell_id")
    assert len(fresh) == len(committed) == 32
    for column in ("n_valid", "n_eligible_turns", "n_rejected", "n_non_response", "text"):
        assert fresh[column].tolist() == committed.loc[fresh.index, column].tolist(), column


@pytest.mark.parametrize("run", committed_runs(), ids=lambda run: run.name)
def test_every_committed_example_is_complete_and_reports_what_it_was_committed_with(run: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["finished"] or (manifest.get("resumes") and manifest["resumes"][-1].get("finished"))
    cells = [json.loads(p.read_text()) for p in (run / "cells").glob("*.json")]
    assert cells and {cell["status"] for cell in cells} == {"complete"}
    store = RunStore(run)
    committed = pd.read_csv(run / "report" / "cells_long.csv").set_index("cell_id")
    for table in (long_table(store), long_table(store, do_reclassify=True)):
        fresh = table.set_index("cell_id")
        assert sorted(fresh.index) == sorted(committed.index) == sorted(cell["cell_id"] for cell in cells)
        for column in ("n_valid", "n_eligible_turns", "n_rejected", "n_non_response", "n_distinct_sequences"):
            assert fresh[column].tolist() == committed.loc[fresh.index, column].tolist(), (run.name, column)


def test_reclassifying_the_example_keeps_its_outcomes(example: RunStore) -> None:
    live = long_table(example).set_index("cell_id")
    again = long_table(example, do_reclassify=True).set_index("cell_id")
    assert again["n_valid"].tolist() == live["n_valid"].tolist()
    assert again["n_rejected"].tolist() == live["n_rejected"].tolist()


@pytest.mark.parametrize("target", ["turn", "cell", "manifest"])
def test_an_unknown_schema_version_is_refused_naming_the_file(example: RunStore, target: str) -> None:
    if target == "turn":
        lines = example.turns_path.read_text().splitlines()
        lines[3] = json.dumps({**json.loads(lines[3]), "schema_version": 99})
        example.turns_path.write_text("\n".join(lines) + "\n")
        where = "turns.jsonl:4"
    elif target == "cell":
        path = next(example.cells_dir.glob("*.json"))
        path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 99}))
        where = path.name
    else:
        example.manifest_path.write_text(json.dumps({**example.manifest(), "schema_version": 99}))
        where = "manifest.json"
    with pytest.raises(StoreError, match=rf"{where}.*schema version 99"):
        long_table(example)


def test_a_turn_line_that_is_not_a_record_is_a_clear_error(example: RunStore) -> None:
    lines = example.turns_path.read_text().splitlines()
    example.turns_path.write_text("\n".join([lines[0], "[1, 2]", *lines[1:]]) + "\n")
    with pytest.raises(StoreError, match=r"turns.jsonl:2: not a turn record"):
        example.read_turns()


@pytest.mark.slow
def test_drift_lists_each_changed_file() -> None:
    now = fingerprint(git_state())
    before = json.loads(json.dumps(now))
    before["stacks"]["vllm.yaml"] = "0" * 64
    before["seeds"].pop("ops.yaml")
    before["git_commit"] = "abc"
    assert drift(before, now) == [
        f"git commit abc -> {now['git_commit']}",
        "stacks/vllm.yaml changed",
        "seeds/ops.yaml added",
    ]
    assert drift(now, now) == []


@pytest.mark.slow
def test_a_resume_with_drift_refuses_unless_allowed_and_records_it(
    example: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.runner.run.runs.cleanup", lambda _run_id: [])  # no servers, no Docker here
    # The committed run predates fingerprints: that is itself drift.
    with pytest.raises(DriftError, match="--allow-drift"):
        resume_run(example.dir)
    current = fingerprint(git_state())
    example.update_manifest(provenance={**current, "templates": {**current["templates"], "tool_list.j2": "x"}})
    with pytest.raises(DriftError, match=r"templates/tool_list\.j2 changed"):
        resume_run(example.dir)
    resume_run(example.dir, allow_drift=True)
    (record,) = example.manifest()["resumes"]
    assert record["allowed"] and record["drift"] == ["templates/tool_list.j2 changed"]


def test_reclassify_uses_the_runs_own_stack_snapshot(example: RunStore) -> None:
    cells = {cell["cell_id"]: cell for cell in example.read_cells()}
    refused = [t for t in example.read_turns() if t["cell_id"] == "vllm-default__qwen2.5-coder-0.5b-instruct__native"]
    assert {t["detail"] for t in refused} == {"refused:no_tool_parser"}
    # Without a snapshot, today's signatures apply.
    assert {t["detail"] for t in reclassify(refused, cells, run_stacks(example))} == {"refused:no_tool_parser"}
    # In this run's own definition vLLM's refusal signatures were different: its 400s are plain refusals.
    snapshot = example.dir / "stacks"
    shutil.copytree(REPO_ROOT / "stacks", snapshot)
    text = (snapshot / "vllm.yaml").read_text()
    (snapshot / "vllm.yaml").write_text(text.replace("tool choice requires", "never").replace("to be set", "never"))
    again = reclassify(refused, cells, run_stacks(example))
    assert {t["detail"] for t in again} == {"refused:http_400"}


def test_an_unreadable_snapshot_is_a_clear_error(example: RunStore) -> None:
    (example.dir / "stacks").mkdir()
    (example.dir / "stacks" / "vllm.yaml").write_text("name: vllm\nunknown_field: 1\n")
    with pytest.raises(StoreError, match=r"stacks/vllm\.yaml: the run's stack snapshot"):
        long_table(example, do_reclassify=True)


def test_the_port_is_no_part_of_the_config_identity() -> None:
    cell = json.loads(next((EXAMPLE / "cells").glob("llamacpp-jinja__qwen*native.json")).read_text())
    port = cell["base_url"].rsplit(":", 1)[1]
    moved = json.loads(json.dumps(cell).replace(port, "40404"))
    assert moved["argv"] != cell["argv"]
    assert config_sha256(moved) == config_sha256(cell)
    elsewhere_path = "/other/home/" + Path(cell["model_path"]).name
    elsewhere = {
        **cell,
        "model_path": elsewhere_path,
        "argv": [a.replace(cell["model_path"], elsewhere_path) for a in cell["argv"]],
    }
    assert config_sha256(elsewhere) == config_sha256(cell)
    flagged = {**cell, "argv": [*cell["argv"], "--no-jinja"]}
    assert config_sha256(flagged) != config_sha256(cell)


@pytest.mark.slow
def test_run_outputs_do_not_make_the_tree_dirty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run records the commit and whether the code differed from it; its own results (and other runs'
    beside it) under results/ are outputs, not code. Any other change, tracked or untracked, is dirty."""
    import subprocess

    from orchestrator.runner.run import provenance as provenance_module

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)  # fmt: skip

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-qm", "c")
    monkeypatch.setattr(provenance_module, "REPO_ROOT", tmp_path)
    (tmp_path / "results" / "examples" / "run-1").mkdir(parents=True)
    (tmp_path / "results" / "examples" / "run-1" / "turns.jsonl").write_text("{}\n")
    assert provenance_module.git_state()["dirty"] is False
    (tmp_path / "new_module.py").write_text("y = 2\n")
    assert provenance_module.git_state()["dirty"] is True
    (tmp_path / "new_module.py").unlink()
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance_module.git_state()["dirty"] is True
