"""`orchestrator.load_run(path)`: the notebook entry point, on committed runs and a damaged one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import orchestrator
from orchestrator.runner.store.runstore import StoreError
from tests.conftest import committed_runs

CPU = next(run for run in committed_runs() if run.name == "20261203T131653Z-cpu-87d008")


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()]


def plain(column: pd.Series) -> list:
    return column.astype(object).where(column.notna(), None).tolist()


def test_typed_frames_match_the_records_and_the_long_table() -> None:
    loaded = orchestrator.load_run(CPU)
    raw = records(CPU)
    turns, cells = loaded.turns, loaded.cells
    assert loaded.run_id == CPU.name and len(turns) == len(raw)
    for name in ("stack", "stack_config", "tools_mode", "outcome", "model", "cell_id"):
        assert isinstance(turns[name].dtype, pd.CategoricalDtype), name
    assert all(isinstance(cells[name].dtype, pd.CategoricalDtype) for name in ("tools_mode", "stack", "model"))
    assert str(turns["http_status"].dtype) == "Int64" and str(turns["latency_s"].dtype) == "Float64"
    assert plain(turns["latency_s"]) == [r["latency_s"] for r in raw]
    prompts = plain(turns["prompt_tokens"])
    assert prompts == [r["tokens"]["prompt"] for r in raw] and None in prompts  # a refused turn has no count
    assert turns["outcome"].astype(str).tolist() == [r["outcome"] for r in raw]
    # The long table's counts are the counted turns' outcomes, cell by cell.
    valid = turns[turns["counted"] & (turns["outcome"] == "valid_call")].groupby("cell_id", observed=False).size()
    expected = cells.set_index("cell_id")["n_valid"]
    assert valid.reindex(expected.index, fill_value=0).tolist() == expected.tolist()


def test_superseded_records_are_not_counted(tmp_path: Path) -> None:
    run = tmp_path / CPU.name
    shutil.copytree(CPU, run)
    lines = records(run)
    lines[0]["superseded"] = True
    (run / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    turns = orchestrator.load_run(run).turns
    assert turns["superseded"].tolist()[:2] == [True, False]
    assert turns["counted"].tolist()[:2] == [False, True] and turns["counted"].sum() == len(lines) - 1


def test_a_damaged_line_is_one_error_naming_it(tmp_path: Path) -> None:
    run = tmp_path / CPU.name
    shutil.copytree(CPU, run)
    lines = (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4].replace('"outcome":"', '"outcome":"Not_')
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(StoreError, match=r"turns\.jsonl:5"):
        orchestrator.load_run(run)
