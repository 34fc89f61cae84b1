"""What `orchestrate report` (and the end of `matrix`, the same function) prints: the wide table only where it
fits the terminal unsqueezed, else one line per cell; always the path of index.html."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.cliinprocess import orchestrate
from tests.conftest import committed_runs

CPU = next(run for run in committed_runs() if run.name == "20261203T131653Z-cpu-87d008")  # 32 cells
SMALL = next(run for run in committed_runs() if run.name == "20261203T173011Z-diffcheck-98d599")  # 2 cells
BORDERS = set("┏┃┡│└━")


def report(source: Path, tmp_path: Path, columns: int) -> tuple[Path, list[str]]:
    run = tmp_path / source.name
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("report"))
    done = orchestrate("report", str(run), env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    return run, done.stdout.splitlines()


@pytest.mark.parametrize("columns", [80, 120])
def test_a_wide_run_prints_one_line_per_cell_where_its_table_does_not_fit(tmp_path: Path, columns: int) -> None:
    run, lines = report(CPU, tmp_path, columns)
    long = pd.read_csv(run / "report" / "cells_long.csv")
    assert not BORDERS & set("".join(lines)), "a squeezed table was printed"
    for row in long.itertuples():
        matching = [line for line in lines if line.startswith(f"{row.model}  {row.stack_label}  {row.tools_mode}  ")]
        assert len(matching) == 1 and row.text in matching[0], row.cell_id
    assert lines[-1] == f"open: {run / 'report' / 'index.html'}"
    assert (run / "report" / "index.html").is_file()


def test_a_table_that_fits_is_printed_whole(tmp_path: Path) -> None:
    run, lines = report(SMALL, tmp_path, 100)
    long = pd.read_csv(run / "report" / "cells_long.csv")
    assert BORDERS & set("".join(lines))
    assert all(len(line) <= 100 for line in lines if BORDERS & set(line))
    table = "\n".join(lines)
    assert all(text in table for text in long["text"])  # each figure on one line: nothing folded
    assert lines[-1] == f"open: {run / 'report' / 'index.html'}"


@pytest.mark.parametrize("run", committed_runs(), ids=lambda p: p.name)
def test_the_width_estimate_is_what_rich_draws(run: Path) -> None:
    """The summary decides from the frame's text (measuring a rich table of thousands of cells takes seconds):
    the estimate must be the width rich gives the table unsqueezed."""
    from rich.console import Console
    from rich.measure import Measurement

    from orchestrator.analysis.report.views import natural_width, wide_view

    wide = pd.read_csv(run / "report" / "cells_wide.csv", index_col=0)
    console = Console(width=100)
    drawn = Measurement.get(console, console.options.update_width(1 << 20), wide_view(wide, run.name)).maximum
    assert natural_width(wide) == drawn
