"""What each product-channel guard contributes: the product channel with every guard on (the parent run)
against the same cases with one guard off (`without`), paired per case.

Per guard, (stack_config, model, tools_mode) and dimension: each case's majority verdict with the guard on
(1/0) minus the verdict with it off; the mean of those deltas with a paired case-level bootstrap interval; and
how often the guard fired and changed something in the parent run. A guard that fired but changed nothing
cannot have made a difference, and its row says so.

The interval is `paired_bootstrap` (analysis/compare/diffstats.py): core's one bootstrap unclipped, where a pass
rate's interval is clipped to [0, 1], which would hide a guard that hurts (a negative delta).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from orchestrator.analysis.compare.diffstats import paired_bootstrap
from orchestrator.analysis.product.channelverdicts import CaseId, CaseVerdict, case_verdicts
from orchestrator.core.scoring import DIMENSIONS, Expectation, counted_run
from orchestrator.core.stats import DEFAULT_BOOTSTRAP, BootstrapSettings

CellFamily = tuple[str | None, str, str]  # (stack_config, model, tools_mode)


class GuardActivity(BaseModel):
    """How often a guard acted in a parent run: events that fired / changed something, and in how many case
    runs (one sample of one case) it did."""

    model_config = ConfigDict(frozen=True)

    fired: int = 0
    changed: int = 0
    fired_cases: int = 0
    changed_cases: int = 0


class AblationRow(BaseModel):
    """One guard's paired effect on one dimension of one cell family (delta = guard on - guard off)."""

    model_config = ConfigDict(frozen=True)

    guard: str
    stack_config: str | None
    model: str
    tools_mode: str
    dimension: str
    n_seeds: int
    n_unpaired: int
    on_pass: int
    off_pass: int
    delta_mean: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    resamples: int
    rng_seed: int
    fired: int
    changed: int
    fired_cases: int
    changed_cases: int
    contribution: str

    def as_json(self) -> dict[str, Any]:
        """A flat dict for JSON output; the tools mode is under `mode`."""
        data = self.model_dump()
        data["mode"] = data.pop("tools_mode")
        return data


def _product(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("channel") == "product"]


def _family(record: Mapping[str, Any] | CaseVerdict) -> CellFamily:
    if isinstance(record, CaseVerdict):
        return (record.stack_config, record.model, record.tools_mode)
    return (record.get("stack_config"), str(record["model"]), str(record["tools_mode"]))


def guard_activity(records: Iterable[Mapping[str, Any]], guard: str) -> GuardActivity:
    """Count a guard's events over the counted records of these case runs (grouped by cell_id and seed)."""
    runs: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        runs[(str(record["cell_id"]), str(record["seed"]))].append(record)
    fired = changed = fired_cases = changed_cases = 0
    for run in runs.values():
        events = [e for r in counted_run(run) for e in r.get("guard_events") or [] if e.get("guard") == guard]
        run_fired = sum(bool(e.get("fired")) for e in events)
        run_changed = sum(bool(e.get("changed")) for e in events)
        fired, changed = fired + run_fired, changed + run_changed
        fired_cases += run_fired > 0
        changed_cases += run_changed > 0
    return GuardActivity(fired=fired, changed=changed, fired_cases=fired_cases, changed_cases=changed_cases)


def contribution_text(activity: GuardActivity) -> str:
    """What the guard can have contributed, read off its activity alone."""
    if activity.fired == 0:
        return "none (never fired)"
    if activity.changed == 0:
        return f"none (fired {activity.fired}, changed nothing)"
    return f"changed {activity.changed}"


def _by_case(verdicts: Iterable[CaseVerdict]) -> dict[tuple[CellFamily, str], dict[CaseId, CaseVerdict]]:
    """(cell family, dimension) -> case -> verdict."""
    found: dict[tuple[CellFamily, str], dict[CaseId, CaseVerdict]] = defaultdict(dict)
    for verdict in verdicts:
        found[(_family(verdict), verdict.dimension)][verdict.case] = verdict
    return found


