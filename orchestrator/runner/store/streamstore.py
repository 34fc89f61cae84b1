"""The raw streams of a run: one side file per cell, `streams/<cell_id>.jsonl`, one line per streamed attempt
(every event with its arrival offset, the timings, how it ended, and the turn attempt it belongs to).

Written before the turn record that points at it (`stream_ref`: `streams/<cell_id>.jsonl:<line>`), flushed per
line, so turns.jsonl stays small and `report --reclassify` can re-assemble any streamed turn. A torn last line
(a crash mid-write) is skipped on reading; an attempt written twice (a resumed seed) is read by its key.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, TextIO

from orchestrator.core.cell import slug
from orchestrator.runner.store.runpaths import owned_dir, owned_path

STREAMS_DIR = "streams"


def attempt_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """A turn attempt's identity: the turn record's fields, or a side-file record's `key`."""
    return tuple(record.get(k, 0) for k in ("cell_id", "seed", "seed_attempt", "sample", "turn", "attempt"))


class StreamStore:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.dir = run_dir / STREAMS_DIR
        self.lock = threading.Lock()
        self.handles: dict[str, tuple[TextIO, int]] = {}

    def append(self, cell_id: str, record: dict[str, Any]) -> str:
        """Write one streamed attempt; returns its reference for the turn record."""
        name = f"{slug(cell_id)}.jsonl"
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


def read_streams(run_dir: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Every stored stream of a run by attempt key (the last written wins); unreadable lines are skipped."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    folder = run_dir / STREAMS_DIR
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.jsonl")):
        # Lines end at `\n` only: streamed text may hold U+2028 or U+0085, which str.splitlines cuts at.
        for line in path.read_bytes().split(b"\n"):
            try:
                record = json.loads(line.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):  # a torn or damaged line; deep nesting is no record either
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), dict):
                found[attempt_key(record["key"])] = record
    return found
