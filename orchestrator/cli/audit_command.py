"""`orchestrate audit`: recount trajectories from other harnesses whose folded error text became "no call".

The work is in analysis/audit/audit.py; this module parses the options and prints (JSON, or two rich tables).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.analysis.audit.audit import DEFAULT_PATTERN, AuditReport, Figures, audit
from orchestrator.cli import app, console, fail
from orchestrator.cli.bootstrapoptions import DEFAULT_RESAMPLES, DEFAULT_RNG_SEED, Resamples, RngSeed
from orchestrator.core.jsonl import InputError
from orchestrator.core.jsonsafe import safe_text
from orchestrator.core.stats import BootstrapSettings
from orchestrator.core.types import ToolsMode


def _pct(value: float | None) -> str:
    return "undefined" if value is None else f"{100 * value:.1f}%"


def _short(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _interval(figures: Figures) -> str:
    if figures.ci_low is None or figures.ci_high is None:
        return "—"
    return f"[{100 * figures.ci_low:.1f}, {100 * figures.ci_high:.1f}]"


def summary_view(report: AuditReport) -> Table:
    """Naive vs corrected, side by side."""
    view = Table(title=escape(f"audit of {report.path}: naive vs corrected"))
    for column in ("figure", "naive", "corrected"):
        view.add_column(column)
    naive, corrected = report.naive, report.corrected
    view.add_row("per-seed mean", _pct(naive.per_seed_mean), _pct(corrected.per_seed_mean))
    view.add_row("95% CI (seed bootstrap)", _interval(naive), _interval(corrected))
    view.add_row("turn-pooled", _pct(naive.pooled), _pct(corrected.pooled))
    view.add_row(
        "valid / eligible turns", f"{naive.n_valid}/{naive.n_eligible}", f"{corrected.n_valid}/{corrected.n_eligible}"
    )
    view.add_row(
        "defined seeds",
        f"{naive.n_defined_seeds}/{len(report.seeds)}",
        f"{corrected.n_defined_seeds}/{len(report.seeds)}",
    )
    for outcome, count in report.outcomes_naive.items():
        view.add_row(f"  {outcome}", str(count), str(report.outcomes_corrected[outcome]))
    folded = report.n_folded
    view.caption = escape(
        f"{report.n_assistant_turns} assistant turns, {report.n_generic_error} folded-error turns "
        f"({folded['non_response']} non_response: {report.patterns!r}; "
        f"{folded['rejected_request']} rejected_request: {report.rejected_patterns!r}); "
        f"mode {report.mode.value}; tools from {report.tools_source}; "
        f"bootstrap {report.bootstrap.resamples} resamples, rng seed {report.bootstrap.rng_seed}"
    )
    return view


def seeds_view(report: AuditReport) -> Table:
    """One row per seed: what the folded-error turns did to its fidelity."""
    view = Table(
        title="per seed",
        caption="fidelity = valid / eligible turns; — = undefined (no eligible turn); "
        "folded = turns holding a folded error text (refused: a --rejected-pattern one)",
    )
    view.add_column("seed", overflow="fold")  # a seed id is how one finds the file: never cut it short
    for column in ("turns", "folded", "naive", "corrected"):
        view.add_column(column, no_wrap=True)
    for row in report.seeds:
        refused = row.n_folded["rejected_request"]
        folded = f"{row.n_generic_error} ({refused} refused)" if refused else str(row.n_generic_error)
        naive = f"{_short(row.naive)} ({row.naive_valid}/{row.naive_eligible})"
        corrected = f"{_short(row.corrected)} ({row.corrected_valid}/{row.corrected_eligible})"
        view.add_row(escape(row.seed), str(row.n_turns), folded, naive, corrected)
    return view


@app.command("audit")
def audit_command(
    path: Annotated[
        Path, typer.Argument(help="A LOCA-bench run dir (tasks/*/state*/trajectory.json), a .json or a .jsonl file.")
    ],
    pattern: Annotated[
        list[str] | None,
        typer.Option(
            "--pattern",
            metavar="TEXT",
            help=f"Text of a folded error message meaning no response (non_response); repeatable. "
            f"Default: {DEFAULT_PATTERN!r}.",
        ),
    ] = None,
    rejected_pattern: Annotated[
        list[str] | None,
        typer.Option(
            "--rejected-pattern",
            metavar="TEXT",
            help="Text of a folded error message meaning the request was refused (rejected_request), e.g. "
            "'Request failed with 400 status'; repeatable. Default: none.",
        ),
    ] = None,
    tools: Annotated[
        Path | None, typer.Option(help="JSON list of OpenAI tools (or {'tools': [...]}) for files that list none.")
    ] = None,
    mode: Annotated[ToolsMode, typer.Option(help="The tools mode the harness used.")] = ToolsMode.NATIVE,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    resamples: Resamples = DEFAULT_RESAMPLES,
    rng_seed: RngSeed = DEFAULT_RNG_SEED,
) -> None:
    """Find turns where a folded error text was counted as "no tool call", relabel, and recount."""
    settings = BootstrapSettings(resamples=resamples, rng_seed=rng_seed)
    patterns = pattern or [DEFAULT_PATTERN]
    try:
        report = audit(
            path,
            patterns=patterns,
            rejected_patterns=rejected_pattern or [],
            tools_file=tools,
            mode=mode,
            settings=settings,
        )
    except InputError as exc:
        fail(escape(safe_text(str(exc))))  # [brackets] rich would read as markup; a lone surrogate from the file
        return
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:  # a defect: named, never a traceback
        fail(escape(safe_text(f"{path}: cannot audit: {type(exc).__name__}: {exc}")))
        return
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
        return
    console.print(summary_view(report))
    console.print(seeds_view(report))
