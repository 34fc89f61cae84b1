"""The results store: `results/<run_id>/` with manifest.json, an append-only turns.jsonl flushed per turn,
and one JSON file per cell with its full stack config. Resumable: a seed is done when its last record
carries `end` (and that end is not `server_died`). A seed rerun after its server died, or after the harness was
killed under it, keeps the aborted run's records, marked `superseded` (before the rerun, or at the resume:
runner/store/storerepair.py): nothing lost, nothing counted twice.

Damage (what a reader meets in a run directory a crash, a full disk or a hand edit left behind):
- a torn last line of turns.jsonl (bytes after the last newline that are no record: the signature of a writer
  killed mid-write) is not a record. Reading skips it with a warning naming file and line; its seed has no
  complete record, so it is unfinished and a resume reruns it. The resume (and the first append of a store)
  moves the fragment to `turns.jsonl.torn` before writing, so no record is glued onto it and no byte is lost.
- any other line that is not a turn record (bad JSON, not UTF-8, missing or mistyped fields, an outcome that is
  not one of the six) may be a real record: it is an error naming file and line, and nothing is changed,
  neither by a resume nor by a report. `RunStore(..., recover=True)` (`report --allow-damaged`) reads what is
  intact instead, the damaged lines listed as `damage` and warned about.
- a cell file that is not one: an error when reading; a resume moves it aside to `cells/<id>.json.damaged`
  (warned about; the sweep rebuilds the cell from a new launch); in recover mode it reads as a stand-in cell
  (status `damaged`, the axes its turns name).
- a missing or unreadable manifest: an error (a resume cannot know the matrix); in recover mode a stand-in
  with an empty matrix (default bootstrap settings), warned about.
- a missing turns.jsonl: always an error (a run's directory has one from its start); one that is no regular file
  (a FIFO) too, never waited on.
- a record copied (its identity held by an earlier line) is damage like a bad line; a lost record (a gap in a
  seed run, a planned seed a complete cell never ended) and a cell file missing while turns name the cell are
  judged by the one reader of a whole run (runner/store/rundir.py read_run; the rules: core/runrecords.py)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import filterfalse, repeat
from operator import methodcaller
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from orchestrator.core.jsonl import MAX_LINE_BYTES, read_error, read_regular_file
from orchestrator.core.runcontract import (
    ContractError,
    RunManifest,
    SchemaVersionError,
    check_cell,
    read_manifest,
    upgraded,
)
from orchestrator.core.runrecords import duplicate_indexes, record_identities
from orchestrator.core.types import SeedEnd, TurnRecord
from orchestrator.runner.store import storerepair
from orchestrator.runner.store.diskfull import append_line, named_writes
from orchestrator.runner.store.runpaths import StoreError, owned_path, write_json_atomic
from orchestrator.runner.store.storedamage import (
    CELL_HINT,
    MANIFEST_HINT,
    TORN,
    Damage,
    LineError,
    copy_damages,
    damaged_lines_message,
    drop_indexes,
    iter_file_batches,
    lean_reader,
    load_json,
    standin_cell,
    turn_record,
    view_record,
)
from orchestrator.runner.store.turnview import OFFSET_KEY, decode_views


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


SeedKey = tuple[str, str]  # (cell id, seed id)


@dataclass(frozen=True)
class SeedState:
    attempt: int  # the latest run of the seed (0 = first)
    end: str | None  # how that run ended; None while unfinished

    @property
    def finished(self) -> bool:
        return self.end is not None and self.end != SeedEnd.SERVER_DIED


def turn_key(record: dict[str, Any]) -> tuple[str, str, int, int]:
    """A turn of one run of a seed (its retry attempts share it): cell, seed, seed_attempt, turn. The cell id
    carries the sample index and every other axis."""
    return (record["cell_id"], record["seed"], record.get("seed_attempt", 0), record["turn"])


def seed_key(record: dict[str, Any]) -> SeedKey:
    return (record["cell_id"], record["seed"])


def run_key(record: dict[str, Any]) -> tuple[str, str, int]:
    return (record["cell_id"], record["seed"], int(record.get("seed_attempt") or 0))


def seed_states(records: list[dict[str, Any]]) -> dict[SeedKey, SeedState]:
    states: dict[SeedKey, SeedState] = {}
    for record in records:
        key, attempt = seed_key(record), int(record.get("seed_attempt") or 0)
        current = states.get(key)
        if current is None or attempt > current.attempt:
            states[key] = SeedState(attempt, record.get("end"))
        elif attempt == current.attempt and record.get("end"):
            states[key] = SeedState(attempt, record["end"])
    return states


def counted_turns(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records statistics count: not superseded by a rerun, and not from a seed run whose server
    died under it (an aborted run is kept on disk, never counted)."""
    # Filtered in C first (filter over methodcaller): most records carry no end and are not superseded.
    died = {run_key(r) for r in filter(methodcaller("get", "end"), records) if r["end"] == SeedEnd.SERVER_DIED}
    kept = list(filterfalse(methodcaller("get", "superseded"), records))
    return kept if not died else [r for r in kept if run_key(r) not in died]


