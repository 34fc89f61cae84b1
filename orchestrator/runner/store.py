"""The results store: `results/<run_id>/` with manifest.json, an append-only turns.jsonl flushed per turn,
and one JSON file per cell with its full stack config. Resumable: a seed is done when its last record
carries `end` (and that end is not `server_died`); partial seeds are dropped and rerun. A seed rerun after
its server died keeps the aborted run's records, marked `superseded`: nothing lost, nothing counted twice."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from orchestrator.core.types import KNOWN_SCHEMA_VERSIONS, SeedEnd, TurnRecord
from orchestrator.serving.registry import REPO_ROOT

PACKAGES = ("toolcall-matrix", "pydantic", "httpx", "numpy", "pandas", "docker", "jsonschema", "typer", "jinja2")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    # Run outputs are not code: a run's own directory (and other runs beside it) under results/ leaves the tree
    # clean; any other change, tracked or not, makes it dirty.
    status = git("status", "--porcelain", "--", ".", ":(exclude)results")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def host_facts() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


SeedKey = tuple[str, str]  # (cell id, seed id)
TURN_KEYS = ("cell_id", "seed", "turn", "outcome", "tools_mode")


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
    died = {run_key(r) for r in records if r.get("end") == SeedEnd.SERVER_DIED}
    return [r for r in records if not r.get("superseded") and run_key(r) not in died]


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str, sort_keys=False))
    tmp.replace(path)


class StoreError(ValueError):
    pass


class RunStore:
    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.turns_path = run_dir / "turns.jsonl"
        self.cells_dir = run_dir / "cells"
        self.manifest_path = run_dir / "manifest.json"
        self._handle: TextIO | None = None
        self._states: dict[SeedKey, SeedState] | None = None

    @property
    def run_id(self) -> str:
        return self.dir.name

    def create(self, manifest: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=False)
        self.cells_dir.mkdir()
        self.turns_path.touch()
        write_json_atomic(self.manifest_path, manifest)

    def manifest(self) -> dict[str, Any]:
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.manifest_path}: not a run manifest ({exc})") from exc
        if not isinstance(data, dict):
            raise StoreError(f"{self.manifest_path}: not a run manifest (a JSON object is expected)")
        return check_schema(str(self.manifest_path), data)

    def update_manifest(self, **fields: Any) -> None:
        write_json_atomic(self.manifest_path, {**self.manifest(), **fields})

    def read_turns(self) -> list[dict[str, Any]]:
        """All stored turn records. A torn last line (a crash mid-write) is ignored; other bad lines are errors."""
        if not self.turns_path.is_file():
            return []
        lines = self.turns_path.read_text().splitlines()
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                if number == len(lines):
                    break
                raise StoreError(f"{self.turns_path}:{number}: bad JSON: {exc}") from exc
            where = f"{self.turns_path}:{number}"
            if not isinstance(record, dict) or not all(key in record for key in TURN_KEYS):
                raise StoreError(f"{where}: not a turn record (needs {', '.join(TURN_KEYS)})")
            records.append(check_schema(where, record))
        return records

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

    def drop_incomplete(self) -> int:
        """Rewrite turns.jsonl without the records of unfinished seed runs (a killed run's partial seeds);
        runs that ended, `server_died` ones included, stay. Returns how many records were dropped."""
        records = self.read_turns()
        ended = {run_key(r) for r in records if r.get("end")}
        keep = [r for r in records if run_key(r) in ended]
        self._rewrite(keep)
        return len(records) - len(keep)

    def mark_superseded(self, keys: set[SeedKey]) -> int:
        """Mark every stored record of these seeds superseded (a rerun replaces them); nothing is deleted."""
        records = self.read_turns()
        marked = 0
        for record in records:
            if seed_key(record) in keys and not record.get("superseded"):
                record["superseded"] = True
                marked += 1
        if marked:
            self._rewrite(records)
        return marked

    def _rewrite(self, records: list[dict[str, Any]]) -> None:
        self.close()  # the append handle would point at the replaced file
        tmp = self.turns_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
        tmp.replace(self.turns_path)
        self._states = None

    def append_turn(self, record: TurnRecord) -> None:
        if self._handle is None:
            self._handle = self.turns_path.open("a", encoding="utf-8")
        self._handle.write(record.model_dump_json() + "\n")
        self._handle.flush()  # per turn: a crash loses at most the line being written
        if self._states is not None:
            self._states[(record.cell_id, record.seed)] = SeedState(
                record.seed_attempt, record.end.value if record.end else None
            )

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def write_cell(self, cell_id: str, data: dict[str, Any]) -> None:
        write_json_atomic(self.cells_dir / f"{cell_id}.json", data)

    def read_cell(self, cell_id: str) -> dict[str, Any] | None:
        path = self.cells_dir / f"{cell_id}.json"
        return _read_cell(path) if path.is_file() else None

    def read_cells(self) -> list[dict[str, Any]]:
        return [_read_cell(p) for p in sorted(self.cells_dir.glob("*.json"))]


def _read_cell(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a cell file ({exc})") from exc
    if not isinstance(data, dict) or "cell_id" not in data:
        raise StoreError(f"{path}: not a cell file (a JSON object with cell_id is expected)")
    return check_schema(str(path), data)


def check_schema(where: str, data: dict[str, Any]) -> dict[str, Any]:
    """Accept the schema versions this code knows (no field = 1); refuse a newer one with a clear error."""
    version = data.get("schema_version", 1)
    if type(version) is not int or version not in KNOWN_SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in sorted(KNOWN_SCHEMA_VERSIONS))
        raise StoreError(f"{where}: schema version {version!r} is unknown to this orchestrator (it reads {known})")
    return data
