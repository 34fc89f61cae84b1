"""The wide table's columns (and the HTML grid's): one label per cell, in run order, one definition for both;
and the report's Markdown tables."""

from __future__ import annotations

import pandas as pd

from orchestrator.core.types import ToolsMode


def column_labels(long: pd.DataFrame) -> pd.Series:
    """Each cell's wide-table column: `stack config | mode`, then ` | later axes` where the cell has them."""
    axes = long["axes"] if "axes" in long else pd.Series([""] * len(long), index=long.index)
    return long["stack_label"] + " | " + long["tools_mode"] + axes.map(lambda a: f" | {a}" if a else "")


def column_order(long: pd.DataFrame) -> list[str]:
    """The wide table's columns in run order (stack configs as the matrix lists them, modes in the product's
    order; stable: a cell's channels and samples stay in run order within their mode)."""
    if long.empty:
        return []
    mode_rank = {mode.value: rank for rank, mode in enumerate(ToolsMode)}
    stack_rank = {label: rank for rank, label in enumerate(dict.fromkeys(long["stack_label"]))}
    return sorted(
        dict.fromkeys(column_labels(long)),
        key=lambda c: (stack_rank[c.split(" | ")[0]], mode_rank.get(c.split(" | ")[1], 99)),
    )


def markdown_table(frame: pd.DataFrame, *, index: bool) -> str:
    """A GitHub pipe table of a frame: values as stored ('' where missing), `|` escaped, no padding. tabulate
    (pandas' to_markdown) pads every column to its widest value, half a second at 2,000 cells x 60 columns."""
    header = ([str(frame.index.name or "")] if index else []) + [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(map(_markdown_cell, header)) + " |", "|" + "---|" * len(header)]
    rows = frame.itertuples(index=index, name=None)
    lines += ["| " + " | ".join(map(_markdown_cell, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _markdown_cell(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""
    return str(value).replace("|", "\\|").replace("\n", " ")
