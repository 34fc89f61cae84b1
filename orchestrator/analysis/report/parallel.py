"""Parallel tool calls: did a seed's first turn make the calls the `parallel` suite expects, all at once? Pure
scoring over stored turn records (dicts, as in turns.jsonl), plus the report files it writes into a run.

Per seed of the suite (a seed with `parallel` declared), the counted first turn (turn 0, its final attempt) is
scored on
- `count_ok`: as many calls as expected;
- `ids_distinct`: every call carries an id from the stack and no two share one; N/A (None) for calls the harness
  parsed from text (`parse_path == "harness"`: no id is given there) and for a turn with no call;
- `indexes_distinct`: streamed turns only: the tool-call `index` values the stream carried
  (`stream_facts.call_indexes`, one per assembled call) are pairwise distinct and as many as the calls; None for
  a turn that was not streamed, one whose stream facts hold no indexes, and one with no call;
- `no_leakage`: every expected call is matched by exactly one call of the same name with equal arguments
  (strings compared stripped and casefolded), and no other call carries a value of an expected call in its
  arguments (`{"city": "Paris, Oslo"}`, merged objects, a surplus call repeating another call's value);
- `all_ok`: every check that applies holds.
A seed whose first turn the stack refused or never answered (`rejected_request`, `non_response`) says nothing
about the model: it is left out of the rates and counted in `n_unscored`. Per cell each rate is the mean over
the seeds the check applies to, with the project's seed-level bootstrap interval (core/stats.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.report.requestaxes import first_turns as counted_first_turns
from orchestrator.core.stats import DEFAULT_BOOTSTRAP, BootstrapSettings, bootstrap_mean_interval
from orchestrator.core.streams import INDEX_COLLISION_FLAG
from orchestrator.core.types import INELIGIBLE_OUTCOMES
from orchestrator.runner.config.resolve import RunAssets
from orchestrator.runner.store.runstore import RunStore, counted_turns
from orchestrator.runner.suites.tasks import ParallelCall, Suite

PARALLEL_SUITE = "parallel"
CHECKS: tuple[str, ...] = ("count_ok", "ids_distinct", "indexes_distinct", "no_leakage", "all_ok")
CELL_COLUMNS: tuple[str, ...] = ("cell_id", "model", "stack_config", "tools_mode", "n_seeds", "n_unscored")
RATE_COLUMNS: tuple[str, ...] = tuple(f"{check}_{part}" for check in CHECKS for part in ("rate", "low", "high", "n"))
INELIGIBLE = frozenset(outcome.value for outcome in INELIGIBLE_OUTCOMES)


# ------------------------------------------------------------------------------------------- one turn's checks


def normalised(value: Any) -> Any:
    """Arguments in the form they are compared in: strings stripped and casefolded, at any depth."""
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, Mapping):
        return {normalised(key): normalised(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(item) for item in value]
    return value


def leaves(value: Any, keys: bool = False) -> list[Any]:
    """Every scalar in (normalised) arguments; with `keys`, object keys too (where a merged value can hide)."""
    if isinstance(value, Mapping):
        return [leaf for key, item in value.items() for leaf in [*([key] if keys else []), *leaves(item, keys)]]
    if isinstance(value, list):
        return [leaf for item in value for leaf in leaves(item, keys)]
    return [value]


def carries(haystack: list[Any], value: Any) -> bool:
    """Whether one of `haystack` holds `value`: a string as a whole word inside a string, anything else equal."""
    if not isinstance(value, str):
        return any(type(leaf) is type(value) and leaf == value for leaf in haystack)
    pattern = re.compile(rf"(?<!\w){re.escape(value)}(?!\w)")
    return any(isinstance(leaf, str) and pattern.search(leaf) for leaf in haystack)


def ids_distinct(turn: Mapping[str, Any], calls: list[Mapping[str, Any]]) -> bool | None:
    if turn.get("parse_path") == "harness" or not calls:
        return None
    ids = [call.get("id") for call in calls]
    return all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids)


def indexes_distinct(turn: Mapping[str, Any], calls: list[Mapping[str, Any]]) -> bool | None:
    """Streamed turns only: each call under its own stream index. Two ids under one index (the stream merged
    two calls, `stream:index_collision`) is False even where the merge left no parsable call."""
    if not turn.get("stream"):
        return None
    if INDEX_COLLISION_FLAG in (turn.get("flags") or []):
        return False
    indexes = (turn.get("stream_facts") or {}).get("call_indexes")
    if not isinstance(indexes, list) or not calls:
        return None
    return len(indexes) == len(calls)


def no_leakage(expected: list[ParallelCall], calls: list[Mapping[str, Any]]) -> bool:
    """Each expected call matched by exactly one actual call, and no unmatched call holding an expected value."""
    wanted = [(e.name, normalised(e.arguments)) for e in expected]
    actual = [(call.get("name"), normalised(call.get("arguments"))) for call in calls]
    if any(actual.count(want) != 1 for want in wanted):
        return False
    values = [value for _, arguments in wanted for value in leaves(arguments) if value not in ("", None)]
    stray = [arguments for name, arguments in actual if (name, arguments) not in wanted]
    return not any(carries(leaves(arguments, keys=True), value) for arguments in stray for value in values)


def score_turn(turn: Mapping[str, Any], expected: list[ParallelCall]) -> dict[str, bool | None]:
    """The checks of one first turn against the calls its seed expects (None: the check does not apply)."""
    calls = [call for call in turn.get("calls") or [] if isinstance(call, Mapping)]
    checks: dict[str, bool | None] = {
        "count_ok": len(calls) == len(expected),
        "ids_distinct": ids_distinct(turn, calls),
        "indexes_distinct": indexes_distinct(turn, calls),
        "no_leakage": no_leakage(expected, calls),
    }
    checks["all_ok"] = all(value for value in checks.values() if value is not None)
    return checks


# ---------------------------------------------------------------------------------------------- seeds and cells


def first_turns(turns: Iterable[Mapping[str, Any]], suite: str = PARALLEL_SUITE) -> dict[tuple[str, str], dict]:
    """Per (cell, seed) of `suite`: the counted turn 0 in its final attempt (the latest seed run, then attempt).
    Counted over all the suite's turns: a seed run whose server died says so on its last turn, not on turn 0."""
    return counted_first_turns(counted_turns([dict(turn) for turn in turns if turn.get("suite") == suite]))


