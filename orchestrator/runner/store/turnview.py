"""A lean, read-only view of a turn record for the report at scale.

A full record holds the stack's raw reply (`raw_body`, ~40% of a record), the text-call candidates, the prompt-
cache facts: the report used to read them all, whole file and every field (some 14 KiB of peak memory a turn,
benchmarks/results/scale-before.md); it reads none of those. A
view is a plain dict decoded by msgspec straight from the line's bytes with only the fields the report reads
(`TurnView`, a TypedDict; every other field in the line is scanned, never built into objects). The fields the
report reads on a seed's first turn only (`FirstTurnFields`: its first answer, for stream pairs and parallel
first calls) are decoded for turn-0 lines alone, in a second pass over just those lines.

Both are derived from `TurnRecord` (core/turnfields.py): this module names the fields and how leniently each
is read, never their types. The fields are typed as strictly as `storedamage.turn_record` checks them; a line
that fails here is handed to `turn_record` for its exact error message (the one reader of damage), so the view
changes how fast a good line is read, never which lines are good.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from orchestrator.core.turnfields import Read, lean_typeddict

_REQUIRED, _SHOWN = Read(required=True), Read(checked=False)  # _SHOWN: read as it stands, shown, never computed on
# The fields of a turn record the report reads on every turn (analysis/report/report.py and its sections), and how.
# storedamage derives the full reader's checks from these: TURN_KEYS (the required ones) and TEXT_OR_NULL.
REPORT_FIELDS: dict[str, Read] = {
    "cell_id": _REQUIRED,
    "seed": _REQUIRED,
    "turn": _REQUIRED,
    "outcome": _REQUIRED,
    "tools_mode": Read(required=True, any_text=True),
    "schema_version": Read(nullable=False),  # another version: the line goes to the full reader, which names it
    "seed_attempt": Read(nullable=False),  # with cell, seed, turn and attempt: the record's identity
    "attempt": Read(nullable=False),  # (core/runrecords.py RECORD_IDENTITY); absent: 0, null: no count
    "sample": Read(nullable=False),  # the cell's sample axis, checked against the cell file (rundir.read_run)
    "end": Read(any_text=True),
    "superseded": Read(nullable=False),
    "call_format": Read(),
    "constraint_honoured": _SHOWN,
    "detail": Read(),
    "flags": Read(),
    "stack_version": Read(),
    "stream": _SHOWN,
    "stream_facts": _SHOWN,
    "suite": Read(),
    "task_success": _SHOWN,
}
# What the report reads of a seed's first turn beyond `TurnView`: its first answer, how it was drawn, (parallel
# suite) what served it, and (a BFCL case) its verdict; shown as they are (not checked by either reader: the BFCL
# report validates each verdict it reads, analysis/report/bfclreport.py).
FIRST_TURN_FIELDS: dict[str, Read] = dict.fromkeys(
    ("calls", "error", "raw_content", "sampling_seed", "model", "stack_config", "parse_path", "bfcl"), _SHOWN
)
TurnView = lean_typeddict("TurnView", REPORT_FIELDS)
FirstTurnFields = lean_typeddict("FirstTurnFields", FIRST_TURN_FIELDS)

OFFSET_KEY = "_offset"  # set on each view by the store: where its line starts in turns.jsonl (not a record field)
VIEW_FIELDS = frozenset(TurnView.__annotations__) | frozenset(FirstTurnFields.__annotations__)
_DECODER = msgspec.json.Decoder(TurnView)
_FIRST_TURN = msgspec.json.Decoder(FirstTurnFields)


def decode_views(lines: bytes | memoryview, ends: np.ndarray) -> list[dict[str, Any]]:
    """Newline-delimited records as views, all at once (msgspec.DecodeError on the first that is none); `ends`:
    the offset of each line's `\\n` (one record a line), which finds a turn-0 line for its second pass."""
    views = _DECODER.decode_lines(lines)
    if len(views) != len(ends):
        return views  # not one record a line: the caller reads this chunk line by line
    for index, view in enumerate(views):
        if view["turn"] == 0:
            start = int(ends[index - 1]) + 1 if index else 0
            view.update(_FIRST_TURN.decode(lines[start : int(ends[index])]))
    return views


def decode_view(raw: bytes) -> dict[str, Any]:
    """A line as a view; msgspec.DecodeError (its ValidationError included) when it is not a good record."""
    view = _DECODER.decode(raw)
    if view["turn"] == 0:
        view.update(_FIRST_TURN.decode(raw))
    return view
