"""Half-written and damaged run directories, and hostile `stats` input: a torn last line, a damaged line in
the middle, a damaged cell file, a lost manifest or turns.jsonl, a report whose Parquet write fails. Each is
one clear error naming file and line (nothing changed) or recovered with a warning saying what is damaged;
never a traceback, never a record lost."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.analysis.report.report import write_report
from orchestrator.core.jsonl import InputError, read_jsonl
from orchestrator.core.types import TurnRecord
from orchestrator.runner.run.runs import resume_run
from orchestrator.runner.store.runstore import RunStore, StoreError
from tests.cliinprocess import orchestrate as in_process

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "results" / "examples" / "20261203T173011Z-diffcheck-98d599"  # small: 2 cells, 41 turns
TEXT_CELL = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__text-tools"
BASE: dict[str, Any] = {"cell_id": "c", "turn": 0, "tools_mode": "text-tools", "outcome": "valid_call"}


def orchestrate(*args: str) -> subprocess.CompletedProcess[str]:
    return in_process(*args, cwd=REPO)


def copy_example(tmp_path: Path) -> Path:
    run = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    return run


def report_bytes(run: Path) -> dict[str, bytes]:
    report = run / "report"
    return {str(p.relative_to(report)): p.read_bytes() for p in sorted(report.rglob("*")) if p.is_file()}


def lines_of(run: Path) -> list[bytes]:
    return (run / "turns.jsonl").read_bytes().split(b"\n")


def write_lines(run: Path, lines: list[bytes]) -> None:
    (run / "turns.jsonl").write_bytes(b"\n".join(lines))


def small_store(tmp_path: Path, records: list[dict[str, Any]], tail: bytes = b"", **kwargs: Any) -> RunStore:
    store = RunStore(tmp_path / "run", **kwargs)
    store.create({"run_id": "run", "matrix": {}})
    store.turns_path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)
    return store


def a_turn(seed: str, turn: int, **extra: Any) -> TurnRecord:
    return TurnRecord.model_validate({"run_id": "run", "suite": "ops", "attempt": 0, "model": "m", "stack": "s",
                                      "stack_config": "s", "hint": False, "http_status": 200, "parse_path": "harness",
                                      **BASE, "seed": seed, "turn": turn, **extra})  # fmt: skip


# --- torn last line ---------------------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path: Path) -> None:
    warnings: list[str] = []
    store = small_store(tmp_path, [{**BASE, "seed": "s1", "end": "turn_cap"}, {**BASE, "seed": "s2"}],
                        tail=b'{"cell_id": "c", "se', warn=warnings.append)  # fmt: skip
    assert [r["seed"] for r in store.read_turns()] == ["s1", "s2"]
    assert len(warnings) == 1 and f"{store.turns_path}:3: torn last line" in warnings[0]
    assert [d.kind for d in store.damage] == ["torn_tail"]
    assert store.completed_seeds() == {("c", "s1")}  # the torn seed's record is incomplete: it reruns


def test_resume_keeps_the_torn_fragment_aside_and_appends_on_a_line_of_its_own(tmp_path: Path) -> None:
    fragment = b'{"cell_id": "c", "seed": "s2", "turn": 1, "outc'
    store = small_store(tmp_path, [{**BASE, "seed": "s1", "end": "turn_cap"}], tail=fragment, warn=lambda _m: None)
    assert store.supersede_unfinished() == 0
    assert (store.dir / "turns.jsonl.torn").read_bytes() == fragment + b"\n"  # not a record, but kept
    store.append_turn(a_turn("s2", 0, end="turn_cap"))
    store.close()
    again = RunStore(store.dir)
    assert [(r["seed"], r["end"]) for r in again.read_turns()] == [("s1", "turn_cap"), ("s2", "turn_cap")]
    assert again.damage == [] and again.turns_path.read_bytes().endswith(b"}\n")


@pytest.mark.slow
def test_resume_run_records_the_repair_in_its_resume_entry(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    lines = lines_of(run)
    write_lines(run, [*lines[:-2], lines[-2][:100]])  # the last record cut mid-write
    store = resume_run(run, allow_drift=True)
    entry = store.manifest()["resumes"][-1]
    assert len(entry["repaired"]) == 1 and "turns.jsonl:41: torn last line" in entry["repaired"][0]
    assert (run / "turns.jsonl.torn").read_bytes() == lines[-2][:100] + b"\n"
    assert RunStore(run).read_turns() and RunStore(run).turns_path.read_bytes().endswith(b"\n")


def test_a_first_append_seals_a_tail_it_was_not_told_about(tmp_path: Path) -> None:
    complete = json.dumps({**BASE, "seed": "s1", "end": "turn_cap"}).encode()
    store = small_store(tmp_path, [], tail=complete)  # a whole record, killed before its newline
    store.append_turn(a_turn("s2", 0, end="turn_cap"))
    store.close()
    assert [r["seed"] for r in RunStore(store.dir).read_turns()] == ["s1", "s2"]
    torn = small_store(tmp_path / "b", [], tail=b'{"cell_', warn=lambda _m: None)
    torn.append_turn(a_turn("s2", 0, end="turn_cap"))
    torn.close()
    assert [r["seed"] for r in RunStore(torn.dir).read_turns()] == ["s2"]
    assert (torn.dir / "turns.jsonl.torn").read_bytes() == b'{"cell_\n'


def test_report_on_a_torn_run_exits_0_and_says_what_was_skipped(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    lines = lines_of(run)
    write_lines(run, [*lines[:-2], lines[-2][:100]])
    # A cell the run marked complete ended every seed it planned: its last seed's record torn away is a lost
    # record (core/runrecords.py), an error naming the file. A killed run leaves its cell running: then the torn
    # line is the write the kill cut short, skipped with a warning and listed.
    refused = orchestrate("report", str(run))
    assert refused.returncode != 0 and "seed ops-07: no record" in " ".join(refused.stderr.split())
    cell = run / "cells" / "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__raw-template.json"
    cell.write_text(json.dumps({**json.loads(cell.read_text()), "status": "running"}))
    result = orchestrate("report", str(run))
    assert result.returncode == 0, result.stderr
    assert "turns.jsonl:41: torn last line" in result.stderr and "Traceback" not in result.stderr
    assert "turns.jsonl:41" in (run / "report" / "DAMAGE.md").read_text()


# --- a damaged line in the middle --------------------------------------------------------------------------

def changed(line: bytes, **fields: Any) -> bytes:
    return json.dumps({**json.loads(line), **fields}).encode()


MIDDLE_DAMAGE = [
    ("cut", lambda line: line[:50], "bad JSON"),
    ("latin-1", lambda line: changed(line, suite="op\u00e9", x=1).replace(b"\\u00e9", b"\xe9"), "not UTF-8 text"),
    ("outcome", lambda line: changed(line, outcome="Valid_Call"), "unknown outcome 'Valid_Call'"),
    ("turn type", lambda line: changed(line, turn=0.5), "wrong type for turn"),
    ("seed type", lambda line: changed(line, seed=4), "wrong type for seed"),
    ("missing field", lambda line: changed(line, cell_id=None), "wrong type for cell_id"),
    ("not an object", lambda _line: b"[1, 2]", "not a turn record"),
    ("deep nesting", lambda _line: b"[" * 100_000, "nested too deeply"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "damage", "message"), MIDDLE_DAMAGE, ids=[m[0] for m in MIDDLE_DAMAGE])
def test_a_damaged_middle_line_is_an_error_naming_it_and_changes_nothing(
    tmp_path: Path, name: str, damage: Any, message: str
) -> None:
    run = copy_example(tmp_path)
    lines = lines_of(run)
    write_lines(run, [*lines[:9], damage(lines[9]), *lines[10:]])
    before = {p: p.read_bytes() for p in (run / "turns.jsonl", run / "manifest.json")}
    with pytest.raises(StoreError) as error:
        RunStore(run).read_turns()
    assert f"{run / 'turns.jsonl'}:10: " in str(error.value) and message in str(error.value)
    with pytest.raises(StoreError, match=r"turns\.jsonl:10"):
        resume_run(run, allow_drift=True)
    assert {p: p.read_bytes() for p in before} == before  # the resume changed nothing, the manifest neither


@pytest.mark.slow
def test_matrix_resume_and_report_refuse_a_damaged_middle_line_and_leave_everything(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    lines = lines_of(run)
    write_lines(run, [*lines[:9], lines[9][:50], *lines[10:19], b"\xff\xfe", *lines[20:]])
    before, report = (run / "turns.jsonl").read_bytes(), report_bytes(run)
    resumed = orchestrate("matrix", "--resume", str(run), "--allow-drift")
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr
    assert "turns.jsonl:10: bad JSON" in resumed.stderr and "(and 1 more damaged line(s))" in resumed.stderr
    assert "turns.jsonl:20: not UTF-8 text" in resumed.stderr
    reported = orchestrate("report", str(run))
    assert reported.returncode == 2 and "turns.jsonl:10" in reported.stderr and "Traceback" not in reported.stderr
    assert (run / "turns.jsonl").read_bytes() == before and report_bytes(run) == report


def test_report_allow_damaged_reports_the_intact_records_and_lists_the_damage(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    lines = lines_of(run)
    write_lines(run, [*lines[:9], lines[9][:50], *lines[10:]])
    result = orchestrate("report", str(run), "--allow-damaged")
    assert result.returncode == 0, result.stderr
    assert "warning:" in result.stderr and "turns.jsonl:10: bad JSON" in result.stderr
    assert "turns.jsonl:10" in (run / "report" / "DAMAGE.md").read_text()
    long = pd.read_csv(run / "report" / "cells_long.csv")
    assert int(long["n_turn_records"].sum()) == 40  # 41 records, one damaged
    write_lines(run, lines)  # repaired: a clean report drops the stale DAMAGE.md
    assert orchestrate("report", str(run)).returncode == 0
    assert not (run / "report" / "DAMAGE.md").exists()
    assert int(pd.read_csv(run / "report" / "cells_long.csv")["n_turn_records"].sum()) == 41


# --- damaged cell files, a lost manifest, a lost turns.jsonl ----------------------------------------------


def test_a_damaged_cell_file_is_an_error_or_a_damaged_cell(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    cell = run / "cells" / f"{TEXT_CELL}.json"
    cell.write_text(cell.read_text()[:200])
    report = report_bytes(run)
    strict = orchestrate("report", str(run))
    assert strict.returncode == 2 and f"{cell}: not a cell file" in strict.stderr
    assert "Traceback" not in strict.stderr and report_bytes(run) == report
    loose = orchestrate("report", str(run), "--allow-damaged")
    assert loose.returncode == 0, loose.stderr
    assert f"{cell}: not a cell file" in loose.stderr and "cell_damaged" in loose.stdout
    row = pd.read_csv(run / "report" / "cells_long.csv").set_index("cell_id").loc[TEXT_CELL]
    assert row["cell_status"] == "damaged" and row["n_turn_records"] > 0  # its turns are still reported


@pytest.mark.slow
def test_resume_keeps_a_damaged_cell_file_aside_for_the_sweep_to_rebuild(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    cell = run / "cells" / f"{TEXT_CELL}.json"
    cell.write_bytes(b"\x00" * 64)
    store = resume_run(run, allow_drift=True)
    assert not cell.exists() and (run / "cells" / f"{TEXT_CELL}.json.damaged").read_bytes() == b"\x00" * 64
    assert store.read_cell(TEXT_CELL) is None  # the sweep finds no cell file: it launches and rebuilds it
    assert "resume rebuilds the cell" in store.manifest()["resumes"][-1]["repaired"][0]


def test_a_lost_manifest_stops_a_resume_and_a_plain_report(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    (run / "manifest.json").unlink()
    report = report_bytes(run)
    for args in (("matrix", "--resume", str(run)), ("report", str(run))):
        result = orchestrate(*args)
        assert result.returncode == 2 and f"{run / 'manifest.json'}: missing" in result.stderr
        assert "Traceback" not in result.stderr
    assert report_bytes(run) == report and not (run / "turns.jsonl.torn").exists()
    loose = orchestrate("report", str(run), "--allow-damaged")
    assert loose.returncode == 0 and "reporting with default settings" in loose.stderr
    assert "manifest.json" in (run / "report" / "DAMAGE.md").read_text()


def test_a_lost_turns_file_is_an_error_and_the_report_is_left_as_it_was(tmp_path: Path) -> None:
    run = copy_example(tmp_path)
    (run / "turns.jsonl").unlink()
    report = report_bytes(run)
    for extra in ((), ("--allow-damaged",)):
        result = orchestrate("report", str(run), *extra)
        assert result.returncode == 2 and f"{run / 'turns.jsonl'}: missing" in result.stderr
        assert "Traceback" not in result.stderr and report_bytes(run) == report


# --- an all-or-nothing report -----------------------------------------------------------------------------


def test_a_failing_parquet_write_leaves_the_old_report_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = copy_example(tmp_path)
    lines = lines_of(run)
    write_lines(run, [changed(lines[0], outcome="no_call_prose"), *lines[1:]])  # a report other than the stored one
    report = report_bytes(run)

    def no_parquet(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", no_parquet)
    with pytest.raises(OSError, match="No space left"):
        write_report(RunStore(run))
    assert report_bytes(run) == report  # cells_long.csv was written first, to the staging folder only
    assert not [p for p in run.iterdir() if p.name.startswith(".report-")]  # no staging folder left behind
    monkeypatch.undo()
    _long, _wide, written = write_report(RunStore(run))
    assert {p.parent for p in written} == {run / "report", run / "report" / "cells"} and report_bytes(run) != report


# --- U+2028 in a record ------------------------------------------------------------------------------------


def test_a_record_holding_line_separators_reads_back_whole(tmp_path: Path) -> None:
    store = small_store(tmp_path, [])
    store.append_turn(a_turn("s1", 0, end="turn_cap", detail="a\u2028b\x85c\u2029d"))
    store.close()
    assert [r["detail"] for r in RunStore(store.dir).read_turns()] == ["a\u2028b\x85c\u2029d"]


# --- hostile `stats` input ---------------------------------------------------------------------------------

ROW = {"stack": "s", "model": "m", "tools_mode": "native", "seed": 1, "turn": 0, "outcome": "valid_call"}


def row_line(**change: Any) -> bytes:
    return json.dumps({**ROW, **change}).encode()


HOSTILE_STATS = [
    ("outcome case", row_line(outcome="Valid_Call"), "field 'outcome'"),
    ("outcome unknown", row_line(outcome="success"), "field 'outcome'"),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8 text"),
    ("latin-1", row_line(model="caf\u00e9").replace(b"\\u00e9", b"\xe9"), "not UTF-8 text (byte 0xe9"),
    ("turn as text", row_line(turn="1"), "field 'turn'"),
    ("turn as float", row_line(turn=1.0), "field 'turn'"),
    ("negative turn", row_line(turn=-1), "field 'turn'"),
    ("seed as bool", row_line(seed=True), "field 'seed"),
    ("seed as list", row_line(seed=[1]), "field 'seed"),
    ("superseded as text", row_line(superseded="no"), "field 'superseded'"),
    ("deep nesting", b"[" * 200_000, "nested too deeply"),
    ("deep nesting in a field", row_line()[:-1] + b', "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested"),
    ("a list", b"[1, 2, 3]", "expected a JSON object"),
    ("NaN turn", row_line()[:-1].replace(b'"turn": 0', b'"turn": NaN') + b"}", "field 'turn'"),
]


@pytest.mark.parametrize(("name", "line", "message"), HOSTILE_STATS, ids=[h[0] for h in HOSTILE_STATS])
def test_hostile_stats_input_is_one_clear_error_naming_file_and_line(
    tmp_path: Path, name: str, line: bytes, message: str
) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_bytes(row_line() + b"\n\n" + line + b"\n" + row_line(seed=2) + b"\n")
    result = orchestrate("stats", str(path))
    assert result.returncode == 2, result.stdout
    assert f"{path}:3: " in result.stderr and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_line_past_the_length_limit_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    from orchestrator.core import jsonl

    path = tmp_path / "huge.jsonl"
    with path.open("wb") as handle:
        handle.write(row_line() + b'\n{"stack": "' + b"x" * (jsonl.MAX_LINE_BYTES + 10) + b'"}\n')
    result = orchestrate("stats", str(path))
    assert result.returncode == 2 and f"{path}:2: line longer than" in result.stderr
    assert "Traceback" not in result.stderr


def test_stats_counts_the_six_outcomes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_bytes(row_line() + b"\n" + row_line(seed=2, outcome="no_call_prose") + b"\n")
    result = orchestrate("stats", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["per_seed_mean"] == 0.5


# --- properties ----------------------------------------------------------------------------------------------

TURN_VALUES = st.one_of(st.integers(-2, 3), st.floats(allow_nan=False), st.text(max_size=3))
OUTCOME_VALUES = st.sampled_from(["valid_call", "Valid_Call", "x"])
LINES = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.builds(lambda o, t: row_line(outcome=o, turn=t), OUTCOME_VALUES, TURN_VALUES),
    st.builds(lambda o, t: json.dumps({**BASE, "seed": "s", "outcome": o, "turn": t}).encode(),
              OUTCOME_VALUES, TURN_VALUES),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * (n % 7)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINES, max_size=6))
def test_read_jsonl_yields_records_or_one_input_error_naming_the_file(tmp_path: Path, lines: list[bytes]) -> None:
    from orchestrator.cli import TurnOutcomeRow as Row

    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\n".join(lines))
    try:
        rows = list(read_jsonl(path, Row))
    except InputError as exc:
        assert str(exc).startswith(f"{path}:")
        return
    assert all(row.outcome in {"valid_call"} and type(row.turn) is int and row.turn >= 0 for _n, row in rows)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINES, max_size=6), text=st.text())
def test_read_turns_is_records_a_store_error_or_recovered_damage(tmp_path: Path, lines: list[bytes], text: str) -> None:
    good = json.dumps({**BASE, "seed": text, "detail": text}, ensure_ascii=False).encode()
    last = json.dumps({**BASE, "seed": text, "turn": 1}, ensure_ascii=False).encode()  # its own identity
    data = b"\n".join([good, *lines, last])
    target = tmp_path / "t"
    target.mkdir(exist_ok=True)
    (target / "turns.jsonl").write_bytes(data)
    try:
        strict = RunStore(target).read_turns()
    except StoreError as exc:
        assert f"{target / 'turns.jsonl'}:" in str(exc)
        strict = None
    loose = RunStore(target, recover=True, warn=lambda _m: None)
    records = loose.read_turns()
    assert records[0]["detail"] == text and records[-1]["seed"] == text  # the intact records all read back
    assert strict is None or strict == records
    assert (strict is None) == any(d.kind in ("bad_line", "duplicate_record") for d in loose.damage)
