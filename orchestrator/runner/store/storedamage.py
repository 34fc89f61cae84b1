"""Reading a run directory that may be damaged: turns.jsonl split into lines by `\\n` only (a record's text may
hold U+2028 or U+0085, which `str.splitlines` would cut at), each line checked to be a turn record, and what
is not one described as `Damage` (file, line, what is wrong) for the store to refuse, warn about or keep aside.
The policy itself is the store's (see `orchestrator.runner.store.runstore`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_type_hints

import msgspec
import numpy as np

from orchestrator.core.cell import LATER_AXES, PRIMARY_AXES
from orchestrator.core.jsonl import BulkDecode, bulk_decoded, iter_chunks, numbered_lines
from orchestrator.core.runcontract import product_field_problems
from orchestrator.core.runrecords import record_identities
from orchestrator.core.turnfields import MAX_COUNT
from orchestrator.core.types import Outcome
from orchestrator.runner.store.turnview import TurnView, decode_view

TURN_KEYS = tuple(key for key in TurnView.__annotations__ if key in TurnView.__required_keys__)
OUTCOMES = frozenset(o.value for o in Outcome)
# Text fields the report reads of every turn: a string or null (another type would fail it mid-report); taken
# from the view's types (runner/store/turnview.py TurnView), so both readers check them alike.
TEXT_OR_NULL = tuple(key for key, kind in get_type_hints(TurnView).items() if kind == str | None)
DAMAGED_STATUS = "damaged"  # a stand-in cell's status: its cell file could not be read
# The turn fields a stand-in cell takes over from its first turn record (the rest of its config is lost): every
# cell axis but stack_config (a cell file's `stack_label`, set from it below), what that label is made of, and
# the hint and suite.
_RECORDED_AXES = tuple(axis for axis in (*PRIMARY_AXES, *LATER_AXES) if axis != "stack_config")
STANDIN_FIELDS = ("stack", "tool_config", "hint", "suite", *_RECORDED_AXES)

MAX_LISTED = 5  # damaged lines an error names one by one
TORN = "torn last line (a write cut short, e.g. a killed run): not a record, skipped; its seed is unfinished"
CELL_HINT = (
    "`orchestrate matrix --resume` rebuilds the cell (keeping this file aside), "
    "`orchestrate report --allow-damaged` reports its turns"
)
LINE_HINT = (
    "a damaged line in the middle may be a real record, so nothing was changed; `orchestrate report "
    "--allow-damaged` reports the intact records; to resume, repair the line(s) or move them out of the file"
)
MANIFEST_HINT = "`orchestrate report --allow-damaged` reports without it"

DamageKind = Literal[
    "torn_tail", "bad_line", "duplicate_record", "bad_cell", "missing_cell", "no_manifest", "bad_setting"
]


@dataclass(frozen=True)
class Damage:
    """One damaged thing in a run directory: a line of turns.jsonl, a cell file, the manifest."""

    path: Path
    line: int | None
    kind: DamageKind
    detail: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        return f"{where}: {self.detail}"


class LineError(ValueError):
    """A line that is not a turn record; the message says why (the caller adds file and line)."""


def load_json(text: str | bytes) -> Any:
    """json.loads whose every failure is a ValueError (deep nesting raises RecursionError otherwise)."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply to read") from exc


