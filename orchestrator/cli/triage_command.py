"""`orchestrate triage RUN_DIR`: one verdict, with its evidence, for every low cell of a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.analysis.triage.triage import DEFAULT_THRESHOLD, TriageError, summary, triage_run
from orchestrator.cli import app, console, err_console, fail
from orchestrator.runner.store.runpaths import OutsideRunError


def _percent(value: float | None) -> str:
    return "undef" if value is None else f"{100 * value:.0f}"


@app.command("triage")
def triage_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/<run_id>).")],
    threshold: Annotated[
        float, typer.Option(help="A cell below this per-seed fidelity is triaged.")
    ] = DEFAULT_THRESHOLD,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per low cell, one per line.")] = False,
) -> None:
    """Why each low cell is low: refused, no_response, no_parser, parser_loss, template_differs,
    sampling_differs, truncated, or (only then) the model."""
    try:
        verdicts = triage_run(run_dir, threshold)
    except TriageError as exc:
        fail(str(exc))  # fail() escapes
        return
    if as_json:
        for verdict in verdicts:
            typer.echo(json.dumps(verdict.to_json(), default=str, allow_nan=False))
    else:
        print_verdicts(run_dir, verdicts, threshold)
    try:  # after the verdicts are out: a run that cannot be written to still gets them
        saved = save_verdicts(run_dir, verdicts)
    except OutsideRunError as exc:  # a link out of the run: refused, and said so by the exit status
        fail(f"report/triage.json not written: {exc}")
        return
    except OSError as exc:
        err_console.print(f"warning: report/triage.json not written ({escape(str(exc))}); the verdicts above stand",
                          highlight=False, soft_wrap=True)  # fmt: skip
        return
    if not as_json:
        console.print(
            f"verdicts in {escape(str(saved))}; `orchestrate report {escape(str(run_dir))}` shows them on the page",
            highlight=False, soft_wrap=True,
        )  # fmt: skip


def print_verdicts(run_dir: Path, verdicts: list[Any], threshold: float) -> None:
    table = Table(title=f"triage {run_dir.name} (cells below {100 * threshold:.0f}% or undefined)")
    for column in ("cell", "fidelity", "verdict", "evidence"):
        table.add_column(column, overflow="fold")
    for verdict in verdicts:
        figure = f"{_percent(verdict.per_seed_mean)} [{_percent(verdict.ci_low)},{_percent(verdict.ci_high)}]"
        table.add_row(
            escape(verdict.cell_id), figure, verdict.verdict, escape(summary(verdict.verdict, verdict.evidence))
        )
    console.print(table)
    for verdict in verdicts:  # the canary diff is what a person needs to see for a template verdict
        if verdict.evidence.get("hunk"):
            console.print(
                f"[bold]{escape(verdict.cell_id)}[/] canary diff:\n" + escape("\n".join(verdict.evidence["hunk"]))
            )
    console.print(
        f"{len(verdicts)} low cell(s); counts: "
        + ", ".join(
            f"{name} {sum(v.verdict == name for v in verdicts)}" for name in sorted({v.verdict for v in verdicts})
        )
    )


def save_verdicts(run_dir: Path, verdicts: list[Any]) -> Path:
    """report/triage.json: the verdicts, with the size of turns.jsonl they were drawn from (the report page shows
    them, marked stale once the run has changed)."""
    from orchestrator.analysis.report.htmlreport import TRIAGE_FILE, section_file
    from orchestrator.runner.store.runpaths import owned_dir
    from orchestrator.runner.store.runstore import write_json_atomic

    path = owned_dir(run_dir, run_dir / "report") / TRIAGE_FILE
    write_json_atomic(path, section_file(run_dir, [verdict.to_json() for verdict in verdicts]), run_dir=run_dir)
    return path
