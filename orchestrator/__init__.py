"""toolcall-matrix: tool-calling fidelity of a model on a serving configuration."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.analysis.report.notebook import LoadedRun

__version__ = "0.1.0"
__all__ = ["__version__", "load_run"]


def load_run(path: str | Path) -> LoadedRun:
    """A stored run (results/<run_id>) as typed pandas DataFrames: `.cells` (the long table, one row per cell)
    and `.turns` (one row per turn record); see orchestrator/analysis/report/notebook.py. Imported on first use, so
    `import orchestrator` stays light."""
    from orchestrator.analysis.report.notebook import load_run as load

    return load(path)
