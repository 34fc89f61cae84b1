"""`orchestrate diff`: run B against run A (or, with --within, one stack config against another in one run),
cell by cell and seed-paired, with a multiple-comparison correction and what changed in each cell's config.
Thin: the comparison lives in analysis/compare/rundiff.py; this parses, prints and sets the exit status."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from orchestrator.analysis.compare.diffgate import gate_reasons
from orchestrator.analysis.compare.rundiff import CORRECTIONS, CellDiff, DiffError, RunDiff, diff_runs, diff_within
from orchestrator.cli import app, console, err_console, fail
from orchestrator.cli.bootstrapoptions import DEFAULT_RESAMPLES, DEFAULT_RNG_SEED, RngSeed, resamples_option
from orchestrator.core.stats import FEW_SEEDS_THRESHOLD, BootstrapSettings

WIDE_LAYOUT = 140  # columns: below this the cell names and config changes move under the table
MAX_FLAGS_SHOWN = 6  # a cross-stack argv differs almost everywhere; --json lists every flag
VERDICT_STYLE = {
    "regression": "bold red",
    "improvement": "bold green",
    "inconclusive": "yellow",
    "no_change": "",
    "became_undefined": "bold red",
    "became_defined": "green",
    "undefined": "dim",
}
LOST_MARK = "!"  # after a verdict: the cell lost seeds defined in A (the footer names how many)
NO_POWER_EXIT = 3  # --require-power: no compared cell could have shown a change
GATE_HELP = (
    "Exit 1 when any cell is a regression, became undefined, lost seeds defined in A (undefined or missing in B), "
    "or is only in A (missing from B)."
)
POWER_HELP = (
    f"Exit {NO_POWER_EXIT} when no compared cell could reach corrected significance even had every paired seed "
    "differed (none is detectable)."
)


def _pct(value: float | None, signed: bool = False) -> str:
    """Fidelity in percent (points for a difference), as the wide report writes it; --json keeps the fractions."""
    return "—" if value is None else f"{100 * value:{'+' if signed else ''}.1f}"


def _side(paired: float | None, own: float | None) -> str:
    """A side's mean over the paired seeds and, where it differs, over all its own defined seeds (in brackets):
    a side with no paired seed still shows its own figure."""
    return _pct(paired) if _pct(paired) == _pct(own) else f"{_pct(paired)} ({_pct(own)})"


def _p(value: float | None) -> str:
    return "—" if value is None else ("<0.001" if value < 0.001 else f"{value:.3f}")


def _fields(cell: CellDiff) -> str:
    """The changed config fields; one missing from a side's cell file is marked, not shown as a change to null."""
    marks = {"absent_in_a": " (absent in A)", "absent_in_b": " (absent in B)"}
    return ", ".join(change.field + marks.get(change.status, "") for change in cell.config_changes) or "—"


def _flags(cell: CellDiff) -> str:
    """The argv flags added and removed (words, not +/- signs: a removed `--jinja` would read `---jinja`), a few
    of each (a cross-stack argv differs almost everywhere)."""
    parts = []
    for name, flags in (("added", cell.flags_added), ("removed", cell.flags_removed)):
        if flags:
            more = f" (+{len(flags) - MAX_FLAGS_SHOWN} more, see --json)" if len(flags) > MAX_FLAGS_SHOWN else ""
            parts.append(f"{name} " + ", ".join(flags[:MAX_FLAGS_SHOWN]) + more)
    return "; ".join(parts)


def _verdict(cell: CellDiff) -> str:
    """The verdict, styled; a cell that lost seeds defined in A is marked (its paired figures cannot show it)."""
    style = VERDICT_STYLE[cell.verdict]
    text = f"[{style}]{cell.verdict}[/]" if style else cell.verdict
    if cell.n_lost_seeds and cell.verdict != "became_undefined":  # that verdict already says it
        text += f"[bold red]{LOST_MARK}[/]"  # one character: an 80-column table has no room for more
    return text