def _is_int(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_COUNT


def turn_record(raw: bytes) -> dict[str, Any]:
    """A line of turns.jsonl as a turn record, or LineError saying what it is instead."""
    try:
        record = load_json(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise LineError(f"not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1})") from exc
    except ValueError as exc:
        raise LineError(f"bad JSON: {exc}") from exc
    if not isinstance(record, dict) or not all(key in record for key in TURN_KEYS):
        raise LineError(f"not a turn record (needs {', '.join(TURN_KEYS)})")
    wrong = [key for key in ("cell_id", "seed", "tools_mode") if not isinstance(record[key], str)]
    wrong += [] if _is_int(record["turn"]) else ["turn"]
    # Counts of the record's identity and axes: absent (an older record: 0) or a count; null is no count.
    wrong += [key for key in ("seed_attempt", "attempt", "sample") if key in record and not _is_int(record[key])]
    wrong += [key for key in TEXT_OR_NULL if not isinstance(record.get(key), str | None)]
    flags = record.get("flags")
    wrong += [] if flags is None or (isinstance(flags, list) and all(isinstance(f, str) for f in flags)) else ["flags"]
    wrong += [] if isinstance(record.get("superseded", False), bool) else ["superseded"]
    wrong += product_field_problems(record)  # the channel readers' fields (the report's lean view reads none)
    if wrong:
        raise LineError(f"not a turn record (wrong type for {', '.join(wrong)})")
    if not isinstance(record["outcome"], str) or record["outcome"] not in OUTCOMES:
        known = ", ".join(sorted(OUTCOMES))
        raise LineError(f"unknown outcome {record['outcome']!r} (an outcome is one of {known})")
    return record


Decode = Callable[[bytes], Any]


@dataclass
class Batch:
    """What one chunk of a file held: `records` read at once by a bulk decoder, and `lines` read one by one,
    each as (line number, raw line, record or the reason it is none, whether it is the unended last line:
    bytes after the last `\\n`, a torn write or a record whose newline never made it)."""

    records: list[Any]
    lines: list[tuple[int, bytes, Any, bool]]
    first: int = 1  # the chunk's first line number
    starts: np.ndarray | None = None  # each line's byte offset in the file, from line `first` on

    def offset(self, number: int) -> int:
        """Where line `number` of this batch starts in the file."""
        assert self.starts is not None
        return int(self.starts[number - self.first])


def iter_file_batches(
    path: Path,
    decode: Decode = turn_record,
    bulk: BulkDecode | None = None,
    on_long: Callable[[int], None] | None = None,
) -> Iterator[Batch]:
    """A file's non-blank lines, read a chunk at a time (bounded memory: core/jsonl.py). `bulk` decodes a chunk's
    complete lines at once; a chunk it cannot read as one record a line is read line by line with `decode`
    (`bulk_decoded`), which decides. `on_long`: a line past the line bound is skipped and its number passed."""
    with path.open("rb") as handle:
        for chunk in iter_chunks(
            handle, on_long=on_long
        ):  # a line past MAX_LINE_BYTES: ValueError, refused before it is read whole
            records = bulk_decoded(chunk, bulk) if bulk is not None else None
            if records is not None:
                yield Batch(records, [], chunk.first, chunk.starts())
                continue
            lines = [(number, raw, decoded(raw, decode), chunk.unended) for number, raw in numbered_lines(chunk)]
            yield Batch([], lines, chunk.first, chunk.starts())


def decoded(raw: bytes, decode: Decode) -> Any:
    try:
        return decode(raw)
    except LineError as exc:
        return exc


def judged(decode: Callable[[bytes], Any]) -> Decode:
    """A lean decoder whose refusals turn_record judges, the one reader of damage: a line `decode` refuses gets
    turn_record's LineError, or, where the two readers disagree, the full record."""

    def line(raw: bytes) -> Any:
        try:
            return decode(raw)
        except (msgspec.DecodeError, RecursionError):  # nested past msgspec's depth: turn_record names it
            return turn_record(raw)

    return line


view_record = judged(decode_view)  # a line as a `TurnView` (runner/store/turnview.py)


def lean_reader(fields: type) -> tuple[Decode, BulkDecode]:
    """Decoders for a TypedDict of some of a record's fields (a notebook's turns table): a chunk decoded in bulk,
    a line judged as `judged` does."""
    decoder = msgspec.json.Decoder(fields)

    def bulk(lines: bytes | memoryview, _ends: Any) -> list[Any]:
        return decoder.decode_lines(lines)

    return judged(decoder.decode), bulk


def standin_cell(cell_id: str, turns_path: Path, reason: str) -> dict[str, Any] | None:
    """What a damaged cell file can be replaced by for a report: the axes its first readable turn record
    names, status `damaged`, the reason; None when no turn names the cell (nothing of it to report)."""
    needle = json.dumps(cell_id).encode()
    try:
        return _standin_from(turns_path, needle, cell_id, reason)
    except (OSError, ValueError):  # no turns file, an overlong line: no stand-in (the read of turns says why)
        return None


def _standin_from(turns_path: Path, needle: bytes, cell_id: str, reason: str) -> dict[str, Any] | None:
    with turns_path.open("rb") as handle:
        lines = (line for chunk in iter_chunks(handle) for line in numbered_lines(chunk))
        for _number, raw in lines:
            record = decoded(raw, turn_record) if needle in raw else None  # decode only the lines naming it
            if isinstance(record, dict) and record["cell_id"] == cell_id:
                return standin_of(record, reason)
    return None


def standin_of(record: dict[str, Any], reason: str) -> dict[str, Any]:
    """A stand-in cell from one of its turn records (a whole one): the axes it names, status `damaged`."""
    fields = {key: record[key] for key in STANDIN_FIELDS if key in record}
    label = record.get("stack_config") or record.get("stack")
    return {**fields, "cell_id": record["cell_id"], "order": 10**9, "stack_label": label,
            "status": DAMAGED_STATUS, "error": reason}  # fmt: skip


def aside_path(path: Path, suffix: str) -> Path:
    """A free name beside `path` to keep a damaged file or fragment under (`x.json.damaged`, `.damaged.1`, ...)."""
    candidate, index = path.with_name(path.name + suffix), 0
    while candidate.exists():
        index += 1
        candidate = path.with_name(f"{path.name}{suffix}.{index}")
    return candidate


def damaged_lines_message(bad: list[Damage]) -> str:
    """One error for every damaged line: the first in full, then up to MAX_LISTED more, then a count."""
    others = "".join(f"\n  {d}" for d in bad[1:MAX_LISTED])
    more = f"\n  ... and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
    count = f" (and {len(bad) - 1} more damaged line(s)):{others}{more}" if len(bad) > 1 else ""
    return f"{bad[0]}{count}\n{LINE_HINT}"


def drop_indexes(records: list[Any], indexes: list[int]) -> list[Any]:
    """`records` without the ones at `indexes`."""
    dropped = set(indexes)
    return [record for index, record in enumerate(records) if index not in dropped]


def copy_damages(path: Path) -> list[Damage]:
    """Each line of a turns file whose record is a copy of an earlier line's (the same identity:
    core/runrecords.py RECORD_IDENTITY), naming both lines. Read again line by line, only when the fast read
    found copies: a damaged file's cost."""
    first_line: dict[tuple[Any, ...], int] = {}
    found = []
    with path.open("rb") as handle:
        for chunk in iter_chunks(handle, on_long=lambda _number: None):  # an overlong line: listed by the read
            for number, raw in numbered_lines(chunk):
                identity = _identity_of(raw)
                if identity is None:
                    continue
                if identity in first_line:
                    detail = (f"a copy of line {first_line[identity]}'s record (the same cell, seed, seed_attempt, "
                              "turn and attempt): not counted again")  # fmt: skip
                    found.append(Damage(path, number, "duplicate_record", detail))
                else:
                    first_line[identity] = number
    return found


def _identity_of(raw: bytes) -> tuple[Any, ...] | None:
    """A line's record identity as its JSON says (None: no JSON object with one). Read leniently: whichever reader
    took the line (the lean view or the full one), its copy is found."""
    try:
        record = load_json(raw)
        (identity,) = record_identities([record]) if isinstance(record, dict) else [None]
        hash(identity)
    except (ValueError, KeyError, TypeError):
        return None
    return identity
