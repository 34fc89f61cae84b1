"""Compare two runs cell by cell (or two stack configs of one run), seed-paired, for `orchestrate diff`.

Cells pair by their cell_id (core/cell.py: stack config label, model, tools mode and any later axis off its
default); seeds pair by (suite, seed, sample). Per paired cell the per-seed fidelity (core/stats.py: valid /
eligible over the counted turns; a seed with no eligible turn is undefined) is taken over the seeds defined
in both, and the mean paired difference B - A gets a seed-level percentile bootstrap interval (seed indices
resampled, one fresh generator per cell from the recorded RNG seed).

The p-value is a two-sided paired sign-flip permutation test of the mean difference (analysis/compare/diffstats.py:
why not the bootstrap, exact or Monte Carlo). Detectability is a property of the design, not of what changed:
`p_floor_paired` is the smallest p the test could give had every one of the n paired seeds differed (2 / 2^n,
1 / (resamples + 1) past 16), and a cell is `detectable` when m * p_floor_paired < alpha over the m cells
corrected together: a change in that cell alone could then pass (m * p is its Holm-adjusted p, and its BH one
when the other cells' p-values are large). `--cell` globs narrow m to the cells a release gate cares about.
`p_floor` is the same bound over the k seeds that did differ (2 / 2^k): information only.

The p-values of the cells with at least one paired seed are corrected together (Holm or Benjamini-Hochberg).
A cell is a regression (B worse) or an improvement only when its corrected p < alpha and its interval
excludes 0; `inconclusive` when the interval excludes 0 but the corrected p does not pass; `no_change` when
the interval contains 0. With no seed defined in both: `became_undefined` when A is defined on a seed and B on
none (a stack that now refuses every request), `became_defined` the reverse, else `undefined`. Each side's own
figure (`own_mean_a`/`own_mean_b`, over all its defined seeds) stands beside the paired means. Cells and seeds
present in one side only are listed, never dropped silently; `n_lost_seeds` counts the seeds defined in A that
are undefined or absent in B (a partial collapse the paired statistics cannot see: the gate fails on it).
The release gate's rule lives in analysis/compare/diffgate.py; its outcome is recorded here (`gate_failures`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from orchestrator.analysis.compare.diffconfig import ConfigChange, compare_configs, stack_label, within_key
from orchestrator.analysis.compare.diffgate import GateFailure, gate_failures, power_failure
from orchestrator.analysis.compare.diffstats import (
    FLOAT_NOISE,
    PERMUTATION_TEST,
    benjamini_hochberg,
    holm,
    nonzero,
    p_floor,
    paired_bootstrap,
    sign_flip_p,
)
from orchestrator.core.stats import DEFAULT_BOOTSTRAP, FEW_SEEDS_THRESHOLD, BootstrapSettings, per_seed_fidelity
from orchestrator.runner.store.rundir import open_run, read_run
from orchestrator.runner.store.runstore import StoreError, counted_turns

Correction = Literal["holm", "bh"]
CORRECTIONS: tuple[str, ...] = ("holm", "bh")
Verdict = Literal[
    "regression", "improvement", "inconclusive", "no_change", "became_undefined", "became_defined", "undefined"
]
SeedId = tuple[str, str, int]  # (suite, seed, sample)


class DiffError(ValueError):
    """Bad input: the message names the file (or argument) at fault."""


@dataclass(frozen=True)
class RunData:
    run_id: str
    dir: Path
    cells: dict[str, dict[str, Any]]  # cell_id -> its cells/<cell_id>.json
    turns: dict[str, list[dict[str, Any]]]  # cell_id -> its counted turn records


@dataclass(frozen=True)
class Options:
    correction: str
    alpha: float
    settings: BootstrapSettings
    within: list[str] | None
    cell_globs: list[str] | None


class CellDiff(BaseModel):
    cell_id: str
    cell_a: str
    cell_b: str
    n_paired_seeds: int
    n_nonzero: int
    mean_a: float | None  # over the paired seeds
    mean_b: float | None
    own_mean_a: float | None  # over all of that side's defined seeds
    own_mean_b: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_floor: float | None  # over the seeds that differ: information
    p_floor_paired: float | None  # over all paired seeds: what `detectable` reads
    p_adjusted: float | None = None
    detectable: bool = False
    verdict: Verdict = "undefined"
    few_seeds: bool
    n_undefined_a: int
    n_undefined_b: int
    n_lost_seeds: int  # defined in A, undefined or absent in B
    seeds_only_in_a: list[str]
    seeds_only_in_b: list[str]
    config_changes: list[ConfigChange]
    flags_added: list[str]
    flags_removed: list[str]


class RunDiff(BaseModel):
    run_a: str
    run_b: str
    within: list[str] | None
    cell_globs: list[str] | None
    test: str = PERMUTATION_TEST
    correction: Correction
    alpha: float
    resamples: int
    rng_seed: int
    confidence: float
    n_compared: int
    any_detectable: bool
    min_seeds_note: str | None
    cells: list[CellDiff]
    only_in_a: list[str]
    only_in_b: list[str]
    regressions: int
    improvements: int
    became_undefined: int
    became_defined: int
    gate_failures: list[GateFailure]  # why --fail-on-regression fails (analysis/compare/diffgate.py); empty: it passes
    power_failure: str | None  # why --require-power fails; None: a compared cell could show a change


def load_run(run_dir: Path) -> RunData:
    """A run's cell files and counted turns. Every cell with turns must have its cells/<cell_id>.json."""
    if not run_dir.is_dir():
        raise DiffError(f"{run_dir}: no such run directory")
    store = open_run(run_dir)
    try:
        store.manifest()  # a run directory first: its manifest names what is wrong with one that is not
        if not store.turns_path.is_file():
            raise DiffError(f"{store.turns_path}: missing (not a run directory?)")
        run = read_run(store)  # the one reader's rule: a copied record, a missing cell file are errors
    except StoreError as exc:
        raise DiffError(str(exc)) from exc
    cells = run.cells
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for record in run.turns:
        by_cell.setdefault(record["cell_id"], []).append(record)
    # counted_turns drops superseded records and aborted seed runs; a retried attempt had no model output, so it
    # is a non_response and never enters the denominator (as in report.long_table).
    return RunData(store.run_id, run_dir, cells, {cell_id: counted_turns(turns) for cell_id, turns in by_cell.items()})


