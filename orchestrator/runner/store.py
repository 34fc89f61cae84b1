"""The results store: `results/<run_id>/` with manifest.json, an append-only turns.jsonl flushed per turn,
and one JSON file per cell with its full stack config. Resumable: a seed is done when its last record
carries `end`; partial seeds are dropped and rerun."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from orchestrator.core.types import TurnRecord
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

    status = git("status", "--porcelain")
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
            return json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.manifest_path}: not a run manifest ({exc})") from exc

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
                records.append(json.loads(line))
            except ValueError as exc:
                if number == len(lines):
                    break
                raise StoreError(f"{self.turns_path}:{number}: bad JSON: {exc}") from exc
        return records

    def completed_seeds(self) -> set[tuple[str, str]]:
        return {(r["cell_id"], r["seed"]) for r in self.read_turns() if r.get("end")}

    def drop_incomplete(self) -> int:
        """Rewrite turns.jsonl without the records of unfinished seeds; returns how many were dropped."""
        records = self.read_turns()
        done = {(r["cell_id"], r["seed"]) for r in records if r.get("end")}
        keep = [r for r in records if (r["cell_id"], r["seed"]) in done]
        tmp = self.turns_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in keep))
        tmp.replace(self.turns_path)
        return len(records) - len(keep)

    def append_turn(self, record: TurnRecord) -> None:
        if self._handle is None:
            self._handle = self.turns_path.open("a", encoding="utf-8")
        self._handle.write(record.model_dump_json() + "\n")
        self._handle.flush()  # per turn: a crash loses at most the line being written

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def write_cell(self, cell_id: str, data: dict[str, Any]) -> None:
        write_json_atomic(self.cells_dir / f"{cell_id}.json", data)

    def read_cell(self, cell_id: str) -> dict[str, Any] | None:
        path = self.cells_dir / f"{cell_id}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def read_cells(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.cells_dir.glob("*.json"))]
