"""The release gate of `orchestrate diff` (--fail-on-regression, --require-power), defined once: a pure function
of the compared cells, recorded in the diff itself (`RunDiff.gate_failures`, `power_failure`; `diff --json`) so
that what reads a diff (the nightly's summary, scripts/nightly_summary.py) names the same failures the exit
status was decided on, never a second copy of the rule.

The gate fails on a cell that is a `regression`, that `became_undefined` (B refuses what A served), that lost
seeds A had defined (`n_lost_seeds`: a partial collapse the paired seeds left may not show), or that is only in
A (gone from B). A cell can fail for two reasons (a regression that also lost seeds): one entry per reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Protocol

from pydantic import BaseModel

GateReason = Literal["regression", "became_undefined", "lost_seeds", "missing_in_b"]
REASONS: tuple[GateReason, ...] = ("regression", "became_undefined", "lost_seeds", "missing_in_b")
GATE_VERDICTS: tuple[GateReason, ...] = REASONS[:2]  # the verdicts that fail the gate


class GateCell(Protocol):
    """What the gate reads of a compared cell (analysis/compare/rundiff.py's CellDiff)."""

    cell_id: str
    verdict: str
    n_lost_seeds: int


class GateFailure(BaseModel):
    cell_id: str
    reason: GateReason
    n_lost_seeds: int = 0  # the seeds defined in A that are undefined or missing in B


def gate_failures(cells: Iterable[GateCell], only_in_a: Iterable[str]) -> list[GateFailure]:
    """Every reason the gate fails, grouped by reason (regressions, became undefined, lost seeds, gone from B),
    cells in diff order; empty when it passes."""
    cells = list(cells)
    failures = [
        GateFailure(cell_id=cell.cell_id, reason=verdict)
        for verdict in GATE_VERDICTS
        for cell in cells
        if cell.verdict == verdict
    ]
    failures += [
        GateFailure(cell_id=cell.cell_id, reason="lost_seeds", n_lost_seeds=cell.n_lost_seeds)
        for cell in cells
        if cell.n_lost_seeds
    ]
    return failures + [GateFailure(cell_id=cell_id, reason="missing_in_b") for cell_id in only_in_a]


def gate_reasons(failures: list[GateFailure]) -> list[str]:
    """The gate's failures as `orchestrate diff` prints them, one phrase per reason; empty when it passes."""
    by_reason = {reason: [f for f in failures if f.reason == reason] for reason in REASONS}
    reasons = []
    if by_reason["regression"]:
        reasons.append(f"{len(by_reason['regression'])} regression(s)")
    if by_reason["became_undefined"]:
        reasons.append(f"{len(by_reason['became_undefined'])} cell(s) became undefined (no defined seed in B)")
    lost = by_reason["lost_seeds"]
    if lost:
        named = ", ".join(f"{failure.cell_id} ({failure.n_lost_seeds})" for failure in lost)
        reasons.append(f"{len(lost)} cell(s) lost seeds defined in A (undefined or missing in B): {named}")
    if by_reason["missing_in_b"]:
        reasons.append(f"{len(by_reason['missing_in_b'])} cell(s) only in A (missing from B)")
    return reasons


def power_failure(any_detectable: bool, min_seeds_note: str | None) -> str | None:
    """Why --require-power fails: no compared cell could reach corrected significance; None when one could."""
    if any_detectable:
        return None
    return min_seeds_note or "no cell has a seed defined in both runs to compare"
