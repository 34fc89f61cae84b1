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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
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


MAX_RESAMPLES = 1_000_000  # a bootstrap this large is already exact to the printed digit
MAX_RNG_SEED = 2**32 - 1  # what every numpy generator accepts


class BootstrapSettings(BaseModel):
    """Bounded wherever settings come from (a matrix, a stored manifest, the command line): they reach numpy."""

    model_config = ConfigDict(frozen=True)

    resamples: int = Field(DEFAULT_RESAMPLES, ge=1, le=MAX_RESAMPLES)
    rng_seed: int = Field(DEFAULT_RNG_SEED, ge=0, le=MAX_RNG_SEED)
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
    seed_fidelities: tuple[float, ...] = Field(
        (), exclude=True, description="Each defined seed's fidelity, in seed order (drawn as dots; not a column)."
    )
    outcome_counts: dict[str, int] = Field(
        default_factory=dict, exclude=True, description="Turns per outcome, every outcome (not a column)."
    )


MAX_DRAW_INDICES = 1 << 24  # one block of resample indices (128 MiB as int64): the bootstrap's memory bound


def _resample_blocks(rng: np.random.Generator, n: int, resamples: int) -> Iterator[np.ndarray]:
    """Resample index matrices (rows of `n` seed indices), `resamples` rows in all, in blocks of at most
    MAX_DRAW_INDICES indices (every figure in practice fits one: 10,000 x 8 is 80,000). The blocks are the very
    draws of one call: numpy's bounded int64 draws carry nothing across calls (tests/test_scale_readers.py)."""
    rows = max(1, MAX_DRAW_INDICES // n)
    for start in range(0, resamples, rows):
        yield rng.integers(0, n, size=(min(rows, resamples - start), n))


FIDELITY_RANGE = (0.0, 1.0)  # an interval of fidelities (shares) never leaves it


def bootstrap_mean_interval(
    values: np.ndarray,
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    *,
    clip: tuple[float, float] | None = FIDELITY_RANGE,
    decimals: int | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over `values` (one value per seed): `bootstrap_mean_intervals`
    of the one group."""
    return bootstrap_mean_intervals([values], settings, clip=clip, decimals=decimals)[0]


def bootstrap_mean_intervals(
    groups: Sequence[np.ndarray],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    *,
    clip: tuple[float, float] | None = FIDELITY_RANGE,
    decimals: int | None = None,
) -> list[tuple[float, float]]:
    """The package's one seed-level percentile bootstrap: the interval of the mean of each group, many cells at
    once. Every group draws from a generator seeded alike (`settings.rng_seed`), so its result is the one-group
    call's, and groups with the same number of seeds share their index blocks, drawn once per slice of groups.
    A group whose values are all equal has no spread: its interval is the point. `clip` bounds the interval
    (None: differences, which may be negative); `decimals` rounds each resample mean first (differences: a mean
    of +x and -x lands on 0, not on 1e-17 of either side). Memory: a block of at most MAX_DRAW_INDICES indices,
    and per slice at most about MAX_DRAW_INDICES gathered values and resample means (8 bytes each)."""
    results: list[tuple[float, float] | None] = [None] * len(groups)
    by_size: dict[int, list[int]] = {}
    for position, group in enumerate(groups):
        values = np.asarray(group, dtype=float)
        if values.size == 0:
            raise ValueError("bootstrap needs at least one value")
        if values.size == 1 or np.all(values == values[0]):
            results[position] = (float(values[0]), float(values[0]))
        else:
            by_size.setdefault(values.size, []).append(position)
    for positions in by_size.values():
        matrix = np.asarray([np.asarray(groups[p], dtype=float) for p in positions])
        slices = _cell_slices(matrix, settings)
        bounds = np.concatenate([_slice_bounds(chunk, settings, clip, decimals) for chunk in slices], axis=1)
        for column, position in enumerate(positions):
            results[position] = (float(bounds[0, column]), float(bounds[1, column]))
    return [r for r in results if r is not None]


def _cell_slices(matrix: np.ndarray, settings: BootstrapSettings) -> Iterator[np.ndarray]:
    """Cells a few at a time, so that their resample means (cells x resamples) and one block's gathered values
    (cells x block) stay within MAX_DRAW_INDICES elements each."""
    per_cell = settings.resamples * matrix.shape[1]
    cells = max(1, MAX_DRAW_INDICES // per_cell)
    for first in range(0, len(matrix), cells):
        yield matrix[first : first + cells]


def _slice_bounds(
    chunk: np.ndarray, settings: BootstrapSettings, clip: tuple[float, float] | None, decimals: int | None
) -> np.ndarray:
    """The (low, high) rows of a slice of cells with the same number of seeds: each cell's draws are the draws
    of a generator seeded alike, as in the one-cell call."""
    means = np.empty((len(chunk), settings.resamples))
    start = 0
    for block in _resample_blocks(np.random.default_rng(settings.rng_seed), chunk.shape[1], settings.resamples):
        means[:, start : start + len(block)] = chunk[:, block].mean(axis=2)
        start += len(block)
    if decimals is not None:
        means = np.round(means, decimals)
    alpha = (1.0 - settings.confidence) / 2.0
    bounds = np.quantile(means, [alpha, 1.0 - alpha], axis=1)
    return bounds if clip is None else np.clip(bounds, *clip)


def per_seed_fidelity(seeds: Sequence[Any], outcomes: Sequence[str]) -> dict[str, float | None]:
    """Each seed's fidelity: valid calls / eligible turns (`rejected_request` and `non_response` are not
    eligible); None (undefined) for a seed with no eligible turn. The one definition every figure uses.
    Seeds in sorted order (the order the bootstrap resamples them in)."""
    return _per_seed(_coded(seeds, outcomes))


@dataclass(frozen=True)
class _Coded:
    """A cell's turns as integer codes (hashed once, in C): seed codes index `seed_names` (sorted), outcome codes
    index `outcome_names`."""

    seed_codes: np.ndarray
    seed_names: np.ndarray
    outcome_codes: np.ndarray
    outcome_names: np.ndarray

    def is_outcome(self, *names: str) -> np.ndarray:
        wanted = [index for index, name in enumerate(self.outcome_names) if name in names]
        return np.isin(self.outcome_codes, wanted)


def _coded(seeds: Sequence[Any], outcomes: Sequence[str]) -> _Coded:
    seed_codes, seed_names = pd.factorize(np.asarray(list(map(str, seeds)), dtype=object), sort=True)
    outcome_codes, outcome_names = pd.factorize(np.asarray(list(map(str, outcomes)), dtype=object))
    return _Coded(seed_codes.astype(np.intp), np.asarray(seed_names, dtype=object), outcome_codes, outcome_names)


def _per_seed(coded: _Coded) -> dict[str, float | None]:
    eligible = ~coded.is_outcome(*(o.value for o in INELIGIBLE_OUTCOMES))
    valid = coded.is_outcome(Outcome.VALID_CALL.value)
    n_seeds = len(coded.seed_names)
    n_eligible = np.bincount(coded.seed_codes, weights=eligible, minlength=n_seeds)
    n_valid = np.bincount(coded.seed_codes, weights=valid, minlength=n_seeds)
    return {
        str(name): (float(n_valid[i] / n_eligible[i]) if n_eligible[i] else None)
        for i, name in enumerate(coded.seed_names)
    }


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
    return cells_stats([(seeds, outcomes, turns)], settings)[0]


CellInput = tuple[Sequence[Any], Sequence[str], Sequence[int] | None]  # (seeds, outcomes, turns or None)


def cells_stats(cells: Sequence[CellInput], settings: BootstrapSettings = DEFAULT_BOOTSTRAP) -> list[CellStats]:
    """`cell_stats` of many cells, their bootstrap intervals drawn in one batch (`bootstrap_mean_intervals`):
    each result is the one-cell call's."""
    parts = _cells_parts(cells, settings)
    defined = {index: fidelities for index, (_common, fidelities) in enumerate(parts) if fidelities is not None}
    intervals = dict(zip(defined, bootstrap_mean_intervals(list(defined.values()), settings), strict=True))
    results = []
    for index, (common, fidelities) in enumerate(parts):
        if fidelities is None:
            undefined = {"per_seed_mean": None, "ci_low": None, "ci_high": None, "pooled": None}
            results.append(CellStats(**undefined, pooled_gap=False, status="undefined", **common))
            continue
        per_seed_mean = float(fidelities.mean())
        pooled = common["n_valid"] / common["n_eligible_turns"]
        low, high = intervals[index]
        results.append(
            CellStats(
                per_seed_mean=per_seed_mean,
                ci_low=low,
                ci_high=high,
                pooled=pooled,
                pooled_gap=bool(abs(pooled - per_seed_mean) > POOLED_GAP_THRESHOLD),
                status="ok",
                seed_fidelities=tuple(fidelities.tolist()),
                **common,
            )
        )
    return results


def _cells_parts(
    cells: Sequence[CellInput], settings: BootstrapSettings
) -> list[tuple[dict[str, Any], np.ndarray | None]]:
    """Each cell's counts and flags, and its defined per-seed fidelities in seed order (None when no turn is
    eligible), computed for all cells at once: every turn coded once (seeds sorted by name, as the bootstrap
    orders them), then counted per (cell, seed) and per cell with bincount. A thousand cells cost one pass, not
    a thousand small ones."""
    for seeds, _outcomes, turns in cells:
        if turns is not None and len(turns) != len(seeds):
            raise ValueError(f"turns has {len(turns)} entries for {len(seeds)} seeds")
    n_cells = len(cells)
    cell_of = np.repeat(np.arange(n_cells), [len(seeds) for seeds, _o, _t in cells])
    coded = _coded([s for seeds, _o, _t in cells for s in seeds], [o for _s, outcomes, _t in cells for o in outcomes])
    pair_codes, pairs = pd.factorize(cell_of * max(1, len(coded.seed_names)) + coded.seed_codes, sort=True)
    pair_cell = pairs // max(1, len(coded.seed_names))  # pairs sorted by cell, then by seed name
    rejected = coded.is_outcome(Outcome.REJECTED_REQUEST.value)
    non_response = coded.is_outcome(Outcome.NON_RESPONSE.value)
    eligible = ~(rejected | non_response)
    valid = coded.is_outcome(Outcome.VALID_CALL.value)
    pair_eligible = np.bincount(pair_codes, weights=eligible, minlength=len(pairs))
    pair_valid = np.bincount(pair_codes, weights=valid, minlength=len(pairs))
    defined = pair_eligible > 0
    per_cell = {name: np.bincount(cell_of, weights=flags, minlength=n_cells).astype(int)
                for name, flags in (("eligible", eligible), ("valid", valid), ("rejected", rejected),
                                    ("non_response", non_response))}  # fmt: skip
    n_seeds = np.bincount(pair_cell, weights=defined, minlength=n_cells).astype(int)
    cuts = np.searchsorted(pair_cell, np.arange(1, n_cells))  # where each cell's pairs begin
    fidelities = np.split(np.divide(pair_valid, pair_eligible, where=defined, out=np.zeros(len(pairs))), cuts)
    defined_by_cell = np.split(defined, cuts)
    distinct = _distinct_by_cell(cells, cell_of, pair_codes, pair_cell, coded.outcome_codes, eligible)
    n_names = len(coded.outcome_names)  # turns per (cell, outcome)
    by_outcome = np.bincount(cell_of * n_names + coded.outcome_codes, minlength=n_cells * n_names)
    by_outcome = by_outcome.reshape(n_cells, n_names)
    parts = []
    for index in range(n_cells):
        n_distinct = distinct.get(index, 0)
        common = {
            "n_seeds": int(n_seeds[index]),
            "n_distinct_sequences": n_distinct,
            "degenerate_seeds": bool(n_seeds[index] >= DEGENERATE_MIN_SEEDS and n_distinct <= DEGENERATE_MAX_SEQUENCES),
            "n_eligible_turns": int(per_cell["eligible"][index]),
            "n_valid": int(per_cell["valid"][index]),
            "n_rejected": int(per_cell["rejected"][index]),
            "n_non_response": int(per_cell["non_response"][index]),
            "few_seeds": bool(n_seeds[index] < FEW_SEEDS_THRESHOLD),
            "resamples": settings.resamples,
            "rng_seed": settings.rng_seed,
            "outcome_counts": {o.value: 0 for o in Outcome}
            | {str(name): int(n) for name, n in zip(coded.outcome_names, by_outcome[index], strict=True) if n},
        }
        values = fidelities[index][defined_by_cell[index]]
        parts.append((common, values if common["n_eligible_turns"] else None))
    return parts


def _distinct_by_cell(
    cells: Sequence[CellInput], cell_of: np.ndarray, pair_codes: np.ndarray, pair_cell: np.ndarray,
    outcome_codes: np.ndarray, eligible: np.ndarray,
) -> dict[int, int]:  # fmt: skip
    """Per cell, how many different eligible-outcome sequences its seeds wrote (outcome_sequences, counted on
    codes: two seeds' tuples of outcome names are equal exactly when their tuples of codes are). Within a seed,
    turn order, then record order (record order alone for a cell given no turns)."""
    turns = np.concatenate(
        [np.asarray(t, dtype=float) if t is not None else np.zeros(len(s)) for s, _o, t in cells] or [np.zeros(0)]
    )
    order = np.lexsort((np.arange(len(cell_of)), turns, pair_codes))
    order = order[eligible[order]]
    pair_of = pair_codes[order]
    cuts = np.flatnonzero(np.diff(pair_of)) + 1
    sequences: dict[int, set[bytes]] = {}
    codes = outcome_codes[order].astype(np.int64)
    for start, part in zip(np.concatenate(([0], cuts)).tolist(), np.split(codes, cuts), strict=True):
        if len(part):
            sequences.setdefault(int(pair_cell[pair_of[start]]), set()).add(part.tobytes())
    return {cell: len(found) for cell, found in sequences.items()}


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
    groups = list(frame.groupby(list(keys), sort=True, dropna=False))
    inputs = [
        (group["seed"].tolist(), group["outcome"].tolist(), group["turn"].tolist() if "turn" in group.columns else None)
        for _key, group in groups
    ]
    rows = [
        {**dict(zip(keys, key_values, strict=True)), **stats.model_dump()}
        for (key_values, _group), stats in zip(groups, cells_stats(inputs, settings), strict=True)
    ]
    return pd.DataFrame(rows, columns=columns)
