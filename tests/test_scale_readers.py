"""The readers that make `report` and `stats` scale (runner/store/turnview.py, core/jsonl.py's bulk reader,
cli/outcomerows.py) and the batched bootstrap (core/stats.py): each must give exactly what the plain path
gives, on the committed example runs and on hostile input; they change how fast and how lean, never what."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.analysis.report.drilldown import DrillFields
from orchestrator.analysis.report.report import write_report
from orchestrator.cli import TurnOutcomeRow
from orchestrator.cli.outcomerows import OutcomeRow, decode_outcome_rows, outcome_frame
from orchestrator.core import jsonl
from orchestrator.core.cell import PRIMARY_AXES, CellKey
from orchestrator.core.jsonl import InputError, read_jsonl, read_jsonl_batches
from orchestrator.core.stats import (
    BootstrapSettings,
    bootstrap_mean_interval,
    bootstrap_mean_intervals,
    cell_table,
)
from orchestrator.runner.store import storedamage
from orchestrator.runner.store.runstore import RunStore, counted_turns
from orchestrator.runner.store.storedamage import LineError, turn_record, view_record
from orchestrator.runner.store.turnview import OFFSET_KEY, VIEW_FIELDS, FirstTurnFields
from tests.cliinprocess import orchestrate

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (REPO / "results" / "examples").iterdir() if (p / "turns.jsonl").is_file())
GOOD = {"cell_id": "c", "seed": "s1", "turn": 0, "outcome": "valid_call", "tools_mode": "native"}
OTHER = {**GOOD, "seed": "s2"}  # another record (one identity is one record: core/runrecords.py)


def _report_files(run: Path, tmp_path: Path, view: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    copy = tmp_path / ("view" if view else "full") / run.name
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "report", ignore_errors=True)
    read = RunStore.read_turns
    monkeypatch.setattr(RunStore, "read_turns", lambda self, view=False, wanted=view: read(self, view=wanted))
    write_report(RunStore(copy))
    monkeypatch.setattr(RunStore, "read_turns", read)
    report = copy / "report"  # the drill-down pages too: read by offset from views, from the records when full
    return {str(p.relative_to(report)): p.read_bytes() for p in sorted(report.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("run", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_report_from_views_equals_report_from_full_records(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = _report_files(run, tmp_path, False, monkeypatch)
    view = _report_files(run, tmp_path, True, monkeypatch)
    assert len(full) >= 9
    assert view.keys() == full.keys()
    assert [name for name in full if view[name] != full[name]] == []


def test_examples_hold_first_turn_fields_the_view_keeps() -> None:
    """The equality above would hold trivially if no record had the first-turn-only fields."""
    store = RunStore(next(p for p in EXAMPLES if "stream" in p.name))
    views = store.read_turns(view=True)
    first = [v for v in views if v["turn"] == 0]
    later = [v for v in views if v["turn"] != 0]
    assert first and later
    assert any("raw_content" in v and "sampling_seed" in v for v in first)
    assert all(not set(FirstTurnFields.__annotations__) & set(v) for v in later)
    assert all(set(v) <= VIEW_FIELDS | {OFFSET_KEY} for v in views)
    full = store.read_turns()
    assert [v["outcome"] for v in views] == [r["outcome"] for r in full]


@pytest.mark.parametrize("chunk", [1 << 24, 5000, 997])  # one chunk; lines cut by chunk ends (carried lines)
def test_each_view_knows_where_its_record_is(tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view's offset reads back exactly its own whole record, whichever way the reader split the file: in bulk,
    line by line (a blank line and an indented line force it), or across a chunk boundary."""
    monkeypatch.setattr("orchestrator.core.jsonl.READ_CHUNK", chunk)
    run = tmp_path / "run"
    shutil.copytree(next(p for p in EXAMPLES if "stream" in p.name), run)
    lines = (run / "turns.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(3, b"\n")
    lines[5] = b"  " + lines[5]
    (run / "turns.jsonl").write_bytes(b"".join(lines))
    store = RunStore(run)
    views = store.read_turns(view=True)
    full = store.read_turns()
    assert len({v[OFFSET_KEY] for v in views}) == len(views) == len(full)
    found = store.read_records_at([v[OFFSET_KEY] for v in views])
    assert [found[v[OFFSET_KEY]] for v in views] == full


HOSTILE_LINES = [
    b'{"cell_id": "c", "seed": 1, "turn": 0, "outcome": "valid_call", "tools_mode": "native"}',
    b'{"cell_id": "c", "seed": "s", "turn": -1, "outcome": "valid_call", "tools_mode": "native"}',
    b'{"cell_id": "c", "seed": "s", "turn": true, "outcome": "valid_call", "tools_mode": "native"}',
    b'{"cell_id": "c", "seed": "s", "turn": 1.0, "outcome": "valid_call", "tools_mode": "native"}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "Valid_Call", "tools_mode": "native"}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call"}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "native", "end": 3}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "n", "superseded": 1}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "n", "seed_attempt": -2}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "n", "schema_version": 9}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "n", "detail": 5}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "n", "flags": [1]}',
    b'{"cell_id": "c", "seed": "s", "turn": 3, "outcome": "valid_call", "tools_mode": "n", "stack_version": {}}',
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "n", "model": 7}',
    b'[1, 2]',
    b'{"cell_id": "c", \xff}',
    b"[" * 5000 + b"]" * 5000,
    b'{"cell_id": "c", "seed": "s", "turn": 0, "outcome": "valid_call", "tools_mode": "native"}{"a": 1}',
]


