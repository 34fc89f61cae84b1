"""Repairs a resume makes to a run directory before anything is appended (the policy: runner/store/runstore.py):
a killed run's partial seed runs kept and marked superseded, a torn last line moved to turns.jsonl.torn, a
damaged cell file kept aside; and the seal before a first append, so that no record is glued onto a fragment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core.types import SeedEnd
from orchestrator.runner.store.runpaths import owned_path
from orchestrator.runner.store.storedamage import Damage, LineError, aside_path, decoded, turn_record

if TYPE_CHECKING:
    from orchestrator.runner.store.runstore import RunStore

TAIL_BLOCK = 64 * 1024  # bytes read at a time, backwards, to find the last line of turns.jsonl


def supersede_unfinished(store: RunStore) -> int:
    """Mark the records of aborted seed runs superseded, kept on disk and never counted: runs a killed process
    cut short (no record ends them) and runs whose server died (`server_died`); the resume reruns each such seed
    under its next seed attempt. A torn last line goes to turns.jsonl.torn and a damaged cell file to
    cells/<id>.json.damaged (each warned about); any other damaged line is an error before anything changes.
    Returns how many records were newly marked."""
    from orchestrator.runner.store.runstore import run_key

    records = store.read_turns()
    for path, reason in store.damaged_cell_files():
        aside = owned_path(store.dir, aside_path(path, ".damaged"))
        owned_path(store.dir, path).replace(aside)
        store.note(Damage(path, None, "bad_cell", f"{reason}; kept as {aside.name}, the resume rebuilds the cell"))
    fragment = store.torn_fragment()
    if fragment is not None:  # kept first (and flushed): a failed rewrite after it loses nothing
        keep_torn(store, fragment)
    ended = {run_key(r) for r in records if r.get("end") and r["end"] != SeedEnd.SERVER_DIED}
    marked = 0
    for record in records:
        if run_key(record) not in ended and not record.get("superseded"):
            record["superseded"] = True
            marked += 1
    if marked or fragment is not None:  # the rewrite also leaves the torn fragment out of turns.jsonl
        store.rewrite(records)
    return marked


def keep_torn(store: RunStore, fragment: bytes) -> Path:
    """Append a torn fragment to turns.jsonl.torn (one per line, flushed to disk): not a record, but not thrown
    away; a fragment already kept last (a resume that failed after keeping it) is not kept twice."""
    torn_path = owned_path(store.dir, store.turns_path.with_name(store.turns_path.name + ".torn"))
    line = fragment + b"\n"
    if torn_path.is_file() and torn_path.stat().st_size >= len(line):
        with torn_path.open("rb") as handle:
            handle.seek(-len(line), os.SEEK_END)
            if handle.read() == line:
                return torn_path
    with torn_path.open("ab") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    store.warn(f"{store.turns_path}: the torn last line is kept in {torn_path.name}")
    return torn_path


def last_line_start(handle: object, size: int) -> int:
    """Offset of the first byte after the last `\\n` of an open binary file of `size` bytes (0 if none), read
    backwards a block at a time: never the whole file."""
    end = size
    while end > 0:
        start = max(0, end - TAIL_BLOCK)
        handle.seek(start)  # type: ignore[attr-defined]
        block = handle.read(end - start)  # type: ignore[attr-defined]
        cut = block.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def seal_tail(store: RunStore) -> None:
    """Before the first append: a file not ended by a newline gets one after a complete last record, or loses
    its torn fragment to turns.jsonl.torn; the next record never lands on a line of its own."""
    if not store.turns_path.is_file():
        return
    with owned_path(store.dir, store.turns_path).open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0 or (handle.seek(size - 1), handle.read(1))[1] == b"\n":
            return
        start = last_line_start(handle, size)
        handle.seek(start)
        fragment = handle.read()
        if not fragment.strip() or not isinstance(decoded(fragment, turn_record), LineError):
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")  # a complete record (or blanks) without its newline
            return
        handle.truncate(start)
    keep_torn(store, fragment)