def seed_id(record: dict[str, Any], cell: dict[str, Any]) -> SeedId:
    """A seed's identity inside a cell. A record without a suite (older files) takes the cell's only suite."""
    suites = cell.get("suites") or []
    suite = record.get("suite") or (suites[0] if len(suites) == 1 else "")
    return (str(suite), str(record["seed"]), int(record.get("sample") or 0))


def seed_label(seed: SeedId) -> str:
    suite, name, sample = seed
    return (f"{suite}/" if suite else "") + name + (f"#{sample}" if sample else "")


def seed_fidelities(records: list[dict[str, Any]], cell: dict[str, Any]) -> dict[SeedId, float | None]:
    """Per seed, in order of first appearance: core.stats.per_seed_fidelity (the one definition: valid /
    eligible turns, None when the seed has no eligible turn), keyed by a string that keeps the whole identity."""
    keys = list(dict.fromkeys(seed_id(r, cell) for r in records))
    codes = {key: json.dumps(key) for key in keys}
    fidelity = per_seed_fidelity([codes[seed_id(r, cell)] for r in records], [str(r["outcome"]) for r in records])
    return {key: fidelity[codes[key]] for key in keys}


def check_options(correction: str, alpha: float) -> None:
    if correction not in CORRECTIONS:
        raise DiffError(f"--correction {correction!r}: unknown (use one of {', '.join(CORRECTIONS)})")
    if not 0 < alpha < 1:
        raise DiffError(f"--alpha {alpha}: must lie between 0 and 1")


def adjust(p_values: list[float], correction: str) -> list[float]:
    check_options(correction, 0.05)
    if not p_values:
        return []
    return holm(p_values) if correction == "holm" else benjamini_hochberg(p_values)


def _mean(values: np.ndarray) -> float | None:
    return float(np.round(values.mean(), FLOAT_NOISE)) if values.size else None


def _own_mean(seeds: dict[SeedId, float | None]) -> float | None:
    return _mean(np.array([value for value in seeds.values() if value is not None], dtype=float))