@pytest.mark.parametrize("raw", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_a_view_refuses_what_the_full_reader_refuses_with_its_message(raw: bytes) -> None:
    full = storedamage.decoded(raw, turn_record)
    if isinstance(full, LineError):
        with pytest.raises(LineError) as caught:
            view_record(raw)
        assert str(caught.value) == str(full)
    else:  # a record to both readers (schema_version 9: the store's schema check names it, next test)
        view = view_record(raw)
        assert isinstance(view, dict) and view.get("schema_version") == full.get("schema_version")


def _store_with(tmp_path: Path, lines: list[bytes]) -> RunStore:
    (tmp_path / "cells").mkdir(parents=True)
    (tmp_path / "turns.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return RunStore(tmp_path)


@pytest.mark.parametrize("raw", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_the_store_treats_a_hostile_line_alike_in_both_readers(raw: bytes, tmp_path: Path) -> None:
    good, other = json.dumps(GOOD).encode(), json.dumps(OTHER).encode()
    outcomes = []
    for view in (False, True):
        store = _store_with(tmp_path / str(view), [good, raw, other])
        try:
            outcomes.append(len(store.read_turns(view=view)))
        except Exception as exc:  # the one error, naming the line
            outcomes.append(str(exc).replace(str(tmp_path / str(view)), "RUN"))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == 3 if b'"model": 7' in raw else "turns.jsonl:2" in str(outcomes[0])


def test_blank_lines_and_two_records_on_a_line_are_read_line_by_line(tmp_path: Path) -> None:
    good, other = json.dumps(GOOD).encode(), json.dumps(OTHER).encode()
    store = _store_with(tmp_path / "blank", [good, b"", b"   ", other])
    assert len(store.read_turns(view=True)) == 2
    store = _store_with(tmp_path / "double", [good, good + good])
    with pytest.raises(Exception, match=r"turns.jsonl:2: bad JSON"):
        store.read_turns(view=True)
    # One blank line and one line of two records: as many records as lines, still refused, in both readers.
    for view in (False, True):
        store = _store_with(tmp_path / f"both-{view}", [good, b"", good + good])
        with pytest.raises(Exception, match=r"turns.jsonl:3: bad JSON"):
            store.read_turns(view=view)
    assert storedamage.bulk_decoded is jsonl.bulk_decoded  # the store's bulk path is the one checked here


def test_a_record_run_over_two_lines_never_passes_as_records(tmp_path: Path) -> None:
    """The bulk decoder reads a stream of values: lines `{x}{y`, `{w}`, `{z, "a":`, `{...}}` give four values for
    four lines. Both readers must refuse line 1, and no record may take another line's fields."""
    x = json.dumps({**GOOD, "seed": "x", "turn": 1}).encode()
    y = json.dumps({**GOOD, "seed": "y"}).encode()[:-1] + b","  # turn 0, unclosed: runs into the next line
    w = json.dumps({"model": "EVIL"}).encode() + b"}"
    z = json.dumps({**GOOD, "seed": "z", "turn": 1}).encode()[:-1] + b', "stream":'
    tail = b'{"a": 1}}'
    for view in (False, True):
        store = _store_with(tmp_path / str(view), [x + y, w, z, tail])
        with pytest.raises(Exception, match=r"turns.jsonl:1: bad JSON"):
            store.read_turns(view=view)
    path = tmp_path / "stats.jsonl"
    row = {"stack": "vllm", "model": "m", "tools_mode": "native", "seed": 1, "turn": 0, "outcome": "valid_call"}
    line = json.dumps(row).encode()
    path.write_bytes(line + line[:-1] + b",\n" + b'"stack_config": "s"}\n' + line + b"\n")
    assert isinstance(_bulk_rows(path), str) and _bulk_rows(path) == _pydantic_rows(path)


def test_a_torn_tail_is_the_same_damage_in_both_readers(tmp_path: Path) -> None:
    good, other = json.dumps(GOOD).encode(), json.dumps(OTHER).encode()
    for view in (False, True):
        path = tmp_path / str(view)
        store = _store_with(path, [good, other])
        with (path / "turns.jsonl").open("ab") as handle:
            handle.write(good[:30])
        assert len(store.read_turns(view=view)) == 2
        assert [(d.kind, d.line) for d in store.damage] == [("torn_tail", 3)]


def test_chunks_split_lines_only_at_newlines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(jsonl, "READ_CHUNK", 7)  # chunk edges fall inside every line
    lines = [json.dumps({**GOOD, "seed": f"s{i}", "note": "x\u2028y" * i}).encode() for i in range(40)]
    store = _store_with(tmp_path, lines)
    assert [r["seed"] for r in store.read_turns(view=True)] == [f"s{i}" for i in range(40)]
    assert [r["seed"] for r in store.read_turns()] == [f"s{i}" for i in range(40)]


def test_a_store_line_past_the_limit_is_one_error_read_in_bounded_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(jsonl, "READ_CHUNK", 64)
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    good = json.dumps(GOOD).encode()
    huge = json.dumps({**GOOD, "raw_content": "x" * 5000}).encode()
    for view in (False, True):
        store = _store_with(tmp_path / str(view), [good, huge, good])
        with pytest.raises(Exception, match=r"turns.jsonl:2: line longer than 1000 bytes"):
            store.read_turns(view=view)


# ---------------------------------------------------------------- stats


def test_the_stats_row_type_names_the_models_fields() -> None:
    assert set(OutcomeRow.__annotations__) == set(TurnOutcomeRow.model_fields)


STATS_VALUES = {
    "stack": st.sampled_from(["llamacpp", "vllm", 3, None]),
    "stack_config": st.sampled_from(["llamacpp-jinja", "", None, 1]),
    "model": st.sampled_from(["m", "m2", 5]),
    "tools_mode": st.sampled_from(["native", "text-tools", "Native", 1]),
    "seed": st.one_of(st.sampled_from(["a", "b"]), st.integers(-3, 2**70), st.booleans(), st.floats(0, 2)),
    "turn": st.one_of(st.integers(-2, 5), st.just("3"), st.just(1.0), st.booleans()),
    "outcome": st.sampled_from(["valid_call", "no_call_prose", "non_response", "Valid_Call", 0]),
    "cell_id": st.sampled_from(["c1", "", None, 2]),
    "seed_attempt": st.one_of(st.integers(-1, 2), st.just(1.5), st.just("1"), st.none()),
    "superseded": st.one_of(st.booleans(), st.just(0), st.just("false")),
    "end": st.sampled_from([None, "turn_cap", "server_died", 4]),
}


@st.composite
def stats_record(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.sets(st.sampled_from(sorted(STATS_VALUES))))
    return {key: draw(STATS_VALUES[key]) for key in sorted(keys | {"stack", "model", "tools_mode", "seed"})}


def _pydantic_rows(path: Path) -> list[dict[str, Any]] | str:
    try:
        return [record.model_dump(mode="json") for _, record in read_jsonl(path, TurnOutcomeRow)]
    except InputError as exc:
        return str(exc)


def _bulk_rows(path: Path) -> list[dict[str, Any]] | str:
    try:
        return [row for batch in read_jsonl_batches(path, TurnOutcomeRow, decode_outcome_rows) for row in batch]
    except InputError as exc:
        return str(exc)


@settings(max_examples=300, deadline=None)
@given(st.lists(stats_record(), min_size=1, max_size=6))
def test_bulk_stats_reader_equals_the_pydantic_reader(records: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "turns.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        assert _bulk_rows(path) == _pydantic_rows(path)


def _reference_table(rows: list[dict[str, Any]]) -> Any:
    """`orchestrate stats` as it was computed before the frame: row dicts, counted_turns, cell_table."""
    for row in rows:
        row["seed"] = str(row["seed"])
        row["stack_config"] = row["stack_config"] or row["stack"]
        row["cell_id"] = row["cell_id"] or CellKey(**{k: row[k] for k in PRIMARY_AXES}).cell_id
    return cell_table(counted_turns(rows), BootstrapSettings(), keys=("stack", *PRIMARY_AXES))


def test_stats_frame_equals_the_row_computation(tmp_path: Path) -> None:
    rows = []
    for index in range(60):
        rows.append({
            # Each seed run whole (turns 0-3 in one cell: one identity a record, no gap), the runs spread over
            # stack configs, models, cell ids written or not, and seed attempts.
            "stack": "vllm", "stack_config": ["vllm-hermes", None, ""][index // 4 % 3], "model": f"m{index // 4 % 2}",
            "tools_mode": "native", "seed": index // 4 % 7, "turn": index % 4,
            "outcome": ["valid_call", "no_call_prose", "non_response"][index % 3],
            "cell_id": None if index // 4 % 5 else "", "seed_attempt": index // 8, "superseded": index % 11 == 0,
            "end": "server_died" if index % 13 == 0 else None,
        })  # fmt: skip
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = outcome_frame(read_jsonl_batches(path, TurnOutcomeRow, decode_outcome_rows))
    ours = cell_table(frame, BootstrapSettings(), keys=("stack", *PRIMARY_AXES))
    reference = _reference_table(_pydantic_rows(path))  # type: ignore[arg-type]
    assert len(frame) < len(rows)  # superseded and died runs left out
    pd.testing.assert_frame_equal(ours, reference)
    assert len(ours) == 3  # of 4 cells: both runs of (vllm-hermes, m1) hold a server_died record (rows 13, 39)


@pytest.mark.parametrize("run", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_stats_on_example_runs_equals_the_row_computation(run: Path) -> None:
    path = run / "turns.jsonl"
    frame = outcome_frame(read_jsonl_batches(path, TurnOutcomeRow, decode_outcome_rows))
    ours = cell_table(frame, BootstrapSettings(), keys=("stack", *PRIMARY_AXES))
    pd.testing.assert_frame_equal(ours, _reference_table(_pydantic_rows(path)))  # type: ignore[arg-type]
    assert len(ours) >= 1


# ---------------------------------------------------------------- bootstrap


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=12), min_size=1, max_size=30),
    st.integers(1, 3000),
    st.integers(0, 2**32 - 1),
)
def test_batched_bootstrap_equals_the_one_cell_function(groups: list[list[int]], resamples: int, seed: int) -> None:
    settings_ = BootstrapSettings(resamples=resamples, rng_seed=seed)
    arrays = [np.asarray(g) / 8 for g in groups]
    assert bootstrap_mean_intervals(arrays, settings_) == [bootstrap_mean_interval(a, settings_) for a in arrays]


def test_a_bootstrap_past_one_block_draws_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory is bounded by MAX_DRAW_INDICES: a larger bootstrap is drawn block by block, and the blocks are the
    very draws of one call (numpy's bounded int64 draws carry nothing across calls), so the interval is too."""
    from orchestrator.core import stats

    values = np.random.default_rng(3).random(7)
    whole = bootstrap_mean_interval(values, BootstrapSettings(resamples=4000))
    blocks: list[int] = []
    draw = stats._resample_blocks

    def counted(rng: np.random.Generator, n: int, resamples: int) -> Any:
        for block in draw(rng, n, resamples):
            blocks.append(len(block))
            yield block

    monkeypatch.setattr(stats, "_resample_blocks", counted)
    monkeypatch.setattr(stats, "MAX_DRAW_INDICES", 50)  # 7 rows of 7 seeds a block
    blocked = bootstrap_mean_interval(values, BootstrapSettings(resamples=4000))
    assert blocks == [7] * 571 + [3]  # many blocks of at most 50 indices, 4,000 rows in all
    assert blocked == bootstrap_mean_intervals([values], BootstrapSettings(resamples=4000))[0]
    assert blocked == whole



# ---------------------------------------------------------------- the lean paths are the ones taken


def test_the_report_reads_views_not_full_records() -> None:
    """What made `report` hold ~12 KB a turn: every field of every record. The report's run must hold views."""
    from orchestrator.analysis.report.report import load_run

    run = load_run(RunStore(next(p for p in EXAMPLES if "stream" in p.name)))
    records = [r for turns in run.by_cell.values() for r in turns]
    assert records and all("raw_body" not in r and "text_calls" not in r and "prompt_cache" not in r for r in records)
    assert all("raw_content" not in r for r in records if r["turn"])


def test_stats_decodes_good_chunks_in_bulk_and_names_a_bad_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = json.dumps({"stack": "vllm", "model": "m", "tools_mode": "native", "seed": 1, "turn": 0,
                       "outcome": "valid_call"})  # fmt: skip
    path = tmp_path / "turns.jsonl"
    path.write_text((good + "\n") * 500)
    line_reads: list[int] = []
    line_reader = jsonl._record
    monkeypatch.setattr(jsonl, "_record", lambda p, n, raw, m: line_reads.append(n) or line_reader(p, n, raw, m))
    rows = [row for batch in read_jsonl_batches(path, TurnOutcomeRow, decode_outcome_rows) for row in batch]
    assert len(rows) == 500 and line_reads == []  # one bulk decode, no line read one by one
    path.write_text((good + "\n") * 3 + good.replace('"turn": 0', '"turn": "0"') + "\n")
    with pytest.raises(InputError, match=r"turns.jsonl:4: field 'turn'"):
        list(read_jsonl_batches(path, TurnOutcomeRow, decode_outcome_rows))
    assert line_reads == [1, 2, 3, 4]


def test_batched_bootstrap_memory_stays_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Peak allocation is bounded by MAX_DRAW_INDICES, not by cells x resamples x seeds (here 50 x 20,000 x 8:
    a 64 MB gather, an 8 MB means array) — and the slices change no interval."""
    import tracemalloc

    from orchestrator.core import stats

    groups = [np.random.default_rng(i).random(8) for i in range(50)]
    settings_ = BootstrapSettings(resamples=20_000)
    expected = [bootstrap_mean_interval(g, settings_) for g in groups]
    monkeypatch.setattr(stats, "MAX_DRAW_INDICES", 1 << 16)
    tracemalloc.start()
    try:
        got = bootstrap_mean_intervals(groups, settings_)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == expected
    assert peak < 6 * (1 << 16) * 8 + 2 * settings_.resamples * 8, f"peak {peak} bytes"


def test_the_report_command_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    import gc

    from typer.testing import CliRunner

    from orchestrator.cli import app

    run = tmp_path / EXAMPLES[0].name
    shutil.copytree(EXAMPLES[0], run)
    assert gc.isenabled()
    assert CliRunner().invoke(app, ["report", str(run)]).exit_code == 0
    assert gc.isenabled()


def test_a_resume_keeps_a_torn_fragment_once(tmp_path: Path) -> None:
    from orchestrator.runner.store import storerepair

    good = json.dumps({**GOOD, "end": "turn_cap"}).encode()
    store = _store_with(tmp_path, [good])
    with store.turns_path.open("ab") as handle:
        handle.write(b'{"cell_id": "c", "se')
    store.read_turns()
    storerepair.keep_torn(store, store.torn_fragment() or b"")  # a resume that kept it, then failed
    assert store.supersede_unfinished() == 0
    assert (tmp_path / "turns.jsonl.torn").read_bytes() == b'{"cell_id": "c", "se\n'
    assert store.turns_path.read_bytes() == good + b"\n"


@pytest.mark.parametrize("option", [["--rng-seed", "-1"], ["--resamples", "1000000000000"], ["--resamples", "0"]])
def test_stats_refuses_bootstrap_options_out_of_range(option: list[str], tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text(json.dumps({"stack": "vllm", "model": "m", "tools_mode": "native", "seed": 1, "turn": 0,
                                "outcome": "valid_call"}) + "\n")  # fmt: skip
    done = orchestrate("stats", *option, str(path), cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert option[0] in done.stderr


# ---------------------------------------------------------------- every field a report reads is in the view


def _parallel_run(directory: Path) -> Path:
    """A run of the parallel suite (no committed example has one): two cells, streamed and not, text-parsed and
    server-parsed calls, a refused seed, a later turn."""
    from orchestrator.runner.config.resolve import load_suite

    suite = load_suite("parallel")
    run = directory / "20260101T000000Z-parallel-000000"
    (run / "cells").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"run_id": run.name, "matrix": {"bootstrap": {"resamples": 300}}}))
    (run / "seeds").mkdir()  # the suite as the run resolved it (its snapshot): the report reads it, not seeds/
    (run / "seeds" / "parallel.yaml").write_bytes((REPO / "seeds" / "parallel.yaml").read_bytes())
    lines = []
    for order, (cell, stream, path) in enumerate([("c-server", False, "server"), ("c-text", True, "harness")]):
        cell_file = {"cell_id": cell, "stack_label": "llamacpp-jinja", "stack": "llamacpp", "model": "m",
                     "tools_mode": "native", "status": "complete", "order": order, "stream": stream,
                     "suite": "parallel"}  # fmt: skip
        (run / "cells" / f"{cell}.json").write_text(json.dumps(cell_file))
        for index, seed in enumerate(suite.seeds[:4]):
            calls = [{"name": c.name, "arguments": c.arguments, "id": f"i{n}" if path == "server" else None}
                     for n, c in enumerate(seed.parallel or [])][: 1 + index % 2]  # fmt: skip
            base = {"schema_version": 2, "run_id": run.name, "cell_id": cell, "seed": seed.id, "suite": "parallel",
                    "tools_mode": "native", "model": "m", "stack": "llamacpp", "stack_config": "llamacpp-jinja",
                    "stack_version": "b1", "parse_path": path, "stream": stream, "attempt": 0, "seed_attempt": 0,
                    "sampling_seed": index, "flags": [], "detail": None, "error": None}  # fmt: skip
            outcome = "rejected_request" if index == 3 else "valid_call"
            facts = {"stream_facts": {"call_indexes": list(range(len(calls)))}} if stream else {}
            lines.append({**base, "turn": 0, "outcome": outcome, "calls": calls, "raw_content": None, **facts})
            lines.append({**base, "turn": 1, "outcome": "no_call_prose", "calls": [], "raw_content": "done",
                          "end": "prose"})  # fmt: skip
    (run / "turns.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


def test_report_of_a_parallel_run_from_views_equals_the_report_from_full_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _parallel_run(tmp_path / "src")
    full = _report_files(run, tmp_path, False, monkeypatch)
    view = _report_files(run, tmp_path, True, monkeypatch)
    assert "parallel.csv" in full
    assert [name for name in full if view[name] != full[name]] == []


class _Spy(dict):
    """A record that notes every key the report reads of it, by whether it is a seed's first turn."""

    read: ClassVar[dict[bool, set[str]]] = {True: set(), False: set()}

    def _note(self, key: object) -> None:
        _Spy.read[dict.get(self, "turn") == 0].add(str(key))

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)

    def keys(self) -> Any:  # {**record} of a dict subclass with keys(): every key counts as read
        for key in dict.keys(self):
            self._note(key)
        return super().keys()


def test_every_field_the_report_reads_is_in_the_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over every committed run and a parallel-suite run: the keys read of a first turn are view fields, those
    read of a later turn are fields a later turn's view keeps (the first-turn fields are decoded on turn 0 only)."""
    from orchestrator.analysis.report import parallel

    read = RunStore.read_turns
    monkeypatch.setattr(RunStore, "read_turns", lambda self, view=False: [_Spy(r) for r in read(self)])
    counted = parallel.counted_turns  # the parallel section copies records (`dict(turn)`): spy on the copies too
    monkeypatch.setattr(parallel, "counted_turns", lambda records: [_Spy(r) for r in counted(records)])
    _Spy.read = {True: set(), False: set()}
    for run in [*EXAMPLES, _parallel_run(tmp_path / "parallel")]:
        copy = tmp_path / "copies" / run.name
        shutil.copytree(run, copy)
        write_report(RunStore(copy))
    assert {"calls", "raw_content", "model", "parse_path"} <= _Spy.read[True]  # the spy saw the sections read
    # Beyond the view: what the drill-down pages read of the turns they show, each read whole by its offset.
    drill = set(DrillFields.__annotations__) | {OFFSET_KEY}
    assert _Spy.read[True] <= VIEW_FIELDS | drill, sorted(_Spy.read[True] - VIEW_FIELDS - drill)
    later = (VIEW_FIELDS - set(FirstTurnFields.__annotations__)) | drill
    assert _Spy.read[False] <= later, sorted(_Spy.read[False] - later)


def test_report_on_a_manifest_with_a_huge_bootstrap_is_one_error(tmp_path: Path) -> None:
    run = tmp_path / EXAMPLES[0].name
    shutil.copytree(EXAMPLES[0], run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["matrix"]["bootstrap"] = {"resamples": 10**12, "rng_seed": -1}
    (run / "manifest.json").write_text(json.dumps(manifest))
    done = orchestrate("report", str(run), cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "resamples" in done.stderr


@pytest.mark.slow  # stdin as a real pipe needs a real process
def test_stats_reads_a_pipe_as_it_reads_a_file() -> None:
    """A pipe has no position (`tell` fails on it): the chunked reader counts offsets from its start instead."""
    import subprocess

    turns = EXAMPLES[0] / "turns.jsonl"
    command = [sys.executable, "-m", "orchestrator", "stats", "--json"]
    from_file = subprocess.run([*command, str(turns)], capture_output=True, text=True, timeout=120, cwd=REPO)
    piped = subprocess.run([*command, "/dev/stdin"], input=turns.read_text(encoding="utf-8"), capture_output=True,
                           text=True, timeout=120, cwd=REPO)  # fmt: skip  # `input`: a pipe, not a seekable file
    assert from_file.returncode == 0 and piped.returncode == 0, piped.stderr
    assert piped.stdout == from_file.stdout and len(piped.stdout.splitlines()) > 5
