"""The run directory's contract (core/runcontract.py, runner/store/rundir.py): a turn record written by the runner's
store reads back, field for field, through every reader of a run; versions old and unknown."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.compare.rundiff import load_run as diff_run
from orchestrator.analysis.report.notebook import load_run as notebook_run
from orchestrator.analysis.report.report import long_table
from orchestrator.analysis.triage.triage import load_facts
from orchestrator.cli.outcomerows import STATS_FIELDS, TurnOutcomeRow, decode_outcome_rows, outcome_frame
from orchestrator.core.jsonl import read_jsonl_batches
from orchestrator.core.runcontract import READERS, CellFile, RunManifest, upgraded
from orchestrator.core.types import KNOWN_SCHEMA_VERSIONS, SCHEMA_VERSION, TurnRecord
from orchestrator.runner.store.rundir import RunDir, open_run
from orchestrator.runner.store.runstore import RunStore, StoreError
from orchestrator.runner.store.turnview import FIRST_TURN_FIELDS, OFFSET_KEY, REPORT_FIELDS
from tests.conftest import committed_runs

SMALL = next(run for run in committed_runs() if run.name == "20261203T173011Z-diffcheck-98d599")
SEED = "ops-roundtrip"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    target = tmp_path / SMALL.name
    shutil.copytree(SMALL, target, ignore=shutil.ignore_patterns("report"))
    return target


def every_field(base: dict[str, Any]) -> TurnRecord:
    """A record of one of the run's cells with every field set, each (where its type allows) to a value other
    than its default, so a reader that drops or defaults a field shows it. Not superseded: the counted readers
    (diff, triage) would rightly leave it out."""
    values: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "run_id": base["run_id"], "cell_id": base["cell_id"], "seed": SEED,
        "suite": base["suite"], "turn": 0, "attempt": 1, "model": base["model"], "stack": base["stack"],
        "stack_config": base["stack_config"], "stack_version": "b1-roundtrip", "tools_mode": base["tools_mode"],
        "hint": True, "http_status": 200, "parser": "chat-template", "parse_path": "harness",
        "outcome": "valid_call", "detail": "recovered:json", "error": {"type": "http_500", "body": {"e": 1}},
        "latency_s": 1.25, "tokens": {"prompt": 11, "completion": 7}, "raw_content": "{\"name\": \"pod_status\"}",
        "raw_tool_calls": [{"id": "c1"}], "calls": [{"name": "pod_status", "arguments": {"name": "web-0"}, "id": "c1"}],
        "text_call_recoverable": True, "call_format": "json",
        "text_calls": [{"name": "pod_status", "arguments": {"name": "web-0"}, "id": None}],
        "raw_body": {"choices": [{"finish_reason": "stop"}]}, "stream": True, "stream_ref": "streams/x.jsonl:3",
        "stream_facts": {"ttfb_s": 0.5, "cut": None}, "tool_choice": "required", "parallel_tool_calls": False,
        "constraint_honoured": True, "prompt_tokens_rendered": 12, "finish_reason": "stop",
        "flags": ["truncated:max_tokens"], "seed_attempt": 2, "sample": 3, "sampling_seed": 1234,
        "superseded": False, "prompt_cache": {"cleared": "slot"}, "end": "submitted", "task_success": True,
        "channel": "product", "without": "dedup", "guard_events": [{"guard": "g", "fired": True, "changed": False}],
        "executions": [{"call": {"name": "pod_status", "arguments": {}, "id": None}, "result": "ok", "sent": True}],
        "prompted_by": "stall", "final_answer": "web-0 is up", "category": "simple_python",
        "bfcl": {"category": "simple_python", "id": SEED, "valid": False, "valid_as_said": True,
                 "error_type": "ast_decoder:decoder_failed"},
    }  # fmt: skip
    assert set(values) == set(TurnRecord.model_fields), "a new record field: give it a value here"
    return TurnRecord.model_validate(values)


def write_through_store(run: Path) -> dict[str, Any]:
    """The record appended by the runner's own writing path (RunStore.append_turn), as JSON it was written. Its
    attempt 1 is a retry: the turn's first attempt is appended before it, as the runner writes them (a retry
    without its first attempt is a lost record to every reader)."""
    base = json.loads((run / "turns.jsonl").read_text().splitlines()[0])
    # A cell of its own, sample 3 (a record's sample is its cell's: the cell id carries it), planning its one seed.
    cell = json.loads((run / "cells" / f"{base['cell_id']}.json").read_text())
    base["cell_id"] = cell["cell_id"] = f"{cell['cell_id']}__sample-3"
    cell |= {"sample": 3, "seeds": [SEED], "order": 99}
    (run / "cells" / f"{cell['cell_id']}.json").write_text(json.dumps(cell))
    record = every_field(base)
    store = RunStore(run)
    store.append_turn(record.model_copy(update={"attempt": 0, "end": None}))
    store.append_turn(record)
    store.close()
    written = json.loads((run / "turns.jsonl").read_text().splitlines()[-1])
    assert written == record.model_dump(mode="json")  # every field written, the version included
    return written


def ours(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The every-field record (its seed's retry; the first attempt before it is the store's too)."""
    [found] = [r for r in records if r.get("seed") == SEED and r.get("attempt") == 1]
    return found