def compare_cell(
    label: str, run_a: RunData, cell_a: str, run_b: RunData, cell_b: str, settings: BootstrapSettings
) -> CellDiff:
    """One paired cell, before the correction (p_adjusted, detectable and verdict are set by `decide`)."""
    record_a, record_b = run_a.cells[cell_a], run_b.cells[cell_b]
    seeds_a = seed_fidelities(run_a.turns.get(cell_a, []), record_a)
    seeds_b = seed_fidelities(run_b.turns.get(cell_b, []), record_b)
    common = [seed for seed in seeds_a if seed in seeds_b]
    paired = [seed for seed in common if seeds_a[seed] is not None and seeds_b[seed] is not None]
    values_a = np.array([seeds_a[seed] for seed in paired], dtype=float)
    values_b = np.array([seeds_b[seed] for seed in paired], dtype=float)
    differences = values_b - values_a
    moved = nonzero(differences).size
    low = high = p_value = floor = floor_paired = None
    if paired:
        low, high = paired_bootstrap(differences, settings)
        p_value, floor = sign_flip_p(differences, settings), p_floor(moved, settings.resamples)
        floor_paired = p_floor(len(paired), settings.resamples)
    config = compare_configs(record_a, record_b)
    return CellDiff(
        cell_id=label,
        cell_a=cell_a,
        cell_b=cell_b,
        n_paired_seeds=len(paired),
        n_nonzero=moved,
        mean_a=_mean(values_a),
        mean_b=_mean(values_b),
        own_mean_a=_own_mean(seeds_a),
        own_mean_b=_own_mean(seeds_b),
        delta=_mean(differences),
        ci_low=low,
        ci_high=high,
        p_value=p_value,
        p_floor=floor,
        p_floor_paired=floor_paired,
        few_seeds=len(paired) < FEW_SEEDS_THRESHOLD,
        n_undefined_a=sum(seeds_a[seed] is None for seed in common),
        n_undefined_b=sum(seeds_b[seed] is None for seed in common),
        n_lost_seeds=sum(value is not None and seeds_b.get(seed) is None for seed, value in seeds_a.items()),
        seeds_only_in_a=[seed_label(s) for s in seeds_a if s not in seeds_b],
        seeds_only_in_b=[seed_label(s) for s in seeds_b if s not in seeds_a],
        **config.model_dump(),
    )


def verdict_of(cell: CellDiff, alpha: float) -> Verdict:
    if cell.p_value is None or cell.p_adjusted is None or cell.ci_low is None or cell.ci_high is None:
        if cell.own_mean_a is not None and cell.own_mean_b is None:
            return "became_undefined"
        if cell.own_mean_a is None and cell.own_mean_b is not None:
            return "became_defined"
        return "undefined"
    if cell.ci_low <= 0 <= cell.ci_high:
        return "no_change"
    if cell.p_adjusted >= alpha:
        return "inconclusive"  # the interval excludes 0, but the corrected test cannot tell it from chance
    return "regression" if cell.ci_high < 0 else "improvement"


def decide(cells: list[CellDiff], correction: str, alpha: float) -> int:
    """Correct the p-values of the cells that have one, together, and set each cell's detectability and
    verdict. Returns how many cells entered the correction."""
    tested = [cell for cell in cells if cell.p_value is not None]
    p_values = [cell.p_value for cell in tested if cell.p_value is not None]
    for cell, adjusted in zip(tested, adjust(p_values, correction), strict=True):
        cell.p_adjusted = adjusted
        # Had every paired seed of this cell alone differed: its Holm-adjusted p is m * p, and BH's is too when
        # the other p's are large. Of the design, not of what changed: an unchanged release is detectable too.
        cell.detectable = cell.p_floor_paired is not None and len(tested) * cell.p_floor_paired < alpha
    for cell in cells:
        cell.verdict = verdict_of(cell, alpha)
    return len(tested)


def min_seeds_note(cells: list[CellDiff], compared: int, options: Options) -> str | None:
    """One line when no compared cell could reach corrected significance even had every paired seed differed:
    too few paired seeds for this many cells. None when a cell could (whether or not anything changed)."""
    tested = [cell for cell in cells if cell.p_floor_paired is not None]
    if not tested or any(cell.detectable for cell in tested):
        return None
    seeds = max(cell.n_paired_seeds for cell in tested)
    best = min(1.0, compared * p_floor(seeds, options.settings.resamples))
    return (
        f"with {seeds} paired seeds and {compared} cells, no single-cell change can reach corrected "
        f"significance (smallest {options.correction}-adjusted p {best:.3g} >= alpha {options.alpha}); "
        "compare fewer cells (--cell) or run more seeds"
    )


def _order(run: RunData, cell_id: str) -> tuple[int, str]:
    return (int(run.cells[cell_id].get("order") or 0), cell_id)


def select(keys: list[str], globs: list[str] | None, known: list[str]) -> list[str]:
    """The keys (cell ids as shown) that match any --cell glob; a glob that matches no cell at all (`known`:
    both sides' ids) is an error, so a renamed cell cannot silently leave a release gate with nothing to test."""
    if not globs:
        return keys
    for glob in globs:
        if not any(fnmatchcase(key, glob) for key in known):
            raise DiffError(f"--cell {glob!r}: matches no cell (cells: {', '.join(known)})")
    return [key for key in keys if any(fnmatchcase(key, glob) for glob in globs)]