def warn_stderr(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a million records are built: records hold no cycles, and each
    collection would walk every object built so far (a read that grows quadratically)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class RunStore:
    def __init__(self, run_dir: Path, *, recover: bool = False, warn: Callable[[str], None] = warn_stderr) -> None:
        """`recover`: read what is intact of a damaged run (damaged lines skipped, stand-ins for a damaged cell
        file or manifest), each damage warned about once and listed in `damage`. Without it they are errors."""
        self.dir = run_dir
        self.turns_path = run_dir / "turns.jsonl"
        self.cells_dir = run_dir / "cells"
        self.manifest_path = run_dir / "manifest.json"
        self.recover = recover
        self.warn = warn
        self.damage: list[Damage] = []
        self._torn: bytes | None = None  # the torn last line read last, if any
        self._handle: BinaryIO | None = None
        self._states: dict[SeedKey, SeedState] | None = None

    @property
    def run_id(self) -> str:
        return self.dir.name

    def note(self, damage: Damage) -> None:
        """Record a damage once (reads repeat) and warn about it."""
        if damage not in self.damage:
            self.damage.append(damage)
            self.warn(str(damage))

    def create(self, manifest: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=False)
        self.cells_dir.mkdir()
        self.turns_path.touch()
        write_json_atomic(self.manifest_path, manifest, run_dir=self.dir)

    def manifest(self) -> dict[str, Any]:
        try:
            data = load_json(read_regular_file(self.manifest_path))
        except FileNotFoundError:
            problem = "missing (not a run directory, or its manifest was lost): a resume cannot know the matrix"
        except (OSError, ValueError) as exc:
            problem = f"not a run manifest ({exc})"
        else:
            if isinstance(data, dict) and isinstance(data.get("matrix", {}), dict):
                data = check_schema(str(self.manifest_path), data)
                try:
                    read_manifest(str(self.manifest_path), data)  # the contract's types (core/runcontract.py)
                    return data
                except ContractError as exc:
                    problem = str(exc).split(": ", 1)[-1]
            else:
                problem = "not a run manifest (a JSON object with a `matrix` object is expected)"
        if not self.recover:
            raise StoreError(f"{self.manifest_path}: {problem}; {MANIFEST_HINT}")
        self.note(Damage(self.manifest_path, None, "no_manifest", f"{problem}; reporting with default settings"))
        return {"run_id": self.run_id, "matrix": {}}

    def run_manifest(self) -> RunManifest:
        """The manifest as its typed model (the same read and damage policy as `manifest`)."""
        return RunManifest.model_validate(self.manifest())

    def update_manifest(self, **fields: Any) -> None:
        write_json_atomic(self.manifest_path, {**self.manifest(), **fields}, run_dir=self.dir)

    def read_turns(self, *, view: bool = False, fields: type | None = None) -> list[dict[str, Any]]:
        """All stored turn records. A torn last line is skipped with a warning; any other damaged line is an
        error naming file and line (skipped with a warning in recover mode). See the module's damage policy.
        The file is read a chunk at a time; `view`: each record as a lean `TurnView` (runner/store/turnview.py) of
        the fields the report reads, for runs of millions of turns; `fields`: a TypedDict of the fields to
        read instead (the same policy: a line it refuses is judged by the full reader)."""
        records: list[dict[str, Any]] = []
        bad: list[Damage] = []
        self._torn = None
        if self.turns_path.exists() and not self.turns_path.is_file():  # a FIFO would block the read forever
            raise StoreError(f"{self.turns_path}: not a regular file (nothing was read or changed)")
        try:
            with paused_gc():
                self._read_into(records, bad, view, fields)
        except FileNotFoundError as exc:
            raise StoreError(f"{self.turns_path}: missing: the run has no turn records (nothing was changed)") from exc
        except (OSError, ValueError) as exc:  # ValueError: a line past MAX_LINE_BYTES, refused unread
            raise StoreError(read_error(self.turns_path, exc)) from exc
        copies = duplicate_indexes(record_identities(records))
        if copies:  # one identity, one record (core/runrecords.py): a copy is damage, never a second turn
            bad += copy_damages(self.turns_path)
            records = drop_indexes(records, copies)
        if bad and not self.recover:
            raise StoreError(damaged_lines_message(sorted(bad, key=lambda d: d.line or 0)))
        for damage in bad:
            self.note(damage)
        return records

    def _read_into(self, records: list[Any], bad: list[Damage], view: bool, fields: type | None) -> None:
        decode, bulk = lean_reader(fields) if fields else (view_record, decode_views) if view else (turn_record, None)
        # Read around: a line past the bound is damage like any other line that is no record (listed, skipped).
        too_long = f"line longer than {MAX_LINE_BYTES} bytes: not a record, not read"

        def skip(number: int) -> None:
            bad.append(Damage(self.turns_path, number, "bad_line", too_long))

        for batch in iter_file_batches(self.turns_path, decode, bulk, skip if self.recover else None):
            records += batch.records  # read in bulk: the view's types admit only known schema versions
            if view and batch.records:  # where each view's line is: read_records_at reads it whole later
                starts = batch.starts.tolist()
                if len(starts) != len(batch.records):  # a bulk read is one record a line, or none
                    raise ValueError(f"{len(batch.records)} records for {len(starts)} lines")
                deque(map(dict.__setitem__, batch.records, repeat(OFFSET_KEY), starts), maxlen=0)  # set in C
            for number, raw, record, unended in batch.lines:
                if isinstance(record, LineError):
                    if unended:
                        self._torn = raw
                        self.note(Damage(self.turns_path, number, "torn_tail", f"{TORN} ({record})"))
                    else:
                        bad.append(Damage(self.turns_path, number, "bad_line", str(record)))
                    continue
                if view:
                    record[OFFSET_KEY] = batch.offset(number)
                records.append(check_schema(f"{self.turns_path}:{number}", record))

    def read_records_at(
        self, offsets: list[int], decode: Callable[[bytes], dict[str, Any]] = turn_record
    ) -> dict[int, dict[str, Any]]:
        """The records whose lines start at these byte offsets (a view's OFFSET_KEY), read one line each and
        decoded by `decode` (whole records by default): a report shows a few turns' raw answers without reading
        every record whole. A line that no longer decodes (the file changed since) is left out."""
        found: dict[int, dict[str, Any]] = {}
        if not offsets or not self.turns_path.stat().st_size:
            return found
        # Read, not mapped: the pages of a mapped 2 GiB file would count in this process's resident memory.
        with self.turns_path.open("rb") as handle:
            for offset in sorted(set(offsets)):
                handle.seek(offset)
                try:
                    found[offset] = decode(handle.readline(MAX_LINE_BYTES + 1).rstrip(b"\n"))
                except (LineError, msgspec.DecodeError):
                    continue
        return found

    def seed_states(self) -> dict[SeedKey, SeedState]:
        """Per (cell, seed): its latest run and how that run ended (None while unfinished)."""
        if self._states is None:
            self._states = seed_states(self.read_turns())
        return self._states

    def completed_seeds(self) -> set[SeedKey]:
        """Seeds whose latest run finished. A seed whose server died is not finished: it is rerun."""
        return {key for key, state in self.seed_states().items() if state.finished}

    def next_seed_attempt(self, key: SeedKey) -> int:
        state = self.seed_states().get(key)
        return 0 if state is None else state.attempt + 1

    def supersede_unfinished(self) -> int:
        """Prepare a resume (runner/store/storerepair.py): a killed run's partial seeds kept, marked superseded."""
        return storerepair.supersede_unfinished(self)

    def mark_superseded(self, keys: set[SeedKey]) -> int:
        """Mark every stored record of these seeds superseded (a rerun replaces them); nothing is deleted."""
        records = self.read_turns()
        marked = 0
        for record in records:
            if seed_key(record) in keys and not record.get("superseded"):
                record["superseded"] = True
                marked += 1
        if marked:
            self.rewrite(records)
        return marked

    def torn_fragment(self) -> bytes | None:
        """The torn last line the latest read skipped (bytes after the last `\\n` that are no record), if any."""
        return self._torn

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace turns.jsonl by `records` (written whole to a temporary file, flushed, renamed into place)."""
        self.close()  # the append handle would point at the replaced file
        tmp = owned_path(self.dir, self.turns_path.with_suffix(".jsonl.tmp"))
        owned_path(self.dir, self.turns_path)
        tmp.unlink(missing_ok=True)  # one a crash left (or a hard link to a file elsewhere): never written through
        with named_writes(self.turns_path, remove=tmp), tmp.open("x", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, default=str) + "\n" for r in records))
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.turns_path)
        self._states, self._torn = None, None

    def append_turn(self, record: TurnRecord) -> None:
        if self._handle is None:
            storerepair.seal_tail(self)
            self._handle = owned_path(self.dir, self.turns_path).open("ab", buffering=0)
        # Unbuffered, per turn: a crash loses at most the line being written; a full disk none (DiskFull).
        append_line(self._handle, (record.model_dump_json() + "\n").encode(), self.turns_path)
        if self._states is not None:
            self._states[(record.cell_id, record.seed)] = SeedState(
                record.seed_attempt, record.end.value if record.end else None
            )

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def write_cell(self, cell_id: str, data: dict[str, Any]) -> None:
        write_json_atomic(self.cells_dir / f"{cell_id}.json", data, run_dir=self.dir)

    def read_cell(self, cell_id: str) -> dict[str, Any] | None:
        path = self.cells_dir / f"{cell_id}.json"
        return _read_cell(path) if path.is_file() else None

    def read_cells(self) -> list[dict[str, Any]]:
        """Every cell file; a damaged one is an error, or in recover mode a stand-in cell (status `damaged`,
        the axes its turns name; none when no turn names it)."""
        cells = []
        for path in sorted(self.cells_dir.glob("*.json")):
            try:
                cells.append(_read_cell(path))
            except StoreError as exc:
                if not self.recover:
                    raise StoreError(f"{exc}; {CELL_HINT}") from exc
                standin = standin_cell(path.stem, self.turns_path, str(exc))
                consequence = "its turns are reported without its config" if standin else "no turn names it"
                self.note(Damage(path, None, "bad_cell", f"{_reason(exc)}; {consequence}"))
                cells += [standin] if standin else []
        return cells

    def damaged_cell_files(self) -> list[tuple[Path, str]]:
        """The cell files that cannot be read, each with why."""
        damaged = []
        for path in sorted(self.cells_dir.glob("*.json")):
            try:
                _read_cell(path)
            except StoreError as exc:
                damaged.append((path, _reason(exc)))
        return damaged


def _reason(exc: StoreError) -> str:
    """A cell file error without its leading path."""
    return str(exc).split(": ", 1)[-1]


def _read_cell(path: Path) -> dict[str, Any]:
    try:
        data = load_json(read_regular_file(path))
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a cell file ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cell_id"), str):
        raise StoreError(f"{path}: not a cell file (a JSON object with cell_id is expected)")
    try:
        return check_cell(str(path), data)
    except SchemaVersionError as exc:
        raise StoreError(str(exc)) from exc
    except ContractError as exc:
        raise StoreError(str(exc)) from exc


def check_schema(where: str, data: dict[str, Any]) -> dict[str, Any]:
    """`data` in the current version's shape (core/runcontract.py: no field = 1, each older version read by its
    reader); a version this code does not know is a StoreError naming `where`."""
    try:
        return upgraded(where, data)
    except SchemaVersionError as exc:
        raise StoreError(str(exc)) from exc
