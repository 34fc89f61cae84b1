"""One reader, one rule (issue 28: defects 6, 7, 12, 19, 23): a copied turn record, a lost one (a gap in a seed
run, a planned seed a complete cell never ended), a cell file missing while turns name the cell, a bad bootstrap
setting — each is one error naming the file for `report`, `stats`, `triage`, `diff` and `load_run()` alike, and
under `report --allow-damaged` the rest is reported with the damage listed in DAMAGE.md. Each test copies the
committed small run (2 cells, 41 turns) and damages it one way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import load_run
from orchestrator.core.jsonl import MAX_JSON_FILE_BYTES
from orchestrator.core.runrecords import duplicate_indexes, gaps, record_identities, unfinished_seeds
from orchestrator.runner.store.rundir import open_run, read_run
from orchestrator.runner.store.runstore import RunStore, StoreError
from tests.cliinprocess import orchestrate

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "results" / "examples" / "20261203T173011Z-diffcheck-98d599"
TEXT_CELL = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__text-tools"
READERS = ("report", "stats", "triage", "diff")


def copy_run(tmp_path: Path) -> Path:
    run = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    shutil.rmtree(run / "report")
    return run


def lines(run: Path) -> list[bytes]:
    return (run / "turns.jsonl").read_bytes().splitlines(keepends=True)


def with_line_6(run: Path, **fields: object) -> Path:
    """The run with line 6 of turns.jsonl holding `fields` over its own."""
    rows = lines(run)
    rows[5] = json.dumps({**json.loads(rows[5]), **fields}).encode() + b"\n"
    (run / "turns.jsonl").write_bytes(b"".join(rows))
    return run


def ask(reader: str, run: Path) -> tuple[int, str]:
    args = {"report": ["report", str(run)], "stats": ["stats", str(run / "turns.jsonl")],
            "triage": ["triage", str(run)], "diff": ["diff", str(EXAMPLE), str(run)]}[reader]  # fmt: skip
    result = orchestrate(*args)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    return result.returncode, "".join(output.split())  # rich wraps long paths over lines


def refused_by_all(run: Path, *names: str) -> None:
    """Every reader refuses the run with an error naming each of `names`; load_run raises StoreError naming them."""
    for reader in READERS:
        code, output = ask(reader, run)
        assert code != 0, f"{reader} read the damaged run (exit 0)"
        for name in names:
            assert name in output, f"{reader}: the error names no {name}: {output[:600]}"
    with pytest.raises(StoreError) as error:
        load_run(run)
    assert all(name in str(error.value) for name in names)


def reported_with_damage(run: Path, *words: str) -> str:
    result = orchestrate("report", "--allow-damaged", str(run))
    assert result.returncode == 0, result.stdout + result.stderr
    damage = (run / "report" / "DAMAGE.md").read_text()
    assert all(word in damage for word in words), damage
    return damage


def test_a_copied_turn_line_is_refused_by_every_reader_and_never_counted_again(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    original = lines(run)
    (run / "turns.jsonl").write_bytes(b"".join([*original, *[original[3]] * 20]))  # twenty copies of line 4
    refused_by_all(run, "turns.jsonl")
    damage = reported_with_damage(run, "turns.jsonl:42", "a copy of line 4's record")
    assert damage.count("a copy of line 4") == 20
    intact = copy_run(tmp_path / "intact")
    assert orchestrate("report", str(intact)).returncode == 0
    # the figures are the intact run's: the copies are listed, not counted
    assert (run / "report" / "cells_long.csv").read_bytes() == (intact / "report" / "cells_long.csv").read_bytes()


@pytest.mark.parametrize("index", [0, 1, 2])  # a seed's first turn, a seed's ending turn, a one-turn seed
def test_a_lost_turn_line_is_refused_by_every_reader(tmp_path: Path, index: int) -> None:
    run = copy_run(tmp_path)
    kept = lines(run)
    dropped = json.loads(kept.pop(index))
    (run / "turns.jsonl").write_bytes(b"".join(kept))
    refused_by_all(run, "turns.jsonl", dropped["cell_id"])
    reported_with_damage(run, "a record lost", f"seed {dropped['seed']}")


def test_a_missing_cell_file_is_refused_by_every_reader_and_reported_around(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    (run / "cells" / f"{TEXT_CELL}.json").unlink()
    refused_by_all(run, f"{TEXT_CELL}.json")
    reported_with_damage(run, f"{TEXT_CELL}.json", "missing (21 turn record(s)")
    frame = (run / "report" / "cells_long.csv").read_text()
    assert TEXT_CELL in frame and "damaged" in frame  # its turns are reported, its config marked as lost


def test_no_cells_folder_is_refused_and_reported_around(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    shutil.rmtree(run / "cells")
    refused_by_all(run, "cells")
    damage = reported_with_damage(run, "missing")
    assert damage.count("missing (") == 2  # both cells' turns reported, each without its config


def test_a_bad_bootstrap_setting_is_an_error_naming_the_manifest_and_defaults_under_allow_damaged(
    tmp_path: Path,
) -> None:
    run = copy_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["matrix"]["bootstrap"] = {"resamples": -5}
    (run / "manifest.json").write_text(json.dumps(manifest))
    code, output = ask("report", run)
    assert code != 0 and "manifest.json" in output and "bootstrap.resamples" in output
    with pytest.raises(StoreError, match=r"manifest\.json"):
        load_run(run)
    reported_with_damage(run, "manifest.json", "the default settings are used")


@pytest.mark.parametrize(
    ("field", "value"),
    [("schema_version", 99), ("flags", "truncated"), ("superseded", "no"), ("attempt", -1)],
)
def test_stats_refuses_the_records_report_refuses(tmp_path: Path, field: str, value: object) -> None:
    run = with_line_6(copy_run(tmp_path), **{field: value})
    for reader in ("report", "stats"):
        code, output = ask(reader, run)
        assert code != 0 and "turns.jsonl:6" in output, f"{reader} accepted {field}={value!r}: {output[:400]}"


def test_the_rules_on_records_alone() -> None:
    def record(seed: str, turn: int, attempt: int = 0, run: int = 0, end: str | None = None) -> dict[str, object]:
        return {"cell_id": "c", "seed": seed, "seed_attempt": run, "turn": turn, "attempt": attempt, "end": end}

    whole = [record("a", 0), record("a", 0, 1), record("a", 1, end="done"), record("b", 0, run=1, end="done")]
    ids = record_identities(whole)
    assert duplicate_indexes(ids) == [] and duplicate_indexes([*ids, ids[1]]) == [4]
    assert gaps(ids) == {}
    assert gaps(record_identities([record("a", 0), record("a", 2)])) == {"c": "seed a run 0: turn 2 without turn 1"}
    assert "without attempt 1" in gaps(record_identities([record("a", 0), record("a", 0, 2)]))["c"]
    ended = [bool(r["end"]) for r in whole]
    cells = {"c": {"status": "complete", "seeds": ["a", "b"]}}
    assert unfinished_seeds(cells, ids, ended) == {}
    planned_more = {"c": {"status": "complete", "seeds": ["a", "z"]}}
    assert unfinished_seeds(planned_more, ids, ended) == {"c": "seed z: no record"}
    assert unfinished_seeds(cells, ids[:2], ended[:2]) == {"c": "seed a: its last run has no end"}
    assert unfinished_seeds({"c": {"status": "running", "seeds": ["a", "z"]}}, ids, ended) == {}


@pytest.mark.slow  # a child process: a reader that hangs on the FIFO is killed by the timeout, not the suite
@pytest.mark.parametrize("name", ["manifest.json", "turns.jsonl", f"cells/{TEXT_CELL}.json"])
def test_a_fifo_in_place_of_a_run_file_is_refused_not_waited_on(tmp_path: Path, name: str) -> None:
    """A FIFO blocks whoever opens it for reading until a writer comes: a reader that opened it would hang."""
    run = copy_run(tmp_path)
    (run / name).unlink()
    os.mkfifo(run / name)
    result = subprocess.run([sys.executable, "-m", "orchestrator", "report", str(run)], capture_output=True,
                            text=True, timeout=120, check=False)  # fmt: skip
    output = "".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and "Traceback" not in output
    assert Path(name).name in output and "notaregularfile" in output, output[-600:]


def test_a_manifest_or_cell_file_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    for name in ("manifest.json", f"cells/{TEXT_CELL}.json"):
        with (run / name).open("r+b") as handle:  # sparse: 64 MiB and one byte, no disk spent
            handle.truncate(MAX_JSON_FILE_BYTES + 1)
        code, output = ask("report", run)
        assert code != 0 and Path(name).name in output and "largerthan" in output, output[-600:]
        shutil.copyfile(EXAMPLE / name, run / name)


@pytest.mark.parametrize("field", ["seed_attempt", "attempt", "sample"])
def test_a_null_count_is_no_record_for_every_reader(tmp_path: Path, field: str) -> None:
    run = with_line_6(copy_run(tmp_path), **{field: None})
    refused_by_all(run, "turns.jsonl:6")


def test_an_overlong_line_is_read_around_under_recover_and_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.core import jsonl

    monkeypatch.setattr(jsonl, "READ_CHUNK", 64)
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    good = [{"cell_id": "c", "seed": f"s{i}", "turn": 0, "outcome": "valid_call", "tools_mode": "native"}
            for i in range(3)]  # fmt: skip
    huge = {**good[0], "seed": "big", "raw_content": "x" * 5000}
    rows = [json.dumps(r).encode() for r in (good[0], huge, good[1], good[1], good[2])]  # line 4 copies line 3
    run = tmp_path / "run"
    run.mkdir()
    (run / "turns.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(StoreError, match=r"turns\.jsonl:2: line longer than 1000 bytes"):
        RunStore(run).read_turns()
    for view in (False, True):
        store = RunStore(run, recover=True, warn=lambda _message: None)
        assert [r["seed"] for r in store.read_turns(view=view)] == ["s0", "s1", "s2"]
        assert [(d.line, d.kind) for d in store.damage] == [(2, "bad_line"), (4, "duplicate_record")]


# Every field a careless edit or an attacker retypes, and what they retype it to (the hostile-run generator's own
# lists, tests/test_hostile_runs.py), one line at a time: load_run() and a recover-mode read give records or a
# StoreError naming the file, never another exception.
@pytest.mark.slow  # 176 reads of a run
def test_every_single_field_retype_is_read_or_refused_by_name(tmp_path: Path) -> None:
    from tests.test_hostile_runs import RETYPED, TURN_KEYS

    run = copy_run(tmp_path)
    rows = lines(run)
    unexpected = []
    for key in TURN_KEYS:
        for value in RETYPED:
            record = json.loads(rows[5])
            record[key] = value
            edited = [*rows[:5], json.dumps(record).encode() + b"\n", *rows[6:]]
            (run / "turns.jsonl").write_bytes(b"".join(edited))
            try:
                load_run(run)
                read_run(open_run(run, recover=True, warn=lambda _message: None), view=False)
            except StoreError as exc:
                if "turns.jsonl" not in str(exc) and "cells" not in str(exc):
                    unexpected.append(f"{key}={value!r}: {exc}")
            except Exception as exc:  # what this test is for: any other exception is a finding
                unexpected.append(f"{key}={value!r}: {type(exc).__name__}: {exc}")
    assert not unexpected, "\n".join(unexpected[:20])


def test_stats_on_a_run_refuses_an_integer_seed_as_the_report_does(tmp_path: Path) -> None:
    """Integer seeds are read in files from outside a run; a run's own records name their seed by its id."""
    run = with_line_6(copy_run(tmp_path), seed=7)
    for reader in ("report", "stats"):
        code, output = ask(reader, run)
        assert code != 0 and "turns.jsonl" in output and "seed" in output, f"{reader}: {output[:300]}"
    code, output = ask("stats", run)
    assert "record6:wrongtypeforseed" in output, output[:300]
