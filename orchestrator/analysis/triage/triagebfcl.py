"""Triage of a BFCL cell (a cell with a `category`): it is low by BFCL's accuracy as served, not by the project's
fidelity, and its parser loss is read from BFCL's own verdicts: a case the served calls fail and the calls the
model wrote pass (`valid_as_said`) is the stack's loss, in BFCL points."""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.report.bfclreport import case_verdicts
from orchestrator.core.types import BfclVerdict


def judged(config: dict[str, Any], turns: list[dict[str, Any]]) -> list[BfclVerdict]:
    """The cases of the cell with a verdict (those the stack refused or never answered have none)."""
    verdicts = case_verdicts(config["cell_id"], turns, config["category"])
    return [verdict for verdict in verdicts if verdict.valid is not None]


def bfcl_mean(config: dict[str, Any], turns: list[dict[str, Any]]) -> float | None:
    """BFCL's accuracy as served over the cases with a verdict (None: no case has one)."""
    verdicts = judged(config, turns)
    return sum(bool(v.valid) for v in verdicts) / len(verdicts) if verdicts else None


def bfcl_parser_loss(config: dict[str, Any], turns: list[dict[str, Any]], majority: float) -> dict[str, Any] | None:
    """Evidence of parser loss when most failed cases pass as said; None otherwise."""
    verdicts = judged(config, turns)
    failed = [v for v in verdicts if not v.valid]
    lost = [v for v in failed if v.valid_as_said]
    if not failed or len(lost) / len(failed) < majority:
        return None
    served = sum(bool(v.valid) for v in verdicts) / len(verdicts)
    said = sum(bool(v.valid_as_said) for v in verdicts) / len(verdicts)
    return {
        "n_parse_lost": len(lost),
        "n_failed_turns": len(failed),
        "n_eligible_turns": len(verdicts),
        "bfcl": {"category": verdicts[0].category, "served": served, "as_said": said, "lost_points": said - served},
        "call_formats_in_text": {},
        "example": lost[0].id,
    }
