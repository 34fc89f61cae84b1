"""BFCL's single-turn cases as a task suite: read from the pinned package's data files (a new run) or from a
run's own snapshot (a resume, a reclassify, every analysis command), selected by one stable rule.

Selection: per category, the cases sorted by the sha256 of their id (core/bfcl.py `selection_key`), the first
`count` taken (`all`: every case); the five live cases no output can pass (core/bfcl.py `UNPASSABLE`) are never
selected. The same matrix selects the same cases on every stack, run and machine.
Snapshot: `<run>/bfcl/cases.jsonl` holds each selected case (messages, function docs, possible answer); the
manifest's `provenance.bfcl` records the package version, the sha256 of every data file read and of the
snapshot. A recorded run is read from its snapshot only, and a snapshot whose sha256 is not the recorded one is
refused with the file named: analysing a run needs BFCL's checker code, never today's data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.core.bfcl import (
    BFCL_SUITE,
    CATEGORIES,
    IRRELEVANCE_CATEGORIES,
    RELEVANCE_CATEGORIES,
    UNPASSABLE,
    BfclCase,
    selection_key,
)
from orchestrator.runner.suites.bfclpackage import BFCL_VERSION, answer_file, data_file, package_dir, sha256_of
from orchestrator.runner.suites.tasks import Seed, Suite, SuiteError

NO_ANSWER_FILE = (*IRRELEVANCE_CATEGORIES, *RELEVANCE_CATEGORIES)  # BFCL's evaluator rule scores them: no answers
SNAPSHOT_DIR = "bfcl"
SNAPSHOT_FILE = "cases.jsonl"
PROVENANCE_KEY = "bfcl"  # manifest provenance.bfcl: {version, data: {file: sha256}, snapshot: {file: sha256}}
ALL = "all"


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SuiteError(f"{path}:{number}: not JSON: {exc}") from None


@cache
def package_cases(category: str) -> tuple[BfclCase, ...]:
    """Every case of one category in the package, with its possible answer."""
    answers = (
        {} if category in NO_ANSWER_FILE else {row["id"]: row["ground_truth"] for row in _lines(answer_file(category))}
    )
    cases = []
    for row in _lines(data_file(category)):
        turns = row.get("question") or []
        if len(turns) != 1:
            raise SuiteError(f"{data_file(category)}: case {row.get('id')!r} has {len(turns)} turns, not one")
        cases.append(
            BfclCase(
                id=row["id"],
                category=category,
                question=turns[0],
                function=row["function"],
                ground_truth=answers.get(row["id"]) if answers else None,
            )
        )
    return tuple(cases)


def select(cases: Iterable[BfclCase], count: int | str | None) -> list[BfclCase]:
    """The stable selection (module docstring) of one category's cases."""
    ordered = sorted((case for case in cases if case.id not in UNPASSABLE), key=lambda case: selection_key(case.id))
    return ordered if count in (None, ALL) else ordered[: int(count)]  # type: ignore[arg-type]


def package_digests(categories: Iterable[str]) -> dict[str, str]:
    """sha256 of every data file the categories read, by file name under the package's data/."""
    digests = {}
    for category in categories:
        files = [data_file(category)]
        if category not in NO_ANSWER_FILE:
            files.append(answer_file(category))
        for path in files:
            digests[str(path.relative_to(package_dir() / "data"))] = sha256_of(path)
    return digests


def check_categories(categories: Iterable[str]) -> None:
    unknown = [category for category in categories if category not in CATEGORIES]
    if unknown:
        raise SuiteError(
            f"unknown BFCL category {unknown[0]!r} (known: {', '.join(CATEGORIES)}; Java, JavaScript, multi-turn "
            "and the agentic categories are not run here)"
        )


def bfcl_suite(cases: list[BfclCase]) -> Suite:
    """The selected cases as a suite: one seed per case, its tools its own (runner/turn/bfclturn.py)."""
    return Suite(
        suite=BFCL_SUITE,
        version=1,
        description=f"BFCL v4 single-turn cases (bfcl-eval {BFCL_VERSION}), scored by BFCL's own AST checker.",
        system_prompt="",
        benchmark=f"bfcl-eval=={BFCL_VERSION}",
        seeds=[Seed(id=case.id, template=case.category, request=case.user_request, bfcl=case) for case in cases],
    )


def snapshot_bytes(cases: Iterable[BfclCase]) -> bytes:
    return "".join(json.dumps(case.model_dump(mode="json"), sort_keys=True) + "\n" for case in cases).encode()


def provenance_record(cases: list[BfclCase], snapshot: bytes) -> dict[str, Any]:
    """What the manifest records (`provenance.bfcl`)."""
    return {
        "version": BFCL_VERSION,
        "data": package_digests(sorted({case.category for case in cases})),
        "snapshot": {SNAPSHOT_FILE: hashlib.sha256(snapshot).hexdigest()},
    }


def snapshot_cases(run_dir: Path, recorded: Mapping[str, Any]) -> list[BfclCase]:
    """A recorded run's cases, from its snapshot, checked against the sha256 its manifest recorded."""
    path = run_dir / SNAPSHOT_DIR / SNAPSHOT_FILE
    record = recorded.get(PROVENANCE_KEY)
    snapshot = record.get("snapshot") if isinstance(record, dict) else None
    expected = snapshot.get(SNAPSHOT_FILE) if isinstance(snapshot, dict) else None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"{path}: the run's BFCL cases cannot be read: {exc.strerror or exc}") from None
    actual = hashlib.sha256(raw).hexdigest()
    if expected != actual:
        why = (
            f"sha256 {actual[:12]}…, the manifest records {expected[:12]}…"
            if isinstance(expected, str)
            else f"manifest.json provenance.{PROVENANCE_KEY}.snapshot records no sha256 for it"
        )
        raise SuiteError(f"{path}: not the BFCL cases this run recorded ({why}): refused")
    try:
        return [BfclCase.model_validate_json(line) for line in raw.decode().splitlines() if line.strip()]
    except (ValidationError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: unreadable BFCL cases: {exc}") from None
