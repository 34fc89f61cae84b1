"""What a run's turn records must be as a set, whoever reads them (report, stats, triage, diff, load_run, a
resume): each record one identity, each seed run whole. Pure: records and cell files in, problems out; the store
decides what a problem costs (an error, or damage listed and read around: runner/store/rundir.py).

- Identity: one record per (cell, seed, run of the seed, turn, retry attempt). The cell id carries the sample and
  every other axis. Two records with one identity are a copy, never two turns: counting it would move a figure.
- Continuity: a seed run's records are its turns from 0 on, each turn's attempts from 0 on, with no gap (the
  runner writes every turn and every attempt before the next: runner/store/runstore.py). A gap is a lost line.
- Completeness: a cell the run marked `complete` ended every seed it planned (its cell file's `seeds`): each
  planned seed has records, and its latest run has an end. A planned seed without one is a lost line too.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

RECORD_IDENTITY = ("cell_id", "seed", "seed_attempt", "turn", "attempt")
Identity = tuple[Any, ...]
COMPLETE = "complete"  # core/types.py CellStatus.COMPLETE (a plain string here: cell files are read as JSON)


def record_identities(records: list[dict[str, Any]]) -> list[Identity]:
    """Each record's identity (RECORD_IDENTITY's fields; an absent seed_attempt or attempt reads as 0, the first:
    the readers refuse a null one), built in C: a million records take a fraction of a second."""
    getters = [operator.methodcaller("get", key, 0) if key in ("seed_attempt", "attempt") else operator.itemgetter(key)
               for key in RECORD_IDENTITY]  # fmt: skip
    return list(zip(*(map(getter, records) for getter in getters), strict=True))


def duplicate_indexes(identities: list[Identity]) -> list[int]:
    """The positions of identities an earlier position holds (the copies; the first is kept)."""
    if len(set(identities)) == len(identities):  # the common case, decided in one pass
        return []
    seen: set[Identity] = set()
    copies = []
    for index, identity in enumerate(identities):
        if identity in seen:
            copies.append(index)
        seen.add(identity)
    return copies


@dataclass(frozen=True)
class SeedRuns:
    """The records grouped by seed run (cell, seed, run) in C: each record's run key, and one code per run."""

    identities: list[Identity]
    keys: list[tuple[Any, Any, Any]]  # each record's (cell, seed, run)
    codes: dict[tuple[Any, Any, Any], int]  # a code per seed run (its last record's position: any will do)

    @classmethod
    def of(cls, identities: list[Identity]) -> SeedRuns:
        cells, seeds, runs = (list(map(operator.itemgetter(i), identities)) for i in range(3))
        keys = list(zip(cells, seeds, runs, strict=True))
        return cls(identities, keys, dict(zip(keys, itertools.count(), strict=False)))


def gaps(identities: list[Identity]) -> dict[str, str]:
    """Per cell id, the first gap in a seed run's turns or a turn's attempts (a record whose predecessor is
    missing: turn t-1 for a turn's first attempt, attempt a-1 for a retry). Identities without copies."""
    return _gaps(SeedRuns.of(identities))


def _gaps(runs: SeedRuns) -> dict[str, str]:
    """`gaps`, in numpy: each seed run's records sorted by (turn, attempt) must start at (0, 0) and step to the
    next attempt or the next turn's first (a million records: a fraction of a second)."""
    if not runs.identities:
        return {}
    codes = np.fromiter(map(runs.codes.__getitem__, runs.keys), dtype=np.int64, count=len(runs.keys))
    try:
        turn = np.fromiter(map(operator.itemgetter(3), runs.identities), dtype=np.int64, count=len(codes))
        attempt = np.fromiter(map(operator.itemgetter(4), runs.identities), dtype=np.int64, count=len(codes))
    except OverflowError:  # a count past 2**63 is no turn a runner wrote
        return {runs.keys[0][0]: "a turn or attempt number past any a run reaches"}
    order = np.lexsort((attempt, turn, codes))
    code, turn, attempt = codes[order], turn[order], attempt[order]
    first = np.ones(len(code), dtype=bool)
    first[1:] = code[1:] != code[:-1]
    before_turn, before_attempt = np.roll(turn, 1), np.roll(attempt, 1)
    steps = ((turn == before_turn) & (attempt == before_attempt + 1)) | ((turn == before_turn + 1) & (attempt == 0))
    bad = np.flatnonzero(np.where(first, (turn != 0) | (attempt != 0), ~steps))
    found: dict[str, str] = {}
    for position in bad.tolist():
        cell_id, seed, run, t, a = runs.identities[int(order[position])]
        if cell_id not in found:
            lack = f"attempt {a} without attempt {a - 1}" if a else f"without turn {t - 1}"
            found[cell_id] = f"seed {seed} run {run}: turn {t} {lack}"
    return found


def unfinished_seeds(cells: dict[str, dict[str, Any]], identities: list[Identity], ended: list[bool]) -> dict[str, str]:
    """Per complete cell, the first seed it planned whose latest run has no record with an end (or no record);
    `ended[i]`: whether record i carries an end."""
    return _unfinished(cells, SeedRuns.of(identities), ended)


def _unfinished(cells: dict[str, dict[str, Any]], runs: SeedRuns, ended: list[bool]) -> dict[str, str]:
    """`unfinished_seeds` over the seed runs (tens of records each: walked once each, not per record)."""
    latest: dict[tuple[Any, Any], Any] = {}
    for cell_id, seed, run in runs.codes:
        if run > latest.get((cell_id, seed), -1):
            latest[(cell_id, seed)] = run
    ended_runs = set(itertools.compress(runs.keys, ended))
    found: dict[str, str] = {}
    for cell_id, cell in cells.items():
        if cell.get("status") != COMPLETE or not isinstance(cell.get("seeds"), list):
            continue
        for seed in map(str, cell["seeds"]):
            run = latest.get((cell_id, seed))
            if run is None or (cell_id, seed, run) not in ended_runs:
                found[cell_id] = f"seed {seed}: {'no record' if run is None else 'its last run has no end'}"
                break
    return found


def lost_records(cells: dict[str, dict[str, Any]], identities: list[Identity], ended: list[bool]) -> dict[str, str]:
    """Per cell id, the first sign of a lost record: a gap, or a planned seed a complete cell did not end."""
    runs = SeedRuns.of(identities)
    return {**_unfinished(cells, runs, ended), **_gaps(runs)}