def diff_view(result: RunDiff, width: int) -> Table:
    """One row per cell. A wide terminal gets the cell id and its changed config fields in the row; a narrow one
    (CI logs are 80 columns) numbers the rows, and `_footer` names each number's cell and its changes."""
    wide = width >= WIDE_LAYOUT
    a, b = result.within or [result.run_a, result.run_b]
    title = f"diff {b} − {a}" + (f" (within {result.run_a})" if result.within else "")
    view = Table(title=title, box=box.SIMPLE_HEAD, collapse_padding=True)
    view.add_column("cell" if wide else "#", overflow="fold", min_width=24 if wide else None)
    for column in ("seeds", "A %", "B %", "Δ pts [95% CI]", "p", "p adj", "verdict"):
        view.add_column(column, no_wrap=True)  # figures and verdicts stay whole; names fold
    if wide:
        view.add_column("config changes", overflow="fold", min_width=24)
    for number, cell in enumerate(result.cells, start=1):
        interval = "—"
        if cell.delta is not None:
            interval = f"{_pct(cell.delta, True)} [{_pct(cell.ci_low, True)}, {_pct(cell.ci_high, True)}]"
        view.add_row(
            cell.cell_id if wide else str(number),
            str(cell.n_paired_seeds) + ("*" if cell.few_seeds else ""),
            _side(cell.mean_a, cell.own_mean_a),
            _side(cell.mean_b, cell.own_mean_b),
            interval,
            _p(cell.p_value),
            _p(cell.p_adjusted),
            _verdict(cell),
            *([_fields(cell)] if wide else []),
        )
    return view


def _cell_lines(result: RunDiff, wide: bool) -> list[str]:
    """Per cell, what the table has no room for: its name and config changes (narrow), argv flags, seeds."""
    lines = []
    for number, cell in enumerate(result.cells, start=1):
        name = cell.cell_id if wide else f"#{number} {cell.cell_id}"
        if not wide:
            lines.append(f"{name}: config changes: {_fields(cell)}")
        if _flags(cell):
            lines.append(f"{name}: argv: {_flags(cell)}")
        for side, seeds in (("A", cell.seeds_only_in_a), ("B", cell.seeds_only_in_b)):
            if seeds:
                lines.append(f"{name}: seeds only in {side}: {', '.join(seeds)}")
        if cell.verdict != "undefined" and (cell.n_undefined_a or cell.n_undefined_b):  # undefined says it all
            lines.append(
                f"{name}: seeds undefined (no eligible turn) in A: {cell.n_undefined_a}, in B: {cell.n_undefined_b}"
            )
        if cell.n_lost_seeds:
            lines.append(
                f"{name}: lost {cell.n_lost_seeds} seed(s) defined in A (undefined or missing in B): "
                "fails --fail-on-regression"
            )
    return lines


def _detectability(result: RunDiff) -> list[str]:
    """The note when no compared cell can reach corrected significance, else how many cannot (if any)."""
    if result.min_seeds_note:
        return [f"note: {result.min_seeds_note}"]
    blind = [cell for cell in result.cells if cell.p_floor_paired is not None and not cell.detectable]
    if not blind:
        return []
    return [
        f"{len(blind)} of {result.n_compared} compared cell(s) cannot reach corrected significance even had every "
        "paired seed differed (p_floor_paired, detectable in --json)"
    ]


