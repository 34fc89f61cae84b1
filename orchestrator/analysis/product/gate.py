"""Release gates over the channel verdicts: `<channel>.<set>.<dimension> <op> <threshold>`, e.g.
`product.core.answer >= 12/14`.

A gate is checked on every (stack_config, model, tools_mode, suite) group that has its channel (ablation groups
are not release candidates). Its value is passes / applicable cases, where a tie and an unscored case count as
not passing: a release gate never passes on missing data. The comparison is exact (fractions.Fraction), so
12/14 >= 6/7 holds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from orchestrator.analysis.product.channelverdicts import CaseId, CaseVerdict
from orchestrator.core.gateexpr import OPERATORS, Gate, GateError, parse_gate

__all__ = ["Gate", "GateError", "GateResult", "evaluate_gates", "format_gate_results", "gates_passed", "parse_gate"]


class GateResult(BaseModel):
    """One gate on one group. `ok` is False with a `reason` when there was nothing to measure."""

    model_config = ConfigDict(frozen=True)

    expression: str
    metric: str
    stack_config: str | None
    model: str | None
    tools_mode: str | None
    suite: str | None
    passes: int
    total: int
    ties: int
    unscored: int
    value: float | None
    op: str
    threshold_text: str
    threshold: float
    ok: bool
    reason: str | None = None


GateGroup = tuple[str | None, str, str, str | None]  # (stack_config, model, tools_mode, suite)


def _release_groups(verdicts: list[CaseVerdict], channel: str) -> dict[GateGroup, list[CaseVerdict]]:
    """The release candidates (no guard switched off) that have this channel, with their verdicts in it."""
    groups: dict[GateGroup, list[CaseVerdict]] = {}
    for v in verdicts:
        if v.without is None and v.channel == channel:
            groups.setdefault((v.stack_config, v.model, v.tools_mode, v.suite), []).append(v)
    return groups


def _check(gate: Gate, group: GateGroup, found: list[CaseVerdict], core: Collection[CaseId] | None) -> GateResult:
    selected = [
        v
        for v in found
        if v.dimension == gate.dimension
        and (gate.case_set == "all" or (v.case in core if core is not None else v.core))
    ]
    passes = sum(v.passed and not v.tie and not v.unscored for v in selected)
    total = len(selected)
    common = {
        "expression": gate.expression,
        "metric": gate.metric,
        "stack_config": group[0],
        "model": group[1],
        "tools_mode": group[2],
        "suite": group[3],
        "passes": passes,
        "total": total,
        "ties": sum(v.tie for v in selected),
        "unscored": sum(v.unscored for v in selected),
        "op": gate.op,
        "threshold_text": gate.threshold_text,
        "threshold": float(gate.threshold),
    }
    if total == 0:
        reason = f"no {gate.case_set} case applies to {gate.channel} {gate.dimension}"
        return GateResult(**common, value=None, ok=False, reason=reason)
    ok = OPERATORS[gate.op](Fraction(passes, total), gate.threshold)
    return GateResult(**common, value=passes / total, ok=ok)


def evaluate_gates(
    gates: Iterable[str], verdicts: Iterable[CaseVerdict], core: Collection[CaseId] | None = None
) -> list[GateResult]:
    """Every gate on every group that has its channel. All expressions are parsed before any is checked. A gate
    whose channel no group has fails once, with group fields None: a gate that checked nothing did not pass."""
    parsed = [parse_gate(text) for text in gates]
    verdicts = list(verdicts)
    results: list[GateResult] = []
    for gate in parsed:
        groups = _release_groups(verdicts, gate.channel)
        if not groups:
            results.append(_nothing_measured(gate))
        for group in sorted(groups, key=lambda g: tuple("" if v is None else v for v in g)):
            results.append(_check(gate, group, groups[group], core))
    return results


def _nothing_measured(gate: Gate) -> GateResult:
    return GateResult(
        expression=gate.expression,
        metric=gate.metric,
        stack_config=None,
        model=None,
        tools_mode=None,
        suite=None,
        passes=0,
        total=0,
        ties=0,
        unscored=0,
        value=None,
        op=gate.op,
        threshold_text=gate.threshold_text,
        threshold=float(gate.threshold),
        ok=False,
        reason=f"no group has the {gate.channel} channel",
    )


def gates_passed(results: Iterable[GateResult]) -> bool:
    """Whether every gate held on every group (and at least one was checked)."""
    results = list(results)
    return bool(results) and all(result.ok for result in results)


def format_gate_result(result: GateResult) -> str:
    """'PASS product.core.answer 7/8 (0.875) >= 12/14 (0.857) on <stack> <model> <mode> <suite>'."""
    verdict = "PASS" if result.ok else "FAIL"
    value = "—" if result.value is None else f"{result.value:.3f}"
    where = " ".join("—" if v is None else v for v in (result.stack_config, result.model, result.tools_mode))
    line = f"{verdict} {result.metric} {result.passes}/{result.total} ({value}) {result.op} "
    line += f"{result.threshold_text} ({result.threshold:.3f}) on {where} {result.suite or '—'}"
    missing = [f"{n} {label}" for n, label in ((result.ties, "tied"), (result.unscored, "unscored")) if n]
    if missing:
        line += f" [{', '.join(missing)}: counted as not passing]"
    if result.reason:
        line += f": {result.reason}"
    return line


def format_gate_results(results: Iterable[GateResult]) -> str:
    """One line per gate and group."""
    return "\n".join(format_gate_result(result) for result in results)
