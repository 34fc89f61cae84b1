"""The raw streams of a run: one side file per cell, `streams/<cell_id>.jsonl`, one line per streamed attempt
(every event with its arrival offset, the timings, how it ended, and the turn attempt it belongs to).

Written before the turn record that points at it (`stream_ref`: `streams/<cell_id>.jsonl:<line>`), flushed per
line, so turns.jsonl stays small and `report --reclassify` can re-assemble any streamed turn. A torn last line
(a crash mid-write) is skipped on reading. A turn's stream is the line its own `stream_ref` names, and only when
that line is in its cell's file and holds its own attempt key (`stream_of`): a line found anywhere else (a stray
file, another cell's file, an attempt written twice) never stands in for it.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any, TextIO

from orchestrator.core.cell import slug
from orchestrator.core.jsonl import iter_chunks, numbered_lines
from orchestrator.runner.store.runpaths import owned_dir, owned_path

STREAMS_DIR = "streams"


StreamRef = str  # `streams/<file>:<line>`, as StreamStore.append returns it and a turn record's stream_ref holds


def attempt_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """A turn attempt's identity: the turn record's fields, or a side-file record's `key`."""
    return tuple(record.get(k, 0) for k in ("cell_id", "seed", "seed_attempt", "sample", "turn", "attempt"))


def stream_file(cell_id: str) -> str:
    """The side file a cell's streams are written to, relative to the run directory."""
    return f"{STREAMS_DIR}/{slug(cell_id)}.jsonl"


class StreamStore:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.dir = run_dir / STREAMS_DIR
        self.lock = threading.Lock()
        self.handles: dict[str, tuple[TextIO, int]] = {}

    def append(self, cell_id: str, record: dict[str, Any]) -> str:
        """Write one streamed attempt; returns its reference for the turn record."""
        name = stream_file(cell_id).removeprefix(f"{STREAMS_DIR}/")
        with self.lock:
            if name not in self.handles:
                path = owned_path(self.run_dir, owned_dir(self.run_dir, self.dir) / name)
                lines = _count_lines(path)
                self.handles[name] = (path.open("a", encoding="utf-8"), lines)
            handle, lines = self.handles[name]
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            handle.flush()
            self.handles[name] = (handle, lines + 1)
        return f"{STREAMS_DIR}/{name}:{lines + 1}"

    def close(self) -> None:
        with self.lock:
            for handle, _ in self.handles.values():
                handle.close()
            self.handles.clear()


def _count_lines(path: Path) -> int:
    if not path.is_file():
        return 0
    with path.open("rb") as handle:
        data = handle.read()
    if data and not data.endswith(b"\n"):  # a torn last line: start the next record on a line of its own
        with path.open("ab") as handle:
            handle.write(b"\n")
        return data.count(b"\n") + 1
    return data.count(b"\n")


def read_streams(run_dir: Path) -> dict[StreamRef, dict[str, Any]]:
    """Every stored stream of a run by its reference (file and line); unreadable lines are skipped."""
    found: dict[StreamRef, dict[str, Any]] = {}
    folder = run_dir / STREAMS_DIR
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.jsonl")):
        if path.is_file():  # a FIFO or device would block or never end: no side file
            found |= _file_streams(path)
    return found


def _file_streams(path: Path) -> dict[StreamRef, dict[str, Any]]:
    """A side file's readable lines by reference, read a chunk at a time (bounded memory, a line past
    MAX_LINE_BYTES ends the read: the lines after it are missing). Lines end at `\n` only: streamed text may hold
    U+2028 or U+0085, which str.splitlines cuts at."""
    found: dict[StreamRef, dict[str, Any]] = {}
    with contextlib.suppress(ValueError), path.open("rb") as handle:
        for chunk in iter_chunks(handle):
            for number, line in numbered_lines(chunk):
                try:
                    record = json.loads(line.decode("utf-8", errors="replace"))
                except (ValueError, RecursionError):  # a torn or damaged line; deep nesting is no record either
                    continue
                if isinstance(record, dict) and isinstance(record.get("key"), dict):
                    found[f"{STREAMS_DIR}/{path.name}:{number}"] = record
    return found


def stream_of(turn: dict[str, Any], streams: dict[StreamRef, dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """A streamed turn's side-file record: the line its own `stream_ref` names, if that line is in the turn's
    cell's file and holds the turn's attempt key. Else (None, why): `missing` (no readable line there) or what
    makes the line another attempt's (damage: never used)."""
    ref = turn.get("stream_ref")
    if not isinstance(ref, str) or not ref.startswith(stream_file(str(turn.get("cell_id"))) + ":"):
        return None, f"stream_ref {ref!r} is not a line of the cell's side file {stream_file(str(turn.get('cell_id')))}"
    stored = streams.get(ref)
    if stored is None:
        return None, "missing"
    if attempt_key(stored["key"]) != attempt_key(turn):
        return None, f"{ref} holds the stream of another attempt ({json.dumps(stored['key'], default=str)[:200]})"
    return stored, ""