def _footer(result: RunDiff, wide: bool) -> list[str]:
    few = any(cell.few_seeds for cell in result.cells)
    lost = any(cell.n_lost_seeds and cell.verdict != "became_undefined" for cell in result.cells)
    selected = f" matching --cell {' '.join(result.cell_globs)}" if result.cell_globs else ""
    lines = [
        f"correction: {result.correction} over {result.n_compared} cell(s){selected}, alpha {result.alpha}; "
        f"p: {result.test}; interval: paired seed bootstrap, {result.resamples} resamples, "
        f"rng seed {result.rng_seed}, {round(100 * result.confidence)}%",
        f"regressions: {result.regressions}, improvements: {result.improvements}, "
        f"became undefined: {result.became_undefined}, became defined: {result.became_defined}"
        + (f"; * fewer than {FEW_SEEDS_THRESHOLD} paired seeds" if few else "")
        + (f"; {LOST_MARK} lost seeds defined in A" if lost else ""),
        "A %, B %: the mean over the paired seeds (in brackets where it differs: over all that side's defined seeds)",
    ]
    if result.only_in_a:
        lines.append(f"cells only in A: {', '.join(result.only_in_a)} (missing from B: fails --fail-on-regression)")
    if result.only_in_b:
        lines.append(f"cells only in B: {', '.join(result.only_in_b)}")
    return lines + _cell_lines(result, wide) + _detectability(result)  # last: the tail of a CI log shows it


def _exit_status(result: RunDiff, fail_on_regression: bool, require_power: bool) -> None:
    """A failed gate (exit 1) before missing power (exit 3): a known failure outranks an inconclusive diff. The
    gate's rule is analysis/compare/diffgate.py's, recorded in the diff (`gate_failures`, `power_failure`; --json)."""
    reasons = gate_reasons(result.gate_failures) if fail_on_regression else []
    if reasons:
        err_console.print(f"--fail-on-regression: failed: {'; '.join(reasons)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    reason = result.power_failure if require_power else None
    if reason:
        err_console.print(f"--require-power: failed: {reason}", highlight=False, soft_wrap=True)
        raise typer.Exit(NO_POWER_EXIT)


@app.command("diff")
def diff_command(
    runs: Annotated[list[Path], typer.Argument(help="RUN_A RUN_B (results/<run_id>), or one RUN with --within.")],
    within: Annotated[
        tuple[str, str] | None,
        typer.Option("--within", metavar="STACK_A STACK_B", help="Compare two stack configs of one RUN."),
    ] = None,
    cell: Annotated[
        list[str] | None,
        typer.Option(
            "--cell",
            metavar="GLOB",
            help="Compare (and correct together) only the cells whose id (as shown) matches; repeatable.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help=GATE_HELP)] = False,
    require_power: Annotated[bool, typer.Option("--require-power", help=POWER_HELP)] = False,
    correction: Annotated[str, typer.Option(help=f"Multiple-comparison correction: {' | '.join(CORRECTIONS)}.")] = (
        "holm"
    ),
    alpha: Annotated[float, typer.Option(help="Significance level, after the correction.")] = 0.05,
    resamples: Annotated[
        int, resamples_option("Bootstrap resamples (and sign vectors past n = 16).")
    ] = DEFAULT_RESAMPLES,
    rng_seed: RngSeed = DEFAULT_RNG_SEED,
) -> None:
    """Seed-paired fidelity difference B − A per cell, with a bootstrap interval, a sign-flip permutation
    p-value corrected across the compared cells, a verdict (regression | improvement | inconclusive |
    no_change | became_undefined | became_defined | undefined) and the config fields that changed."""
    settings = BootstrapSettings(resamples=resamples, rng_seed=rng_seed)
    try:
        if within is not None:
            if len(runs) != 1:
                fail(f"--within compares two stack configs of one run: give one RUN, not {len(runs)}")
            result = diff_within(runs[0], *within, correction=correction, alpha=alpha, settings=settings, cells=cell)
        else:
            if len(runs) != 2:
                fail(f"give two runs (RUN_A RUN_B), or one RUN with --within STACK_A STACK_B; got {len(runs)}")
            result = diff_runs(runs[0], runs[1], correction=correction, alpha=alpha, settings=settings, cells=cell)
    except DiffError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    else:
        console.print(diff_view(result, console.width))
        for line in _footer(result, console.width >= WIDE_LAYOUT):
            console.print(line, highlight=False, soft_wrap=True)
    _exit_status(result, fail_on_regression, require_power)
