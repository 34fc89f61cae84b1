"""`orchestrator.load_run(path)`: a stored run as pandas DataFrames with typed columns, for notebooks.

`cells` is the report's long table (one row per cell: statistics and every config column); `turns` one row per
turn record with the fields an analysis reaches for (outcome, detail, HTTP status, latency, tokens, the cell's
stack config and mode), read leanly (a TypedDict of those fields, decoded by msgspec; the raw reply bodies are
never built) under the store's damage policy; a BFCL run adds `bfcl` and `bfcl_subscores` (the report's BFCL
tables, empty for other runs) and each turn's BFCL verdict. Axes and labels are categoricals, counts nullable integers;
`counted` says whether statistics count the record (False: superseded by a rerun, or an aborted seed run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.report.bfclreport import cell_table as bfcl_cell_table
from orchestrator.analysis.report.bfclreport import subscore_table
from orchestrator.analysis.report.report import cell_statistics, long_table
from orchestrator.analysis.report.report import load_run as load_run_turns
from orchestrator.core.turnfields import Read, lean_typeddict
from orchestrator.core.types import Outcome, ToolsMode
from orchestrator.runner.store.rundir import open_run
from orchestrator.runner.store.runstore import counted_turns
from orchestrator.runner.store.turnview import REPORT_FIELDS

# The fields of a turn record the `turns` frame holds: the view's (which are checked), plus these as they stand.
NOTEBOOK_EXTRA = ("attempt", "model", "stack", "stack_config", "parser", "http_status", "latency_s", "tokens",
                  "finish_reason", "channel", "sample", "category", "bfcl")  # fmt: skip
NotebookTurn = lean_typeddict("NotebookTurn", {**REPORT_FIELDS, **dict.fromkeys(NOTEBOOK_EXTRA, Read(checked=False))})


CATEGORIES = ("cell_id", "model", "stack", "stack_config", "parser", "seed", "detail", "end", "call_format",
              "channel", "suite", "stack_version", "category", "bfcl_error_type")  # fmt: skip
CELL_CATEGORIES = ("cell_id", "stack_label", "stack", "tool_config", "parser", "launcher", "host", "model",
                   "quantization", "status", "cell_status", "probe_verdict", "call_format")  # fmt: skip
INTEGERS = ("turn", "attempt", "seed_attempt", "http_status", "sample", "prompt_tokens", "completion_tokens")
TURN_COLUMNS = ("cell_id", "model", "stack", "stack_config", "tools_mode", "seed", "seed_attempt", "turn", "attempt",
                "outcome", "detail", "http_status", "latency_s", "prompt_tokens", "completion_tokens",
                "finish_reason", "call_format", "parser", "stack_version", "flags", "end", "task_success",
                "superseded", "counted", "suite", "channel", "sample", "category", "bfcl_valid",
                "bfcl_valid_as_said", "bfcl_error_type")  # fmt: skip


@dataclass(frozen=True)
class LoadedRun:
    run_id: str
    manifest: dict[str, Any]
    cells: pd.DataFrame
    turns: pd.DataFrame
    bfcl: pd.DataFrame  # per BFCL cell: accuracy as served / as said, the paired gap (report/bfcl_cells.csv)
    bfcl_subscores: pd.DataFrame  # per stack config, model and mode: BFCL's sub-scores (report/bfcl_subscores.csv)


def load_run(path: str | Path) -> LoadedRun:
    """A run directory (results/<run_id>) as typed DataFrames; StoreError names what cannot be read."""
    store = open_run(Path(path))
    run = load_run_turns(store)
    long = long_table(store, run=run, stats_by_cell=cell_statistics(run))
    records = store.read_turns(fields=NotebookTurn)
    counted = {id(record) for record in counted_turns(records)}
    bfcl = bfcl_cell_table(run.cells, run.counted, run.settings)
    turns = _turn_frame(records, counted)
    return LoadedRun(store.run_id, store.manifest(), _typed_cells(long), turns, bfcl, subscore_table(bfcl))


def _turn_frame(records: list[dict[str, Any]], counted: set[int]) -> pd.DataFrame:
    rows = []
    for record in records:
        tokens = record.get("tokens") if isinstance(record.get("tokens"), dict) else {}
        flags = record.get("flags")
        verdict = record.get("bfcl") if isinstance(record.get("bfcl"), dict) else {}
        judged = {f"bfcl_{key}": verdict.get(key) for key in ("valid", "valid_as_said", "error_type")}
        rows.append({**record, **judged, "prompt_tokens": tokens.get("prompt"),
                     "completion_tokens": tokens.get("completion"),
                     "flags": " ".join(flags) if isinstance(flags, list) else None, "counted": id(record) in counted,
                     "superseded": bool(record.get("superseded"))})  # fmt: skip
    frame = pd.DataFrame(rows, columns=list(TURN_COLUMNS))
    for name in CATEGORIES:  # a hand-edited value of another type (a list, an object) is shown as its JSON text
        frame[name] = frame[name].map(_shown, na_action="ignore").astype("category")
    frame["tools_mode"] = pd.Categorical(frame["tools_mode"], categories=[m.value for m in ToolsMode])
    frame["outcome"] = pd.Categorical(frame["outcome"], categories=[o.value for o in Outcome])
    for name in INTEGERS:
        frame[name] = _integers(frame[name])
    frame["latency_s"] = pd.to_numeric(frame["latency_s"], errors="coerce").astype("Float64")
    frame["task_success"] = frame["task_success"].astype("boolean")
    for name in ("bfcl_valid", "bfcl_valid_as_said"):  # a verdict's own value, or none (null, or not a boolean)
        frame[name] = frame[name].map(lambda v: v if isinstance(v, bool) else None).astype("boolean")
    return frame


def _shown(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else json.dumps(value, default=str)


def _integers(column: pd.Series) -> pd.Series:
    """A column of counts as Int64: a hand-edited value that is no int64 count (text, 1.5, 2**70, a list) is <NA>."""
    return pd.Series([_count(value) for value in column], index=column.index, dtype="Int64")


def _count(value: Any) -> int | None:
    """An int64 count from a cell of a frame (a column with gaps holds floats: 3.0 is 3), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    if isinstance(value, float | np.floating) and not (np.isfinite(value) and float(value).is_integer()):
        return None
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None


def _typed_cells(long: pd.DataFrame) -> pd.DataFrame:
    cells = long.copy()
    for name in CELL_CATEGORIES:
        if name in cells:
            cells[name] = cells[name].astype("category")
    if "tools_mode" in cells:
        cells["tools_mode"] = pd.Categorical(cells["tools_mode"], categories=[m.value for m in ToolsMode])
    return cells
