"""The `orchestrate` command line. Thin: parses arguments, calls the core, prints."""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.analysis.report.views import probe_view, run_summary, stats_view
from orchestrator.cli.bootstrapoptions import DEFAULT_RESAMPLES, DEFAULT_RNG_SEED, Resamples, RngSeed
from orchestrator.cli.outcomerows import TurnOutcomeRow, decode_outcome_rows, outcome_frame, run_cells
from orchestrator.core.cell import PRIMARY_AXES
from orchestrator.core.jsonl import InputError, read_jsonl_batches
from orchestrator.core.stats import BootstrapSettings, cell_table
from orchestrator.runner.store.runpaths import StoreError
from orchestrator.serving.registry import load_stack

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure tool calling per serving stack.")
console = Console()
err_console = Console(stderr=True)


def fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command("stats")
def stats_command(
    turns: Annotated[Path, typer.Argument(help="JSONL turn records.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of cells.")] = False,
    resamples: Resamples = DEFAULT_RESAMPLES,
    rng_seed: RngSeed = DEFAULT_RNG_SEED,
) -> None:
    """Per-cell statistics over seeds: per-seed mean, bootstrap CI, pooled figure, flags."""
    try:
        cells = run_cells(turns)
        frame = outcome_frame(
            read_jsonl_batches(turns, TurnOutcomeRow, decode_outcome_rows, fill_defaults=False), str(turns), cells
        )
    except (InputError, StoreError) as exc:
        fail(str(exc))
    keys = ("stack", *PRIMARY_AXES)
    table = cell_table(frame, BootstrapSettings(resamples=resamples, rng_seed=rng_seed), keys=keys)
    if as_json:
        sys.stdout.write(json.dumps(json.loads(table.to_json(orient="records")), indent=2) + "\n")
        return
    console.print(stats_view(table, f"fidelity per cell ({turns})"))


@app.command("assets")
def assets_command(
    what: Annotated[list[str] | None, typer.Argument(help="all | models | llama-server | image | vllm | hf")] = None,
    model: Annotated[list[str] | None, typer.Option(help="Model assets (default: the CPU matrix models).")] = None,
) -> None:
    """Provision the CPU assets (cached, keyed by version) and record their digests."""
    from orchestrator.serving import assets

    wanted = set(what or ["all"])
    known = {"all", "models", "llama-server", "image", "vllm", "hf"}
    if wanted - known:
        fail(f"unknown asset kind(s) {sorted(wanted - known)}; known: {sorted(known)}")
    models = model or list(assets.CPU_MODELS)
    everything = "all" in wanted

    def progress(message: str) -> None:
        err_console.print(f"[cyan]•[/] {message}", highlight=False)

    records = []
    try:
        if everything or "models" in wanted:
            records += [assets.ensure_model(name, progress) for name in models]
        if everything or "llama-server" in wanted:
            records.append(assets.ensure_llama_server(progress))
        if everything or "image" in wanted:
            records.append(assets.ensure_llama_image(load_stack("llamacpp"), progress))
        if everything or "vllm" in wanted:
            records.append(assets.ensure_vllm_venv(progress))
        if everything or "hf" in wanted:
            records += [assets.ensure_hf_dir(name, progress) for name in models]
    except assets.AssetError as exc:
        fail(str(exc))
    path = assets.record_assets(records)
    for record in records:
        console.print(
            f"{record.kind:8} {record.name:32} {record.version:18} {record.sha256 or '-'}  {record.path}",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"recorded in {path}", highlight=False)