def test_a_record_written_by_the_store_survives_every_reader(run: Path) -> None:
    written = write_through_store(run)
    full = ours(open_run(run).read_turns())
    assert full == written  # the full reader (report --reclassify, triage, diff, ablation)
    view = ours(open_run(run).read_turns(view=True))  # the report's lean view: its fields, all of them
    assert {k: v for k, v in view.items() if k != OFFSET_KEY} == {
        k: written[k] for k in [*REPORT_FIELDS, *FIRST_TURN_FIELDS]
    }
    assert open_run(run).read_records_at([view[OFFSET_KEY]])[view[OFFSET_KEY]] == written  # the drill-down's read

    triaged = load_facts(run)[written["cell_id"]].turns
    assert ours(triaged) == written
    compared = diff_run(run).turns[written["cell_id"]]
    assert ours(compared) == written

    rows = [r for batch in read_jsonl_batches(run / "turns.jsonl", TurnOutcomeRow, decode_outcome_rows)
            for r in batch if r["seed"] == SEED]  # fmt: skip
    [row] = [r for r in rows if r["attempt"] == 1]
    assert row == {k: written[k] for k in STATS_FIELDS}  # `orchestrate stats`' rows
    frame = outcome_frame([rows])  # the seed run whole: the retry with its first attempt
    [retry] = frame[frame["attempt"] == 1].to_dict("records")
    assert retry["seed_attempt"] == 2 and retry["stack_config"] == written["stack_config"]


def records_of_cell(run: Path, cell: str) -> int:
    table = long_table(open_run(run))
    return int(table.loc[table["cell_id"] == cell, "n_turn_records"].iloc[0])


def records_of_first_cell(run: Path) -> int:
    return records_of_cell(run, json.loads((run / "turns.jsonl").read_text().splitlines()[0])["cell_id"])


def test_a_record_written_by_the_store_survives_load_run(run: Path) -> None:
    before = records_of_first_cell(run)
    written = write_through_store(run)
    turns = notebook_run(run).turns
    [row] = turns[(turns["seed"] == SEED) & (turns["attempt"] == 1)].to_dict("records")
    plain = {"prompt_tokens": 11, "completion_tokens": 7, "flags": "truncated:max_tokens", "counted": True}
    plain |= {f"bfcl_{key}": written["bfcl"][key] for key in ("valid", "valid_as_said", "error_type")}
    for column in turns.columns:
        expected = plain[column] if column in plain else written[column]
        assert row[column] == expected, column
    assert before == 21 and records_of_cell(run, written["cell_id"]) == 2  # the long table counts it and its first


def test_a_record_without_a_version_reads_as_version_1(run: Path) -> None:
    lines = (run / "turns.jsonl").read_text().splitlines()
    old = {k: v for k, v in json.loads(lines[0]).items() if k != "schema_version"}
    (run / "turns.jsonl").write_text("\n".join([json.dumps(old), *lines[1:]]) + "\n")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "schema_version"}))
    store = open_run(run)
    assert store.run_manifest().schema_version == 1
    for view in (True, False):
        first = store.read_turns(view=view)[0]
        assert "schema_version" not in first and first["seed"] == old["seed"]
    assert upgraded("x", dict(old)) == old  # version 1's reader: its fields read as they are


@pytest.mark.parametrize("target", ["turn", "cell", "manifest"])
def test_a_newer_version_is_one_clear_error(run: Path, target: str) -> None:
    if target == "turn":
        path = run / "turns.jsonl"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines[:2], json.dumps({**json.loads(lines[2]), "schema_version": 7}), *lines[3:]]))
    else:
        path = run / "manifest.json" if target == "manifest" else next((run / "cells").glob("*.json"))
        path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 7}))
    with pytest.raises(StoreError) as caught:
        long_table(open_run(run))
    known = ", ".join(str(v) for v in sorted(KNOWN_SCHEMA_VERSIONS))
    assert f"schema version 7 is unknown to this orchestrator (it reads {known})" in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_every_older_version_has_a_reader() -> None:
    assert set(READERS) == KNOWN_SCHEMA_VERSIONS - {SCHEMA_VERSION}


