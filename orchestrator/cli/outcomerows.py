"""The turn-record fields `orchestrate stats` reads, declared once (`STATS_FIELDS`) and derived from `TurnRecord`
(core/turnfields.py) in two forms: `OutcomeRow`, a TypedDict for msgspec, with which `stats` decodes a million
turn records a chunk at a time (core/jsonl.py `read_jsonl_rows`), skipping every field it does not read; and
`TurnOutcomeRow`, the same fields as a strict pydantic model, which reads a chunk msgspec refuses line by line and
names the line. Both are typed alike from the one declaration (no coercion: `"8"` is no turn, `1.0` no seed
attempt, `Valid_Call` no outcome); tests/test_scale_readers.py holds the two equal on hostile records."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
import pandas as pd

from orchestrator.core.cell import PRIMARY_AXES, CellKey
from orchestrator.core.turnfields import Read, lean_model, lean_typeddict
from orchestrator.core.types import SeedEnd

_REQUIRED = Read(required=True)
STATS_FIELDS: dict[str, Read] = {
    "stack": _REQUIRED,
    "stack_config": Read(),
    "model": _REQUIRED,
    "tools_mode": _REQUIRED,
    "seed": Read(required=True, also=(int,)),  # records from outside a matrix run may number their seeds
    "turn": _REQUIRED,
    "outcome": _REQUIRED,
    "cell_id": Read(),  # absent: a record from outside a matrix run (its id comes from its axes)
    "seed_attempt": Read(nullable=False),
    "superseded": Read(nullable=False),
    "end": Read(any_text=True),
}
OutcomeRow = lean_typeddict("OutcomeRow", STATS_FIELDS)
TurnOutcomeRow = lean_model("TurnOutcomeRow", STATS_FIELDS, "The fields `orchestrate stats` needs from a turn record.")
_DECODER = msgspec.json.Decoder(OutcomeRow)


def decode_outcome_rows(lines: bytes | memoryview, _ends: Any = None) -> list[dict[str, Any]]:
    """Newline-delimited turn records as rows of the fields `stats` reads (msgspec.DecodeError on a bad one)."""
    return _DECODER.decode_lines(lines)


TEXT_COLUMNS = ("stack", "stack_config", "model", "tools_mode", "outcome", "cell_id", "end")
RUN_KEY = ["cell_id", "seed", "seed_attempt"]


def outcome_frame(batches: Iterable[list[dict[str, Any]]]) -> pd.DataFrame:
    """The counted rows (store.counted_turns' rule: no superseded record, no record of a seed run whose server
    died) as one frame, each seed id a string, each row naming its stack config (the stack where the record
    has none) and cell id. Built a batch at a time, the repeated names kept once (a million rows name a few
    thousand cells), so memory grows by tens of bytes a row, not a row's dict."""
    frames = []
    for batch in batches:
        frame = pd.DataFrame(batch, columns=list(OutcomeRow.__annotations__))
        for column in TEXT_COLUMNS:  # factorised per batch: each distinct name one object, the rows refer to it
            frame[column] = frame[column].astype("category").astype(object)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=list(OutcomeRow.__annotations__))
    frame = pd.concat(frames, ignore_index=True)
    frame["seed"] = frame["seed"].astype(str)
    named = frame["stack_config"].notna() & frame["stack_config"].ne("")  # as `stack_config or stack`
    frame["stack_config"] = frame["stack_config"].where(named, frame["stack"])
    frame["seed_attempt"] = frame["seed_attempt"].fillna(0).astype(int)
    missing = frame["cell_id"].isna() | frame["cell_id"].eq("")
    if missing.any():  # records from outside a matrix run: the cell's id from its axes
        axes = frame.loc[missing, list(PRIMARY_AXES)]
        ids = {key: CellKey(**dict(zip(PRIMARY_AXES, key, strict=True))).cell_id for key in set(axes.itertuples(False))}
        frame.loc[missing, "cell_id"] = [ids[key] for key in axes.itertuples(False)]
    died = frame.loc[frame["end"] == SeedEnd.SERVER_DIED.value, RUN_KEY].drop_duplicates()
    counted = ~frame["superseded"].astype(bool)
    if not died.empty:
        counted &= frame[RUN_KEY].merge(died, how="left", indicator=True)["_merge"].eq("left_only").to_numpy()
    return frame[counted].reset_index(drop=True)
