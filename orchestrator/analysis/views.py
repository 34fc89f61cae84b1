"""Terminal views (rich tables) of what the commands computed: cell statistics, probe verdicts, the wide table.
Pure presentation: they take frames and results, never read files or talk to servers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.table import Table

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
