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

import operator
from collections.abc import Iterable
from typing import Any

RECORD_IDENTITY = ("cell_id", "seed", "seed_attempt", "turn", "attempt")
Identity = tuple[Any, ...]
COMPLETE = "complete"  # core/types.py CellStatus.COMPLETE (a plain string here: cell files are read as JSON)


def record_identities(records: list[dict[str, Any]]) -> list[Identity]:
    """Each record's identity as written (an absent seed_attempt or attempt reads as 0), built in C: a million
    records take a fraction of a second."""
    cell, seed, turn = (operator.itemgetter(key) for key in ("cell_id", "seed", "turn"))
    run, attempt = operator.methodcaller("get", "seed_attempt", 0), operator.methodcaller("get", "attempt", 0)
    return list(zip(map(cell, records), map(seed, records), map(run, records), map(turn, records),
                    map(attempt, records), strict=True))  # fmt: skip


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


def gaps(identities: Iterable[Identity]) -> dict[str, str]:
    """Per cell id, the first gap in a seed run's turns or a turn's attempts (a record whose predecessor is
    missing: turn t-1 for a turn's first attempt, attempt a-1 for a retry). Identities without copies."""
    present = set(identities)
    found: dict[str, str] = {}
    for cell_id, seed, run, turn, attempt in present:
        if cell_id in found or (turn == 0 and attempt == 0):
            continue
        if attempt and (cell_id, seed, run, turn, attempt - 1) not in present:
            found[cell_id] = f"seed {seed} run {run}: turn {turn} attempt {attempt} without attempt {attempt - 1}"
        elif not attempt and (cell_id, seed, run, turn - 1, 0) not in present:
            found[cell_id] = f"seed {seed} run {run}: turn {turn} without turn {turn - 1}"
    return found


def unfinished_seeds(cells: dict[str, dict[str, Any]], identities: list[Identity], ended: list[bool]) -> dict[str, str]:
    """Per complete cell, the first seed it planned whose latest run has no record with an end (or no record);
    `ended[i]`: whether record i carries an end."""
    latest: dict[tuple[str, str], tuple[int, bool]] = {}  # (cell, seed) -> (latest run, whether it ended)
    for (cell_id, seed, run, _turn, _attempt), end in zip(identities, ended, strict=True):
        key = (cell_id, str(seed))
        known = latest.get(key)
        if known is None or run > known[0]:
            latest[key] = (run, end)
        elif run == known[0] and end:
            latest[key] = (run, True)
    found: dict[str, str] = {}
    for cell_id, cell in cells.items():
        if cell.get("status") != COMPLETE or not isinstance(cell.get("seeds"), list):
            continue
        for seed in map(str, cell["seeds"]):
            state = latest.get((cell_id, seed))
            if state is None or not state[1]:
                found[cell_id] = f"seed {seed}: {'no record' if state is None else 'its last run has no end'}"
                break
    return found


def lost_records(cells: dict[str, dict[str, Any]], identities: list[Identity], ended: list[bool]) -> dict[str, str]:
    """Per cell id, the first sign of a lost record: a gap, or a planned seed a complete cell did not end."""
    return {**unfinished_seeds(cells, identities, ended), **gaps(identities)}
