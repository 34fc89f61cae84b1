"""Honest per-cell statistics over seeds. Pure, vectorised numpy.

Eligible turns exclude `rejected_request` and `non_response` (they say nothing about the model and are
reported beside the figure). A seed's fidelity = valid / eligible; a seed with no eligible turn is
undefined and left out. The cell reports the per-seed mean with a seed-level percentile bootstrap
interval, and beside it the turn-pooled figure, which one long session can dominate.

It also says whether the seeds were different experiments at all: the number of distinct outcome
sequences among the defined seeds, and a `degenerate_seeds` flag when they collapse to one or two (see
`cell_stats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.cell import PRIMARY_AXES
from orchestrator.core.types import INELIGIBLE_OUTCOMES, Outcome

DEFAULT_RESAMPLES = 10_000
DEFAULT_RNG_SEED = 20260926
POOLED_GAP_THRESHOLD = 0.10
FEW_SEEDS_THRESHOLD = 8
DEGENERATE_MIN_SEEDS = 3  # with fewer seeds, one or two sequences is no collapse (few_seeds flags them anyway)
DEGENERATE_MAX_SEQUENCES = 2
CELL_KEYS: tuple[str, ...] = PRIMARY_AXES  # a cell's identity lives in core/cell.py


class BootstrapSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    resamples: int = Field(DEFAULT_RESAMPLES, ge=1)
    rng_seed: int = DEFAULT_RNG_SEED
    confidence: float = Field(0.95, gt=0, lt=1)


DEFAULT_BOOTSTRAP = BootstrapSettings()


class CellStats(BaseModel):
    per_seed_mean: float | None
    ci_low: float | None
    ci_high: float | None
    pooled: float | None
    n_seeds: int
    n_eligible_turns: int
    n_valid: int
    n_rejected: int
    n_non_response: int
    pooled_gap: bool
    few_seeds: bool
    n_distinct_sequences: int = Field(description="Distinct per-seed sequences of eligible outcomes, in turn order.")
    degenerate_seeds: bool = Field(description="n_seeds >= 3 and at most two distinct sequences (see cell_stats).")
    status: Literal["ok", "undefined"]
    resamples: int
    rng_seed: int


def bootstrap_mean_interval(values: np.ndarray, settings: BootstrapSettings = DEFAULT_BOOTSTRAP) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over `values` (one value per seed)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap needs at least one value")
    if values.size == 1 or np.all(values == values[0]):
        return float(values[0]), float(values[0])  # no spread to resample: the interval is the point
    rng = np.random.default_rng(settings.rng_seed)
    means = values[rng.integers(0, values.size, size=(settings.resamples, values.size))].mean(axis=1)
    alpha = (1.0 - settings.confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(np.clip(low, 0.0, 1.0)), float(np.clip(high, 0.0, 1.0))


def per_seed_fidelity(seeds: Sequence[Any], outcomes: Sequence[str]) -> dict[str, float | None]:
    """Each seed's fidelity: valid calls / eligible turns (`rejected_request` and `non_response` are not
    eligible); None (undefined) for a seed with no eligible turn. The one definition every figure uses."""
    seed_array = np.asarray([str(s) for s in seeds], dtype=object)
    outcome_array = np.asarray([str(o) for o in outcomes], dtype=object)
    eligible = ~np.isin(outcome_array, [o.value for o in INELIGIBLE_OUTCOMES])
    valid = outcome_array == Outcome.VALID_CALL.value
    codes, index = np.unique(seed_array, return_inverse=True)
    index = index.astype(np.intp)
    n_eligible = np.bincount(index, weights=eligible, minlength=len(codes))
    n_valid = np.bincount(index, weights=valid, minlength=len(codes))
    return {str(code): (float(n_valid[i] / n_eligible[i]) if n_eligible[i] else None) for i, code in enumerate(codes)}


def outcome_sequences(
    seed_array: np.ndarray, outcome_array: np.ndarray, eligible: np.ndarray, turns: Sequence[int] | None
) -> dict[str, tuple[str, ...]]:
    """Each defined seed's eligible outcomes in turn order (record order within a turn, and throughout when
    `turns` is None)."""
    record_order = np.arange(len(seed_array))
    order = record_order if turns is None else np.lexsort((record_order, np.asarray(turns, dtype=float)))
    sequences: dict[str, list[str]] = {}
    for index in order[eligible[order]]:
        sequences.setdefault(seed_array[index], []).append(outcome_array[index])
    return {seed: tuple(sequence) for seed, sequence in sequences.items()}


def cell_stats(
    seeds: Sequence[Any],
    outcomes: Sequence[str],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    *,
    turns: Sequence[int] | None = None,
) -> CellStats:
    """Statistics for one cell from parallel arrays of seed ids and turn outcomes (and, optionally, turn
    indices, so that records not written in turn order are still read in it).

    Distinct sequences: a defined seed's sequence is the tuple of its eligible outcomes (the ones fidelity
    counts; `rejected_request` and `non_response` say nothing about the model and are reported beside) in
    turn order; `n_distinct_sequences` counts the different tuples over the defined seeds. `degenerate_seeds`
    is true when n_seeds >= 3 and n_distinct_sequences <= 2: the seeds then replay one or two trajectories,
    so the seed-level bootstrap resamples copies of the same experiment and its interval (often `17 [17,17]`)
    measures how alike the seeds are, not how the model varies. The mean is still reported; the flag says
    not to read its interval as seed-to-seed variation (vary the seeds, or run more samples per seed).
    With fewer than 3 seeds two sequences are no collapse; `few_seeds` flags such cells already.
    """
    if turns is not None and len(turns) != len(seeds):
        raise ValueError(f"turns has {len(turns)} entries for {len(seeds)} seeds")
    seed_array = np.asarray([str(s) for s in seeds], dtype=object)
    outcome_array = np.asarray([str(o) for o in outcomes], dtype=object)
    rejected = outcome_array == Outcome.REJECTED_REQUEST.value
    non_response = outcome_array == Outcome.NON_RESPONSE.value
    eligible = ~(rejected | non_response)
    valid = outcome_array == Outcome.VALID_CALL.value

    n_eligible = int(eligible.sum())
    n_valid = int(valid.sum())
    per_seed = per_seed_fidelity(seed_array, outcome_array)
    defined = np.asarray([value is not None for value in per_seed.values()], dtype=bool)
    fidelities = np.asarray([value for value in per_seed.values() if value is not None], dtype=float)
    n_distinct = len(set(outcome_sequences(seed_array, outcome_array, eligible, turns).values()))

    common = {
        "n_seeds": int(defined.sum()),
        "n_distinct_sequences": n_distinct,
        "degenerate_seeds": bool(defined.sum() >= DEGENERATE_MIN_SEEDS and n_distinct <= DEGENERATE_MAX_SEQUENCES),
        "n_eligible_turns": n_eligible,
        "n_valid": n_valid,
        "n_rejected": int(rejected.sum()),
        "n_non_response": int(non_response.sum()),
        "few_seeds": bool(defined.sum() < FEW_SEEDS_THRESHOLD),
        "resamples": settings.resamples,
        "rng_seed": settings.rng_seed,
    }
    if n_eligible == 0:
        return CellStats(
            per_seed_mean=None, ci_low=None, ci_high=None, pooled=None, pooled_gap=False, status="undefined", **common
        )
    per_seed_mean = float(fidelities.mean())
    pooled = n_valid / n_eligible
    low, high = bootstrap_mean_interval(fidelities, settings)
    return CellStats(
        per_seed_mean=per_seed_mean,
        ci_low=low,
        ci_high=high,
        pooled=pooled,
        pooled_gap=bool(abs(pooled - per_seed_mean) > POOLED_GAP_THRESHOLD),
        status="ok",
        **common,
    )


def cell_table(
    turns: pd.DataFrame | Iterable[dict[str, Any]],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    keys: Sequence[str] = CELL_KEYS,
) -> pd.DataFrame:
    """One row per cell (grouped by `keys`) with the statistics of `cell_stats`."""
    frame = turns if isinstance(turns, pd.DataFrame) else pd.DataFrame(list(turns))
    columns = [*keys, *CellStats.model_fields]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key_values, group in frame.groupby(list(keys), sort=True, dropna=False):
        turns = group["turn"].tolist() if "turn" in group.columns else None
        stats = cell_stats(group["seed"].tolist(), group["outcome"].tolist(), settings, turns=turns)
        rows.append({**dict(zip(keys, key_values, strict=True)), **stats.model_dump()})
    return pd.DataFrame(rows, columns=columns)