@app.command("probe")
def probe_command(
    stack: Annotated[str, typer.Option(help="Stack definition name (stacks/*.yaml).")],
    model: Annotated[list[str], typer.Option(help="Model name(s); a model asset or the served name.")],
    tool_config: Annotated[str | None, typer.Option(help="Named tool configuration of the stack.")] = None,
    launcher: Annotated[str, typer.Option(help="docker | process | attach")] = "process",
    url: Annotated[str | None, typer.Option(help="Base URL of a running server (attach).")] = None,
    model_path: Annotated[str | None, typer.Option(help="Explicit model file/directory.")] = None,
    host: Annotated[str, typer.Option(help="cpu | gpu")] = "cpu",
    network: Annotated[str, typer.Option(help="docker: published (127.0.0.1 ports) | host")] = "published",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """One single-turn tools= request per (stack config, model): status, calls, verdict."""
    from orchestrator.serving.build import server_config
    from orchestrator.serving.handle import LaunchError
    from orchestrator.serving.launchers import install_termination_handler, running_server
    from orchestrator.serving.probe import probe
    from orchestrator.serving.registry import load_stack

    install_termination_handler()
    results = []
    for name in model:
        try:
            config = server_config(
                load_stack(stack),
                stack=stack,
                tool_config=tool_config,
                launcher=launcher,
                model=name,  # type: ignore[arg-type]
                model_path=model_path,
                host=host,
                base_url=url,
                network=network,  # type: ignore[arg-type]
                progress=lambda m: err_console.print(f"[cyan]•[/] {m}", highlight=False),
            )
            with running_server(config, run_id=f"probe-{os.getpid()}") as handle:
                results.append(probe(handle, config))
        except (KeyError, ValueError) as exc:
            fail(str(exc))
        except LaunchError as exc:
            fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in results], indent=2) + "\n")
        return
    console.print(probe_view(results))


@app.command("cleanup")
def cleanup_command(
    run_id: Annotated[str | None, typer.Option(help="What this run started (its run directory's name).")] = None,
    all_runs: Annotated[bool, typer.Option("--all-runs", help="What every run started.")] = False,
) -> None:
    """Remove containers and processes a crashed run left behind (by label / recorded PID): one run's
    (--run-id), or every run's (--all-runs, asked for by name: an empty --run-id is an error, not "all")."""
    from orchestrator.serving.handle import RunIdError
    from orchestrator.serving.launchers import cleanup, cleanup_all_runs

    if (run_id is None) == (not all_runs):
        fail("give --run-id RUN_ID (one run's leftovers) or --all-runs (every run's), not both or neither")
    try:
        removed = cleanup_all_runs() if all_runs else cleanup(str(run_id))
    except RunIdError as exc:
        fail(str(exc))
    for line in removed:
        console.print(f"removed {line}", highlight=False)
    console.print(f"{len(removed)} leftover(s) removed")


@app.command("compose")
def compose_command(
    write: Annotated[bool, typer.Option("--write", help="Write compose/<stack>.yaml.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when compose/ drifted from stacks/.")] = False,
) -> None:
    """Render the GPU-host compose files from the stack definitions."""
    from orchestrator.serving import compose

    if write:
        for path in compose.write_all():
            console.print(f"wrote {path}", highlight=False)
        return
    drifted = []
    for spec in compose.launchable_stacks():
        path = compose.COMPOSE_DIR / f"{spec.name}.yaml"
        text = compose.rendered_text(spec)
        if not path.is_file() or path.read_text() != text:
            drifted.append(str(path))
        if not check:
            sys.stdout.write(f"--- {path}\n{text}")
    if check and drifted:
        fail(f"compose files drifted from stacks/: {', '.join(drifted)}; run `orchestrate compose --write`")


def _load_matrix(path: Path):
    from orchestrator.runner.config.matrixfile import MatrixError, load_matrix

    try:
        return load_matrix(path)
    except MatrixError as exc:
        fail(str(exc))


