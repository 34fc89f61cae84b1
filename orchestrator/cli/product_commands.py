"""`orchestrate channels`, `gate` and `ablate`: the model channel beside the product channel, the release gate,
and what each product guard earned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import app, console, fail


@app.command("channels")
def channels_command(run_dir: Annotated[Path, typer.Argument(help="results/<run_id>")]) -> None:
    """The model channel beside the product channel (majority vote per case), and the gates' verdicts."""
    from orchestrator.analysis.product.gate import format_gate_results
    from orchestrator.analysis.product.productreport import NoChannelsError, write_channel_report
    from orchestrator.runner.store.rundir import open_run
    from orchestrator.runner.store.runstore import StoreError

    try:
        markdown, results, written = write_channel_report(open_run(run_dir))
    except (StoreError, NoChannelsError) as exc:
        fail(str(exc))
    console.print(markdown, highlight=False, soft_wrap=True)
    if results:
        console.print(format_gate_results(results), highlight=False, soft_wrap=True)
    console.print(f"wrote {written[0].parent}; `orchestrate report {run_dir}` shows it on the page", highlight=False)


@app.command("gate")
def gate_command(
    run_dir: Annotated[Path, typer.Argument(help="results/<run_id>")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per gate and group.")] = False,
) -> None:
    """Check the run's release gates; exit 1 when one fails (or checked nothing), 2 when none is declared."""
    from orchestrator.analysis.product.gate import GateError, format_gate_results, gates_passed
    from orchestrator.analysis.product.productreport import gate_results
    from orchestrator.runner.store.rundir import open_run
    from orchestrator.runner.store.runstore import StoreError

    try:
        results = gate_results(open_run(run_dir))
    except (StoreError, GateError) as exc:
        fail(str(exc))
    if not results:
        fail(f"{run_dir}: the run's matrix declares no gate")
    if as_json:
        for result in results:
            typer.echo(json.dumps(result.model_dump()))
    else:
        console.print(format_gate_results(results), highlight=False, soft_wrap=True)
    if not gates_passed(results):
        raise typer.Exit(1)


@app.command("ablate")
def ablate_command(
    run_dir: Annotated[Path, typer.Argument(help="results/<run_id> with a product channel")],
    guard: Annotated[
        list[str] | None, typer.Option("--guard", help="A guard to switch off (repeatable); default: all, or 'all'.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per guard, cell and dimension.")] = False,
    no_reuse: Annotated[
        bool, typer.Option("--no-reuse", help="Rerun case runs in which the guard changed nothing, too.")
    ] = False,
    allow_drift: Annotated[bool, typer.Option("--allow-drift", help="Ablate even if the code changed.")] = False,
) -> None:
    """Rerun the product channel with each guard off (same cases, samples, sampling seeds, stack configs; the
    servers started once) into RUN_DIR/<run_id>-ablation/, resumable; report each guard's paired change and
    its interval."""
    from orchestrator.analysis.product.productreport import write_ablation_report
    from orchestrator.cli.execution import check_tracing
    from orchestrator.runner.executors.dispatch import run_sweep
    from orchestrator.runner.product.ablationrun import AblationError, config_matches, open_ablation
    from orchestrator.runner.store.rundir import open_run
    from orchestrator.runner.store.runstore import StoreError
    from orchestrator.runner.suites.mcperror import McpError
    from orchestrator.runner.suites.tasks import SuiteError
    from orchestrator.serving.handle import RunIdError
    from orchestrator.serving.launchers import install_termination_handler

    install_termination_handler()
    check_tracing()
    guards = None if not guard or guard == ["all"] else guard
    try:
        store, matrix, active = open_ablation(run_dir, guards, reuse=not no_reuse, allow_drift=allow_drift)
    except (AblationError, StoreError, SuiteError, RunIdError) as exc:  # StoreError: also a link out of the run
        fail(str(exc))
    resumed = bool(store.manifest().get("resumes"))
    output = console if not as_json else type(console)(stderr=True)
    try:
        executed = run_sweep(matrix, store, output, resumed=resumed, guards=active)
    except (McpError, SuiteError) as exc:  # SuiteError: the MCP server's tools, listed as the run starts
        fail(f"{exc}\nnothing recorded is lost: run `orchestrate ablate {run_dir}` again to resume")
    parent = open_run(run_dir)  # the recorded run the ablation is compared with: its manifest read once
    mismatched = config_matches(parent, store)
    try:
        store.update_manifest(config_mismatch=mismatched)
        rows, markdown, out = write_ablation_report(parent, store)
    except StoreError as exc:  # a link out of the run where the report goes: refused, nothing written there
        fail(str(exc))
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row.as_json()))
        return
    console.print(markdown, highlight=False, soft_wrap=True)
    console.print(f"{executed} case run(s) executed; report: {out}", highlight=False)
    if mismatched:  # the deltas would compare two configs, not a guard: say so and fail
        console.print(f"[red]stack config differs from the parent run in:[/] {', '.join(mismatched)}")
        raise typer.Exit(1)
