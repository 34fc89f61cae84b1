"""Terminal views (rich tables) of what the commands computed: cell statistics, probe verdicts, the wide table.
Pure presentation: they take frames and results, never read files or talk to servers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.core.types import CellStatus

STATS_COLUMNS = ("stack", "model", "mode", "per-seed", "95% CI", "pooled", "seeds", "sequences")
STATS_COLUMNS += ("eligible", "rej", "non-resp", "flags")
STATS_FLAGS = ("pooled_gap", "few_seeds", "degenerate_seeds")
PROBE_COLUMNS = ("stack", "tool config", "model", "HTTP", "native calls", "text call", "format", "outcome", "verdict")
PROBE_COLUMNS += ("version",)


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def stats_view(table: pd.DataFrame, title: str) -> Table:
    view = Table(title=title)
    for column in STATS_COLUMNS:
        view.add_column(column)
    for cell in table.itertuples():
        flags = [name for name in STATS_FLAGS if getattr(cell, name)]
        interval = "—" if cell.ci_low is None else f"[{cell.ci_low:.3f}, {cell.ci_high:.3f}]"
        mean = "undefined" if cell.status == "undefined" else _fmt(cell.per_seed_mean)
        view.add_row(
            cell.stack_config,
            cell.model,
            cell.tools_mode,
            mean,
            interval,
            _fmt(cell.pooled),
            str(cell.n_seeds),
            str(cell.n_distinct_sequences),
            str(cell.n_eligible_turns),
            str(cell.n_rejected),
            str(cell.n_non_response),
            " ".join(flags),
        )
    return view


def probe_view(results: Sequence[Any]) -> Table:
    view = Table(title="probe")
    for column in PROBE_COLUMNS:
        view.add_column(column)
    for r in results:
        view.add_row(
            r.stack,
            r.tool_config,
            r.model,
            str(r.http_status),
            str(r.n_native_calls),
            str(r.text_call),
            r.call_format or "—",
            f"{r.outcome.value} ({r.detail})",
            r.verdict,
            r.stack_version or "—",
        )
    return view


def wide_view(wide: pd.DataFrame, run_name: str) -> Table:
    view = Table(title=f"per-seed fidelity % [95% CI] n eligible turns — {run_name}")
    view.add_column("model")
    for column in wide.columns:
        view.add_column(column.replace(" | ", "\n"), overflow="fold")
    for model, row in wide.iterrows():
        view.add_row(str(model), *[str(v) for v in row.tolist()])
    return view


def natural_width(wide: pd.DataFrame) -> int:
    """The width the wide view takes unsqueezed (rich's default table: a space each side of a cell, a border
    between and around the columns), from the frame's text: measuring the rich table itself takes seconds at
    thousands of cells."""
    widths = [max([len("model"), *(len(str(m)) for m in wide.index)])]
    for column in wide.columns:
        header = max(len(part) for part in str(column).split(" | "))
        widths.append(max([header, *(len(str(v)) for v in wide[column])]))
    return sum(widths) + 2 * len(widths) + len(widths) + 1


CellState = Literal["figure", "launch_failed", "overflow", "rej", "undefined"]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))  # NaN: a frame's missing number


def cell_state(row: dict[str, Any]) -> CellState:
    """What a long-table row shows, from its status and statistics (never from its display text): a figure; or,
    for a cell without one, why: launch_failed, overflow (refused by context overflows alone), rej (refused by
    the stack, no non-response) or undefined (no eligible turn otherwise). The wide table's text and the HTML
    grid's marker both follow it."""
    if row["status"] == CellStatus.LAUNCH_FAILED:
        return "launch_failed"
    if not _missing(row.get("per_seed_mean")):
        return "figure"
    if row["n_rejected"] and not row["n_non_response"]:
        return "overflow" if (row.get("n_context_overflow") or 0) == row["n_rejected"] else "rej"
    return "undefined"


def figure_flags(row: dict[str, Any]) -> list[str]:
    """The flags of a long-table row that has a figure (a flag qualifies a figure: an undefined cell has none)."""
    mean = row.get("per_seed_mean")
    defined = mean is not None and mean == mean  # NaN: undefined
    return [name for name in STATS_FLAGS if defined and row.get(name) is True]


def cell_lines(long: pd.DataFrame) -> list[str]:
    """One line per cell, for a terminal the wide table does not fit: model, stack config, mode (and later
    axes), the figure with its interval (the wide table's text, markers included), flags."""
    lines = []
    for row in long.to_dict("records"):
        flags = figure_flags(row)
        axes = f" {row['axes']}" if row.get("axes") else ""
        lines.append(f"{row['model']}  {row['stack_label']}  {row['tools_mode']}{axes}  {row['text']}"
                     + (f"  [{' '.join(flags)}]" if flags else ""))  # fmt: skip
    return lines


def run_summary(console: Console, long: pd.DataFrame, wide: pd.DataFrame, run_name: str, index: Path) -> None:
    """What `matrix` and `report` end with: the wide table where it fits the terminal, else a line per cell;
    always the page to open."""
    if long.empty:
        console.print("(no cells)", highlight=False)
    elif natural_width(wide) <= console.width:
        console.print(wide_view(wide, escape(run_name)))
    else:
        title = f"per-seed fidelity % [95% CI] n eligible turns — {run_name}"
        console.print("\n".join([title, *cell_lines(long)]), markup=False, emoji=False, highlight=False, soft_wrap=True)
    console.print(f"open: {escape(str(index))}", highlight=False, soft_wrap=True)