def _paired_row(
    guard: str,
    family: CellFamily,
    dimension: str,
    on: dict[CaseId, CaseVerdict],
    off: dict[CaseId, CaseVerdict],
    activity: GuardActivity,
    settings: BootstrapSettings,
) -> AblationRow:
    paired = sorted(
        (case for case in on.keys() & off.keys() if not on[case].unscored and not off[case].unscored),
        key=lambda case: (case[0] or "", case[1]),
    )
    on_votes = np.asarray([on[case].passed for case in paired], dtype=float)
    off_votes = np.asarray([off[case].passed for case in paired], dtype=float)
    deltas = on_votes - off_votes
    low = high = None
    if deltas.size >= 2:
        low, high = paired_bootstrap(deltas, settings)
    return AblationRow(
        guard=guard,
        stack_config=family[0],
        model=family[1],
        tools_mode=family[2],
        dimension=dimension,
        n_seeds=len(paired),
        n_unpaired=len(on.keys() | off.keys()) - len(paired),
        on_pass=int(on_votes.sum()),
        off_pass=int(off_votes.sum()),
        delta_mean=float(deltas.mean()) if deltas.size else None,
        ci_low=low,
        ci_high=high,
        confidence=settings.confidence,
        resamples=settings.resamples,
        rng_seed=settings.rng_seed,
        **activity.model_dump(),
        contribution=contribution_text(activity),
    )


def ablation_rows(
    parent_records: Iterable[Mapping[str, Any]],
    ablation_records: Iterable[Mapping[str, Any]],
    expectations: Mapping[CaseId, Expectation],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
) -> list[AblationRow]:
    """One row per guard found in the ablation records, per cell family it was switched off in, per dimension
    that applies to some case. Parent: product-channel records with every guard on; ablation: product-channel
    records whose `without` names the guard that was off."""
    parent = [r for r in _product(parent_records) if r.get("without") is None]
    ablated = [r for r in _product(ablation_records) if r.get("without") is not None]
    on_verdicts = _by_case(case_verdicts(parent, expectations))
    rows: list[AblationRow] = []
    for guard in sorted({str(r["without"]) for r in ablated}):
        off_verdicts = _by_case(case_verdicts([r for r in ablated if r["without"] == guard], expectations))
        families = sorted({family for family, _ in off_verdicts}, key=lambda f: tuple(v or "" for v in f))
        for family in families:
            activity = guard_activity([r for r in parent if _family(r) == family], guard)
            for dimension in DIMENSIONS:
                on = on_verdicts.get((family, dimension), {})
                off = off_verdicts.get((family, dimension), {})
                if on or off:
                    rows.append(_paired_row(guard, family, dimension, on, off, activity, settings))
    return rows


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


def render_ablation_markdown(rows: Iterable[AblationRow]) -> str:
    """One line per guard, cell family and dimension: on/off passes over the paired cases, the mean delta
    with its interval, and what the guard did in the parent run."""
    header = ("guard", "stack", "model", "mode", "dimension", "on", "off", "Δ mean", "interval", "seeds")
    header += ("unpaired", "fired", "changed", "contribution")
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        interval = "—" if row.ci_low is None else f"[{_figure(row.ci_low)}, {_figure(row.ci_high)}]"
        if row.ci_low is not None:
            interval += f" ({row.confidence:.0%})"
        cells = [row.guard, row.stack_config or "—", row.model, row.tools_mode, row.dimension]
        cells += [f"{row.on_pass}/{row.n_seeds}", f"{row.off_pass}/{row.n_seeds}", _figure(row.delta_mean), interval]
        cells += [str(row.n_seeds), str(row.n_unpaired), f"{row.fired} ({row.fired_cases} runs)"]
        cells += [f"{row.changed} ({row.changed_cases} runs)", row.contribution]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