def test_the_committed_runs_fit_the_typed_models_key_for_key() -> None:
    for directory in committed_runs():
        data = json.loads((directory / "manifest.json").read_text())
        manifest = RunManifest.model_validate(data)
        assert manifest.run_id == directory.name and manifest.matrix
        assert set(data) <= set(RunManifest.model_fields), sorted(set(data) - set(RunManifest.model_fields))
        for path in (directory / "cells").glob("*.json"):
            cell = json.loads(path.read_text())
            assert CellFile.model_validate(cell).cell_id == path.stem
            assert set(cell) <= set(CellFile.model_fields), sorted(set(cell) - set(CellFile.model_fields))  # typed


def test_a_mistyped_cell_file_is_named(run: Path) -> None:
    path = next((run / "cells").glob("*.json"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "order": "first"}))
    with pytest.raises(StoreError, match=rf"{path.name}: not a cell file \(field 'order'"):
        open_run(run).read_cells()


@pytest.mark.parametrize("do_reclassify", [False, True])
def test_a_command_reads_the_manifest_once(run: Path, do_reclassify: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted at the file: any store (the command's own, or one made on the side) that reads manifest.json."""
    from orchestrator.runner.store.runstore import RunStore

    reads: list[Path] = []
    read = RunStore.manifest

    def counting(self: RunStore) -> dict[str, Any]:
        reads.append(self.manifest_path)
        return read(self)

    monkeypatch.setattr(RunStore, "manifest", counting)
    store = RunDir(run)
    long_table(store, do_reclassify=do_reclassify)
    assert reads == [run / "manifest.json"]
    store.update_manifest(config_mismatch=[])  # a write is read back afresh
    assert store.manifest()["config_mismatch"] == [] and len(reads) >= 2


# Commands that write into a run directory keep the runner's store: `matrix --resume` (cli/execution.py) and
# `images --into` (cli/images_command.py). Every other command reads a run through runner/store/rundir.py.
WRITERS = {("cli", "execution.py"), ("cli", "images_command.py")}


def test_analysis_and_cli_open_recorded_runs_through_the_reader() -> None:
    package = Path(__file__).resolve().parent.parent / "orchestrator"
    opened = []
    for folder in ("analysis", "cli"):
        for path in sorted((package / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                called = node.func if isinstance(node, ast.Call) else None
                name = getattr(called, "id", None) or getattr(called, "attr", None)
                if name == "RunStore":
                    opened.append((folder, path.name, node.lineno))
    assert {(folder, name) for folder, name, _ in opened} <= WRITERS, opened
    assert opened, "the writers' own opening is found: the check sees RunStore calls"


@pytest.mark.slow  # start_run asks git for the checkout's state
def test_a_new_runs_manifest_fits_the_typed_model_key_for_key(tmp_path: Path) -> None:
    """What a run writes today (the committed runs predate some keys: suites_snapshot, executor) is typed too."""
    from orchestrator.runner.config.matrixfile import load_matrix
    from orchestrator.runner.executors.dispatch import ExecutorChoice, record_executor
    from orchestrator.runner.run.runs import finish_run, start_run
    from orchestrator.serving.registry import REPO_ROOT

    path = REPO_ROOT / "matrices" / "cpu.yaml"
    matrix, digest = load_matrix(path)
    store = start_run(matrix, path, digest, tmp_path)
    record_executor(store, ExecutorChoice(), resumed=False)
    finish_run(store, wall_s=1.0, resumed=False)
    data = json.loads(store.manifest_path.read_text())
    assert {"suites_snapshot", "executor", "provenance"} <= set(data)
    assert set(data) <= set(RunManifest.model_fields), sorted(set(data) - set(RunManifest.model_fields))
    assert RunManifest.model_validate(data).suites_snapshot == data["suites_snapshot"]


def test_a_record_a_reader_changed_is_labelled_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite (supersede marks) writes what it read: a changed record must carry the version of its shape."""
    from orchestrator.core import runcontract

    old = {"cell_id": "c", "seed": "s"}  # no schema_version: version 1
    assert runcontract.upgraded("x", old) is old  # today's readers keep a v1 record as it is: written back as is
    monkeypatch.setitem(runcontract.READERS, 1, lambda data: {**data, "renamed": data["seed"]})
    new = runcontract.upgraded("x", old)
    assert new["renamed"] == "s" and new["schema_version"] == runcontract.SCHEMA_VERSION
    assert runcontract.upgraded("x", new) == new  # read again: not upgraded twice