@app.command("validate")
def validate_command(matrix_file: Annotated[Path, typer.Argument(help="matrices/*.yaml")]) -> None:
    """Check a matrix file and print the servers and cells it expands to; runs nothing."""
    from orchestrator.runner.config.matrix import expand

    matrix, digest = _load_matrix(matrix_file)
    plans = expand(matrix)
    cells = sum(len(p.cells) for p in plans)
    # Table titles and cells are rich markup: a file name such as `[/x].yaml` is printed, not parsed.
    view = Table(title=f"{escape(str(matrix_file))} ({digest[:12]}): {len(plans)} servers, {cells} cells")
    for column in ("server", "launcher", "tool flags", "cell", "seeds"):
        view.add_column(column, overflow="fold")
    for plan in plans:
        flags = " ".join(plan.stack.spec.tool_config(plan.stack.resolved_tool_config).flags) or "—"
        for index, cell in enumerate(plan.cells):
            first = index == 0
            row = (plan.server_id, plan.stack.launcher, flags) if first else ("", "", "")
            view.add_row(*(escape(text) for text in (*row, cell.cell_id, str(len(cell.seeds)))))
    console.print(view)


def _print_wide(store_dir: Path) -> None:
    from orchestrator.analysis.report.htmlreport import INDEX
    from orchestrator.analysis.report.report import write_report
    from orchestrator.runner.store.diskfull import named_writes
    from orchestrator.runner.store.rundir import open_run

    store = open_run(store_dir)
    markdown, results = None, []
    if store.run_manifest().channels:  # first: index.html shows the channel section
        from orchestrator.analysis.product.productreport import write_channel_report

        markdown, results, _written = write_channel_report(store)
    with named_writes(store_dir / "report"):  # a full disk names the report directory
        long, wide, _written = write_report(store)
    run_summary(console, long, wide, store_dir.name, store_dir / "report" / INDEX)
    if markdown is not None:
        from orchestrator.analysis.product.gate import format_gate_results

        console.print(escape(markdown), highlight=False, soft_wrap=True)  # names in it are text, not markup
        if results:
            console.print(escape(format_gate_results(results)), highlight=False, soft_wrap=True)


Command = TypeVar("Command", bound=Callable[..., Any])


def fails_on_full_disk(command: Command) -> Command:
    """A full disk (ENOSPC, EDQUOT, EFBIG) anywhere in a run is one clear error naming the file, no traceback:
    the sweep has stopped and its servers are down (their context managers ran), what was written is intact."""
    from orchestrator.runner.store.diskfull import full_disk_error

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            full = full_disk_error(exc)
            if full is None:
                raise
            run_dir = kwargs.get("resume") or next(
                (p for p in Path(str(full.filename)).parents if (p / "manifest.json").is_file()), None
            )
            then = f"free space, then `orchestrate matrix --resume {run_dir}`" if run_dir else "free space and rerun"
            fail(f"{full}; the sweep stopped, its servers are down, the records written so far are intact: {then}")

    return wrapper  # type: ignore[return-value]


@app.command("matrix")
@fails_on_full_disk
def matrix_command(
    matrix_file: Annotated[Path | None, typer.Argument(help="matrices/*.yaml")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Finish what is missing in RUN_DIR.")] = None,
    results: Annotated[Path, typer.Option(help="Where runs are stored.")] = Path("results"),
    allow_drift: Annotated[
        bool, typer.Option("--allow-drift", help="Resume even if stacks/, seeds/, templates or the commit changed.")
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            help="local (one group after another here) or ray (groups spread over a Ray cluster); "
            "default: the matrix's `executor`."
        ),
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS, else a new local cluster).")
    ] = None,
) -> None:
    """Run a matrix: start each stack, probe, sweep modes over seeds, tear down, print the table."""
    from orchestrator.cli.execution import check_executor, reopen
    from orchestrator.runner.config.resolve import listed_suites
    from orchestrator.runner.executors.dispatch import run_sweep
    from orchestrator.runner.run.runs import recorded_guards, start_run
    from orchestrator.runner.suites.mcperror import McpError
    from orchestrator.runner.suites.tasks import SuiteError
    from orchestrator.runner.turn.guards import GuardConfigError
    from orchestrator.serving.launchers import install_termination_handler

    install_termination_handler()
    if resume is not None:  # the run's own executor unless one is given
        matrix, store, chosen = reopen(resume, allow_drift, lambda m, run: check_executor(executor, address, m, run))
        suites = None  # listed by the sweep: the run directory exists already
    elif matrix_file is not None:
        matrix, digest = _load_matrix(matrix_file)
        chosen = check_executor(executor, address, matrix, None)  # before the run directory exists
        try:
            suites = listed_suites(matrix.suites())  # an MCP suite's tools: a server that will not list them
            store = start_run(matrix, matrix_file, digest, results)
        except (GuardConfigError, SuiteError, McpError) as exc:  # checked before the run directory exists
            fail(str(exc))
    else:
        fail("give a matrix file, or --resume RUN_DIR")
    console.print(f"run {escape(store.run_id)} -> {escape(str(store.dir))}", highlight=False)
    started = time.monotonic()
    guards = recorded_guards(store) if resume is not None else None  # a resume keeps the run's guard set
    try:
        executed = run_sweep(
            matrix, store, console, resumed=resume is not None, guards=guards, executor=chosen, suites=suites
        )
    except (McpError, SuiteError) as exc:  # SuiteError: the MCP server's tools, listed as the run starts
        fail(f"{exc}\nnothing recorded is lost: `orchestrate matrix --resume {store.dir}` once the tool server starts")
    console.print(f"{executed} seed run(s) executed in {time.monotonic() - started:.0f}s", highlight=False)
    _print_wide(store.dir)


