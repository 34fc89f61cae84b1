"""BFCL figures of a run: per BFCL cell, BFCL's accuracy as served and as the model said it, the gap between
them (the stack's parser loss in BFCL points), and per (stack config, model, mode) BFCL's sub-scores.

Per cell, over its cases (one seed each, its final answer: the counted turn 0 of the latest run):
- `n_verdict`: cases with a verdict; `n_no_verdict`: cases whose request the stack refused or never answered
  (`rejected_request`, `non_response`: no pass, no failure, on irrelevance too), counted apart, and
  `no_verdict` says why (the turn's detail: a refusal, a context overflow, an empty 2xx answer, no answer) —
  an empty answer the stack returned with `finish_reason: tool_calls` is a stack's loss the table shows here;
- `served` / `as_said`: the mean verdict, with the project's seed-level bootstrap interval over cases;
- `gap`: as_said − served, the paired per-case difference's mean and interval (a case counts in both or neither);
- `errors`: BFCL's error types of the failed served verdicts, most frequent first;
- `variant`: the cell but for its category (its id without `__bfcl-<category>`): sub-scores group by it.
Sub-scores (core/bfcl.py `subscores`): BFCL's aggregation over the categories that ran, each naming what it is
over; never an overall BFCL score (its agentic part cannot run offline). Point values: a sub-score mixes
categories, and no interval is claimed for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from orchestrator.analysis.compare.diffstats import FLOAT_NOISE
from orchestrator.analysis.report.gridcolumns import markdown_table
from orchestrator.analysis.report.requestaxes import first_turns
from orchestrator.core.bfcl import BfclVerdict, subscores
from orchestrator.core.stats import FIDELITY_RANGE, BootstrapSettings, bootstrap_mean_intervals
from orchestrator.runner.store.runpaths import StoreError

CELL_COLUMNS = (
    "cell_id", "variant", "stack_config", "model", "tools_mode", "category", "n_cases", "n_verdict", "n_no_verdict",
    "served", "served_low", "served_high", "as_said", "as_said_low", "as_said_high", "gap", "gap_low", "gap_high",
    "errors", "no_verdict",
)  # fmt: skip
SUBSCORE_COLUMNS = ("variant", "stack_config", "model", "tools_mode", "subscore", "served", "as_said", "over")


def case_verdicts(cell_id: str, counted: list[dict[str, Any]], category: str | None = None) -> list[BfclVerdict]:
    """The verdict on each case of a cell (its final answer); a verdict that is no verdict is refused, named."""
    return [verdict for verdict, _turn in case_turns(cell_id, counted, category)]


def case_turns(
    cell_id: str, counted: list[dict[str, Any]], category: str | None = None
) -> list[tuple[BfclVerdict, dict[str, Any]]]:
    """Each case's final answer with its verdict, checked: of that case, of the cell's category (when given)."""
    found = []
    for (_cell, seed), turn in sorted(first_turns(counted).items()):
        raw = turn.get("bfcl")
        try:
            verdict = BfclVerdict.model_validate(raw)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "bfcl"
            raise StoreError(
                f"turns.jsonl: cell {cell_id}, case {seed}: field {where!r} is no BFCL verdict ({problem['msg']}); "
                "`report --reclassify` recomputes it from the run's snapshot"
            ) from None
        if verdict.id != seed or category not in (None, verdict.category):
            named = f"case {verdict.id!r} of {verdict.category!r}"
            raise StoreError(f"turns.jsonl: cell {cell_id}, case {seed}: its verdict names {named}")
        found.append((verdict, turn))
    return found


def _interval_rows(groups: list[np.ndarray], settings: BootstrapSettings, clip: bool) -> list[tuple[float, float]]:
    present = [group for group in groups if group.size]
    bounds = {"clip": FIDELITY_RANGE} if clip else {"clip": None, "decimals": FLOAT_NOISE}  # a gap: a difference
    drawn = iter(bootstrap_mean_intervals(present, settings, **bounds) if present else [])
    return [next(drawn) if group.size else (np.nan, np.nan) for group in groups]


def _counts(counts: Counter[str]) -> str:
    return "; ".join(f"{kind} {n}" for kind, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def cell_table(
    cells: Mapping[str, dict[str, Any]], counted: Mapping[str, list[dict[str, Any]]], settings: BootstrapSettings
) -> pd.DataFrame:
    """One row per BFCL cell (module docstring); empty when the run has none."""
    rows, served, said = [], [], []
    for cell_id, cell in sorted(cells.items(), key=lambda item: item[1].get("order", 0)):  # run order
        if not cell.get("category"):
            continue
        pairs = case_turns(cell_id, counted.get(cell_id, []), cell["category"])
        verdicts = [verdict for verdict, _turn in pairs]
        judged = [v for v in verdicts if v.valid is not None]
        unjudged = Counter(str(turn.get("detail") or turn.get("outcome")) for v, turn in pairs if v.valid is None)
        served.append(np.array([bool(v.valid) for v in judged], dtype=float))
        said.append(np.array([bool(v.valid_as_said) for v in judged], dtype=float))
        errors = Counter(v.error_type or "unknown" for v in judged if not v.valid)
        rows.append(
            {
                "cell_id": cell_id,
                "variant": cell_id.removesuffix(f"__bfcl-{cell['category']}"),  # the cell but for its category
                "stack_config": cell.get("stack_label"),
                "model": cell.get("model"),
                "tools_mode": cell.get("tools_mode"),
                "category": cell.get("category"),
                "n_cases": len(verdicts),
                "n_verdict": len(judged),
                "n_no_verdict": len(verdicts) - len(judged),
                "errors": _counts(errors),
                "no_verdict": _counts(unjudged),  # why: refused, context overflow, empty answer, no answer
            }
        )
    if not rows:
        return pd.DataFrame(columns=list(CELL_COLUMNS))
    gaps = [a - s for a, s in zip(said, served, strict=True)]
    for name, groups, clip in (("served", served, True), ("as_said", said, True), ("gap", gaps, False)):
        intervals = _interval_rows(groups, settings, clip)
        for row, group, (low, high) in zip(rows, groups, intervals, strict=True):
            row[name] = float(group.mean()) if group.size else np.nan
            row[f"{name}_low"], row[f"{name}_high"] = low, high
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS))


def subscore_table(cells: pd.DataFrame) -> pd.DataFrame:
    """BFCL's sub-scores per variant (a cell but for its category: stack config, model, mode and every other
    axis, so two samples or two streams are never mixed), as served and as said."""
    rows = []
    for (variant, stack, model, mode), group in cells.groupby(
        ["variant", "stack_config", "model", "tools_mode"], sort=False
    ):
        judged = group[group["n_verdict"] > 0]
        served = subscores(dict(zip(judged["category"], judged["served"], strict=True)))
        said = subscores(dict(zip(judged["category"], judged["as_said"], strict=True)))
        for name, figure in served.items():
            rows.append(
                {
                    "variant": variant, "stack_config": stack, "model": model, "tools_mode": mode, "subscore": name,
                    "served": figure["value"], "as_said": said[name]["value"], "over": ", ".join(figure["over"]),
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SUBSCORE_COLUMNS))


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """Shares as percentages (one decimal) for the Markdown and HTML tables; the CSV keeps the shares."""
    percent = [c for c in frame.columns if c.split("_")[0] in ("served", "as", "gap") and frame[c].dtype != object]
    return frame.assign(**{column: (frame[column] * 100).round(1) for column in percent})


def write_bfcl_report(
    cells: Mapping[str, dict[str, Any]],
    counted: Mapping[str, list[dict[str, Any]]],
    settings: BootstrapSettings,
    out: Path,
) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """report/bfcl_cells.* and report/bfcl_subscores.* where the run has BFCL cells; their page sections."""
    table = cell_table(cells, counted, settings)
    if table.empty:
        return [], []
    written, sections = [], []
    for name, frame, title in (
        ("bfcl_cells", table, "BFCL accuracy per cell (%, as served / as said, paired gap)"),
        ("bfcl_subscores", subscore_table(table), "BFCL sub-scores (%, BFCL's aggregation; no overall score)"),
    ):
        frame.to_csv(out / f"{name}.csv", index=False)
        (out / f"{name}.md").write_text(markdown_table(shown(frame), index=False))
        written += [out / f"{name}.csv", out / f"{name}.md"]
        sections.append((title, shown(frame)))
    return written, sections
