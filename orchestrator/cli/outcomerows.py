"""The turn-record fields `orchestrate stats` reads, declared once (`STATS_FIELDS`) and derived from `TurnRecord`
(core/turnfields.py) in two forms: `OutcomeRow`, a TypedDict for msgspec, with which `stats` decodes a million
turn records a chunk at a time (core/jsonl.py `read_jsonl_rows`), skipping every field it does not read; and
`TurnOutcomeRow`, the same fields as a strict pydantic model, which reads a chunk msgspec refuses line by line and
names the line. Both are typed alike from the one declaration (no coercion: `"8"` is no turn, `1.0` no seed
attempt, `Valid_Call` no outcome); tests/test_scale_readers.py holds the two equal on hostile records."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd

from orchestrator.core.cell import PRIMARY_AXES, CellKey
from orchestrator.core.jsonl import InputError
from orchestrator.core.runrecords import RECORD_IDENTITY, duplicate_indexes, lost_records
from orchestrator.core.turnfields import Read, lean_model, lean_typeddict
from orchestrator.core.types import SeedEnd
from orchestrator.runner.store.rundir import open_run
from orchestrator.runner.store.turnview import REPORT_FIELDS

_REQUIRED = Read(required=True)
# Every field the report checks, read as the report reads it (runner/store/turnview.py REPORT_FIELDS: one rule for
# which lines are records: an unknown schema_version or a string `flags` is refused by both), and what stats
# groups by. Where stats differs it reads files from outside a matrix run too: records without a cell id (it comes
# from their axes) and integer seeds; and it groups by mode, so a mode must be one it knows.
STATS_FIELDS: dict[str, Read] = {
    **{name: read for name, read in REPORT_FIELDS.items() if read.checked},
    "stack": _REQUIRED,
    "stack_config": Read(),
    "model": _REQUIRED,
    "tools_mode": _REQUIRED,
    "seed": Read(required=True, also=(int,)),
    "cell_id": Read(),
}
OutcomeRow = lean_typeddict("OutcomeRow", STATS_FIELDS)
TurnOutcomeRow = lean_model("TurnOutcomeRow", STATS_FIELDS, "The fields `orchestrate stats` needs from a turn record.")
_DECODER = msgspec.json.Decoder(OutcomeRow)


def decode_outcome_rows(lines: bytes | memoryview, _ends: Any = None) -> list[dict[str, Any]]:
    """Newline-delimited turn records as rows of the fields `stats` reads (msgspec.DecodeError on a bad one)."""
    return _DECODER.decode_lines(lines)


TEXT_COLUMNS = ("stack", "stack_config", "model", "tools_mode", "outcome", "cell_id", "end")
RUN_KEY = ["cell_id", "seed", "seed_attempt"]


COLUMNS = ["stack", "stack_config", "model", "tools_mode", "seed", "turn", "outcome", "cell_id", "seed_attempt",
           "attempt", "superseded", "end"]  # fmt: skip  # what stats computes on (the rest is only checked)
IDENTITY = list(RECORD_IDENTITY)


def outcome_frame(
    batches: Iterable[list[dict[str, Any]]], where: str = "turn records", cells: dict[str, dict[str, Any]] | None = None
) -> pd.DataFrame:
    """The counted rows (store.counted_turns' rule: no superseded record, no record of a seed run whose server
    died) as one frame, each seed id a string, each row naming its stack config (the stack where the record
    has none) and cell id. Built a batch at a time, the repeated names kept once (a million rows name a few
    thousand cells), so memory grows by tens of bytes a row, not a row's dict. The report's rules for the set of
    records (core/runrecords.py) hold: a copied record, a gap in a seed run, or (given the run's `cells`) a
    planned seed a complete cell did not end is an InputError naming `where`."""
    frames = []
    for batch in batches:
        frame = pd.DataFrame(batch, columns=COLUMNS)
        for column in TEXT_COLUMNS:  # factorised per batch: each distinct name one object, the rows refer to it
            frame[column] = frame[column].astype("category").astype(object)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.concat(frames, ignore_index=True)
    frame["superseded"] = frame["superseded"].fillna(False).astype(bool)  # absent: not superseded (the default)
    if cells is not None and not frame["seed"].map(type).eq(str).all():  # a run's records name seeds by text id
        first = int(frame["seed"].map(type).ne(str).idxmax()) + 1
        raise InputError(f"{where}: record {first}: wrong type for seed (a run's records name their seed by its id)")
    frame["seed"] = frame["seed"].astype(str)
    named = frame["stack_config"].notna() & frame["stack_config"].ne("")  # as `stack_config or stack`
    frame["stack_config"] = frame["stack_config"].where(named, frame["stack"])
    frame["seed_attempt"] = frame["seed_attempt"].fillna(0).astype(int)
    frame["attempt"] = frame["attempt"].fillna(0).astype(int)
    missing = frame["cell_id"].isna() | frame["cell_id"].eq("")
    if missing.any():  # records from outside a matrix run: the cell's id from its axes
        axes = frame.loc[missing, list(PRIMARY_AXES)]
        ids = {key: CellKey(**dict(zip(PRIMARY_AXES, key, strict=True))).cell_id for key in set(axes.itertuples(False))}
        frame.loc[missing, "cell_id"] = [ids[key] for key in axes.itertuples(False)]
    identities = list(frame[IDENTITY].itertuples(index=False, name=None))
    _refuse_copies(frame, identities, where)
    if cells is not None:  # a run's turns.jsonl: every cell its turns name has its cell file (as in the report)
        orphans = sorted(set(frame["cell_id"]) - set(cells))
        if orphans:
            raise InputError(f"{Path(where).parent / 'cells' / orphans[0]}.json: missing (turns.jsonl names the cell)")
    ended = frame["end"].notna() & frame["end"].ne("")  # as the run reader reads an end: text, not empty
    lost = lost_records(cells or {}, identities, ended.tolist())
    if lost:
        cell_id = min(lost)
        raise InputError(f"{where}: cell {cell_id}: {lost[cell_id]} (a record lost); nothing was computed")
    died = frame.loc[frame["end"] == SeedEnd.SERVER_DIED.value, RUN_KEY].drop_duplicates()
    counted = ~frame["superseded"].astype(bool)
    if not died.empty:
        counted &= frame[RUN_KEY].merge(died, how="left", indicator=True)["_merge"].eq("left_only").to_numpy()
    return frame[counted].reset_index(drop=True)


def _refuse_copies(frame: pd.DataFrame, identities: list[tuple[Any, ...]], where: str) -> None:
    """The run reader's copy rule (core/runrecords.py duplicate_indexes), as one InputError naming the first."""
    copies = duplicate_indexes(identities)
    if copies:
        first = frame.iloc[copies[0]]
        identity = ", ".join(f"{key} {first[key]!r}" for key in IDENTITY)
        raise InputError(
            f"{where}: {len(copies)} turn record(s) repeat an earlier record's identity (first: record "
            f"{copies[0] + 1}, {identity}); a record is counted once, so nothing was computed"
        )


def run_cells(turns: Path) -> dict[str, dict[str, Any]] | None:
    """The cell files of the run whose turns.jsonl `turns` is (its folder holds the manifest), read by the
    store's rule (StoreError on a damaged one); None for a file from outside a run."""
    if turns.name != "turns.jsonl" or not (turns.parent / "manifest.json").is_file():
        return None
    return {cell["cell_id"]: cell for cell in open_run(turns.parent).read_cells()}