@app.command("report")
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="results/<run_id>")],
    reclassify: Annotated[bool, typer.Option("--reclassify", help="Recompute outcomes from raw answers.")] = False,
    allow_damaged: Annotated[
        bool,
        typer.Option(
            "--allow-damaged",
            help="Report what is intact of a damaged run (damaged lines, cell files, a lost manifest), "
            "listing the damage in report/DAMAGE.md.",
        ),
    ] = False,
) -> None:
    """Long and wide tables (CSV, Parquet, Markdown, HTML) and the paper-compatible CSV, from stored results.
    All or nothing: on any error the existing report is left as it was."""
    from orchestrator.analysis.report.drilldown import PAGES_DIR
    from orchestrator.analysis.report.htmlreport import INDEX
    from orchestrator.analysis.report.report import write_report
    from orchestrator.runner.store.rundir import open_run
    from orchestrator.runner.store.runstore import StoreError

    def warn(message: str) -> None:
        err_console.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)

    # No cyclic collection while the report holds a million records: they hold no cycles (refcounting frees
    # them), and each collection would walk them all again (a third of the command's time at 1M turns).
    collecting = gc.isenabled()
    gc.disable()
    store = open_run(run_dir, recover=allow_damaged, warn=warn)
    try:
        written = []
        if store.run_manifest().channels:  # first: index.html shows the channel section
            from orchestrator.analysis.product.productreport import write_channel_report

            written += write_channel_report(store)[2]
        long, wide, tables = write_report(store, do_reclassify=reclassify)
        written += tables
    except StoreError as exc:
        fail(str(exc))
    except (KeyError, TypeError, ValueError) as exc:  # a readable record or cell lacking what the report needs
        fail(f"{run_dir}: the stored results cannot be reported ({type(exc).__name__}: {exc}); report left as it was")
    except OSError as exc:
        fail(f"{run_dir}: cannot write the report: {exc}; report left as it was")
    finally:
        if collecting:
            gc.enable()
    pages = sum(path.parent.name == PAGES_DIR for path in written)
    where = escape(str(run_dir / "report"))
    console.print(f"wrote {len(written)} files in {where} ({pages} cell pages)", highlight=False, soft_wrap=True)
    run_summary(console, long, wide, run_dir.name, run_dir / "report" / INDEX)
    if store.damage:
        warn(f"{len(store.damage)} damaged thing(s) in {run_dir}: listed in {run_dir / 'report' / 'DAMAGE.md'}")


# Commands that explain a finished run live in their own modules; importing them registers them on `app`.
from orchestrator.cli import (  # noqa: E402,F401
    audit_command,
    classify_command,
    diff_command,
    images_command,
    product_commands,
    triage_command,
)