def _summarise(
    run_a: RunData,
    run_b: RunData,
    pairs: list[tuple[str, str, str]],
    only: tuple[list[str], list[str]],
    options: Options,
) -> RunDiff:
    settings = options.settings
    cells = [compare_cell(label, run_a, a, run_b, b, settings) for label, a, b in pairs]
    compared = decide(cells, options.correction, options.alpha)
    detectable, note = any(cell.detectable for cell in cells), min_seeds_note(cells, compared, options)
    return RunDiff(
        run_a=run_a.run_id,
        run_b=run_b.run_id,
        within=options.within,
        cell_globs=options.cell_globs,
        correction=options.correction,  # type: ignore[arg-type]
        alpha=options.alpha,
        resamples=settings.resamples,
        rng_seed=settings.rng_seed,
        confidence=settings.confidence,
        n_compared=compared,
        any_detectable=detectable,
        min_seeds_note=note,
        cells=cells,
        only_in_a=only[0],
        only_in_b=only[1],
        regressions=sum(cell.verdict == "regression" for cell in cells),
        improvements=sum(cell.verdict == "improvement" for cell in cells),
        became_undefined=sum(cell.verdict == "became_undefined" for cell in cells),
        became_defined=sum(cell.verdict == "became_defined" for cell in cells),
        gate_failures=gate_failures(cells, only[0]),
        power_failure=power_failure(detectable, note),
    )


def diff_runs(
    dir_a: Path,
    dir_b: Path,
    *,
    correction: str = "holm",
    alpha: float = 0.05,
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    cells: list[str] | None = None,
) -> RunDiff:
    """Run B against run A, cell by cell (B - A); `cells`: fnmatch globs on the cell id, to compare only those."""
    check_options(correction, alpha)
    run_a, run_b = load_run(dir_a), load_run(dir_b)
    known = sorted(set(run_a.cells) | set(run_b.cells))
    shared = sorted(set(run_a.cells) & set(run_b.cells), key=lambda cell_id: _order(run_b, cell_id))
    only_a = sorted(set(run_a.cells) - set(run_b.cells), key=lambda cell_id: _order(run_a, cell_id))
    only_b = sorted(set(run_b.cells) - set(run_a.cells), key=lambda cell_id: _order(run_b, cell_id))
    shared, only_a, only_b = (select(ids, cells, known) for ids in (shared, only_a, only_b))
    pairs = [(cell_id, cell_id, cell_id) for cell_id in shared]
    return _summarise(run_a, run_b, pairs, (only_a, only_b), Options(correction, alpha, settings, None, cells))


def diff_within(
    run_dir: Path,
    stack_a: str,
    stack_b: str,
    *,
    correction: str = "holm",
    alpha: float = 0.05,
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    cells: list[str] | None = None,
) -> RunDiff:
    """Stack config B against stack config A inside one run, for each (model, mode, other axes) both have;
    `cells`: fnmatch globs on that within-form id (model__mode...), to compare only those."""
    check_options(correction, alpha)
    run = load_run(run_dir)
    labels = sorted({stack_label(cell) for cell in run.cells.values()})
    for name in (stack_a, stack_b):
        if name not in labels:
            raise DiffError(f"{run_dir}: no stack config {name!r} in this run (it has: {', '.join(labels)})")
    if stack_a == stack_b:
        raise DiffError(f"--within {stack_a} {stack_b}: name two different stack configs")
    side_a = {within_key(c): c["cell_id"] for c in run.cells.values() if stack_label(c) == stack_a}
    side_b = {within_key(c): c["cell_id"] for c in run.cells.values() if stack_label(c) == stack_b}
    ordered = select(sorted(side_a, key=lambda rest: _order(run, side_a[rest])), cells, sorted({*side_a, *side_b}))
    pairs = [(rest, side_a[rest], side_b[rest]) for rest in ordered if rest in side_b]
    only_a = [side_a[rest] for rest in ordered if rest not in side_b]
    rest_b = select([rest for rest in side_b if rest not in side_a], cells, sorted({*side_a, *side_b}))
    only_b = sorted((side_b[rest] for rest in rest_b), key=lambda c: _order(run, c))
    options = Options(correction, alpha, settings, [stack_a, stack_b], cells)
    return _summarise(run, run, pairs, (only_a, only_b), options)
