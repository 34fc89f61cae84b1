"""Honest per-cell statistics over seeds. Pure, vectorised numpy.

Eligible turns exclude `rejected_request` and `non_response` (they say nothing about the model and are
reported beside the figure). A seed's fidelity = valid / eligible; a seed with no eligible turn is
undefined and left out. The cell reports the per-seed mean with a seed-level percentile bootstrap
interval, and beside it the turn-pooled figure, which one long session can dominate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.types import Outcome

DEFAULT_RESAMPLES = 10_000
DEFAULT_RNG_SEED = 20260926
POOLED_GAP_THRESHOLD = 0.10
FEW_SEEDS_THRESHOLD = 8
CELL_KEYS: tuple[str, ...] = ("stack", "model", "tools_mode")


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


def cell_stats(
    seeds: Sequence[Any], outcomes: Sequence[str], settings: BootstrapSettings = DEFAULT_BOOTSTRAP
) -> CellStats:
    """Statistics for one cell from parallel arrays of seed ids and turn outcomes."""
    seed_array = np.asarray([str(s) for s in seeds], dtype=object)
    outcome_array = np.asarray([str(o) for o in outcomes], dtype=object)
    rejected = outcome_array == Outcome.REJECTED_REQUEST.value
    non_response = outcome_array == Outcome.NON_RESPONSE.value
    eligible = ~(rejected | non_response)
    valid = outcome_array == Outcome.VALID_CALL.value

    n_eligible = int(eligible.sum())
    n_valid = int(valid.sum())
    seed_codes, seed_index = np.unique(seed_array, return_inverse=True)
    seed_index = seed_index.astype(np.intp)  # an empty cell gives a float index
    eligible_per_seed = np.bincount(seed_index, weights=eligible, minlength=len(seed_codes))
    valid_per_seed = np.bincount(seed_index, weights=valid, minlength=len(seed_codes))
    defined = eligible_per_seed > 0
    fidelities = valid_per_seed[defined] / eligible_per_seed[defined]

    common = {
        "n_seeds": int(defined.sum()),
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
        stats = cell_stats(group["seed"].tolist(), group["outcome"].tolist(), settings)
        rows.append({**dict(zip(keys, key_values, strict=True)), **stats.model_dump()})
    return pd.DataFrame(rows, columns=columns)