def parallel_seed_scores(turns: Iterable[Mapping[str, Any]], suite: Suite) -> list[dict[str, Any]]:
    """One row per (cell, seed) with a declared `parallel`: its first turn's outcome and checks (checks None
    throughout, `scored` False, for a first turn the stack refused or never answered)."""
    expected = {seed.id: seed.parallel for seed in suite.seeds if seed.parallel}
    rows = []
    for (cell_id, seed), turn in sorted(first_turns(turns, suite.suite).items()):
        if seed not in expected:
            continue
        scored = turn.get("outcome") not in INELIGIBLE
        checks = score_turn(turn, expected[seed]) if scored else dict.fromkeys(CHECKS)
        rows.append(
            {
                "cell_id": cell_id,
                "seed": seed,
                "model": turn.get("model"),
                "stack_config": turn.get("stack_config"),
                "tools_mode": turn.get("tools_mode"),
                "outcome": turn.get("outcome"),
                "n_calls": len(turn.get("calls") or []),
                "n_expected": len(expected[seed]),
                "scored": scored,
                **checks,
            }
        )
    return rows


def rate(values: list[bool | None], settings: BootstrapSettings) -> dict[str, float | int | None]:
    """Mean over the seeds a check applies to, with its seed-bootstrap interval; None when it applies to none."""
    applied = [float(value) for value in values if value is not None]
    if not applied:
        return {"rate": None, "low": None, "high": None, "n": 0}
    low, high = bootstrap_mean_interval(np.asarray(applied), settings)
    return {"rate": sum(applied) / len(applied), "low": low, "high": high, "n": len(applied)}


def parallel_scores(
    turns: Iterable[Mapping[str, Any]],
    suites: Mapping[str, Suite],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
) -> pd.DataFrame:
    """One row per cell over the seeds of the `parallel` suite: n_seeds scored, n_unscored, and per check its
    rate, interval (`_low`, `_high`) and the number of seeds it applied to (`_n`)."""
    suite = suites.get(PARALLEL_SUITE)
    rows_by_cell: dict[str, list[dict[str, Any]]] = {}
    for row in parallel_seed_scores(turns, suite) if suite is not None else []:
        rows_by_cell.setdefault(row["cell_id"], []).append(row)
    table = []
    for cell_id, rows in rows_by_cell.items():
        scored = [row for row in rows if row["scored"]]
        cell: dict[str, Any] = {
            "cell_id": cell_id,
            **{key: rows[0][key] for key in ("model", "stack_config", "tools_mode")},
            "n_seeds": len(scored),
            "n_unscored": len(rows) - len(scored),
        }
        for check in CHECKS:
            cell.update({f"{check}_{k}": v for k, v in rate([row[check] for row in scored], settings).items()})
        table.append(cell)
    return pd.DataFrame(table, columns=[*CELL_COLUMNS, *RATE_COLUMNS])


# ---------------------------------------------------------------------------------------------------- report


def figure(row: Mapping[str, Any], check: str) -> str:
    """`75 [38,100] n8` (percent, interval, seeds the check applied to); `—` when it applied to none."""
    value = row[f"{check}_rate"]
    if value is None or pd.isna(value):
        return "—"
    low, high = row[f"{check}_low"], row[f"{check}_high"]
    return f"{100 * value:.0f} [{100 * low:.0f},{100 * high:.0f}] n{int(row[f'{check}_n'])}"


def markdown_table(scores: pd.DataFrame) -> str:
    columns = [*CELL_COLUMNS, *CHECKS]
    shown = pd.DataFrame(
        [{**{c: row[c] for c in CELL_COLUMNS}, **{c: figure(row, c) for c in CHECKS}} for _, row in scores.iterrows()],
        columns=columns,
    )
    return shown.to_markdown(index=False) + "\n"


def write_parallel_report(store: RunStore, turns: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """report/parallel.csv (numbers) and report/parallel.md (`rate [low,high] nN` per check) in `out_dir`;
    [] when the run has no turn of the parallel suite. The suite's expected calls are the run's own (its
    snapshot, runner/config/resolve.py), never today's seeds/."""
    if not any(turn.get("suite") == PARALLEL_SUITE for turn in turns):
        return []
    manifest = store.manifest()
    settings = BootstrapSettings.model_validate((manifest.get("matrix") or {}).get("bootstrap", {}))
    suite = RunAssets.from_run(store.dir, manifest.get("provenance")).suite(PARALLEL_SUITE)
    scores = parallel_scores(turns, {PARALLEL_SUITE: suite}, settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / "parallel.csv", out_dir / "parallel.md"
    scores.to_csv(csv_path, index=False)
    md_path.write_text(markdown_table(scores))
    return [csv_path, md_path]
