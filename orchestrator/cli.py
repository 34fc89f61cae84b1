"""The `orchestrate` command line. Thin: parses arguments, calls the core, prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table

from orchestrator.classify import classify
from orchestrator.jsonl import InputError, read_jsonl
from orchestrator.registry import UnknownStackError, load_stack
from orchestrator.stats import BootstrapSettings, cell_table
from orchestrator.types import ToolsMode, TransportError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure tool calling per serving stack.")
console = Console()
err_console = Console(stderr=True)


def fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


class Exchange(BaseModel):
    """One request/reply to classify (the input of `orchestrate classify`)."""

    model_config = ConfigDict(extra="ignore")
    id: Any
    stack: str
    mode: ToolsMode
    tools: list[Any]
    http_status: int | None
    body: Any = None
    error: TransportError | None = None


class TurnOutcomeRow(BaseModel):
    """The fields `orchestrate stats` needs from a turn record."""

    model_config = ConfigDict(extra="ignore")
    stack: str
    model: str
    tools_mode: ToolsMode
    seed: str | int
    turn: int
    outcome: str


@app.command("classify")
def classify_command(
    exchanges: Annotated[Path, typer.Argument(help="JSONL: one exchange per line.")],
) -> None:
    """Label each exchange with one outcome; writes one JSON object per line."""
    try:
        for number, exchange in read_jsonl(exchanges, Exchange):
            try:
                refusals = load_stack(exchange.stack).refusals
            except UnknownStackError as exc:
                raise InputError(f"{exchanges}:{number}: field 'stack': {exc}") from exc
            verdict = classify(
                refusals=refusals,
                mode=exchange.mode,
                tools=exchange.tools,
                http_status=exchange.http_status,
                body=exchange.body,
                transport_error=exchange.error,
            )
            row = {"id": exchange.id, **verdict.model_dump(mode="json", include=_CLASSIFY_FIELDS)}
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    except InputError as exc:
        fail(str(exc))


_CLASSIFY_FIELDS = {"outcome", "detail", "parse_path", "calls", "text_call_recoverable"}


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


@app.command("stats")
def stats_command(
    turns: Annotated[Path, typer.Argument(help="JSONL turn records.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of cells.")] = False,
    resamples: Annotated[int, typer.Option(min=1, help="Bootstrap resamples.")] = BootstrapSettings().resamples,
    rng_seed: Annotated[int, typer.Option(help="Bootstrap RNG seed (recorded).")] = BootstrapSettings().rng_seed,
) -> None:
    """Per-cell statistics over seeds: per-seed mean, bootstrap CI, pooled figure, flags."""
    try:
        rows = [record.model_dump(mode="json") for _, record in read_jsonl(turns, TurnOutcomeRow)]
    except InputError as exc:
        fail(str(exc))
    for row in rows:
        row["seed"] = str(row["seed"])
    table = cell_table(rows, BootstrapSettings(resamples=resamples, rng_seed=rng_seed))
    if as_json:
        sys.stdout.write(json.dumps(json.loads(table.to_json(orient="records")), indent=2) + "\n")
        return
    view = Table(title=f"fidelity per cell ({turns})")
    for column in (
        "stack",
        "model",
        "mode",
        "per-seed",
        "95% CI",
        "pooled",
        "seeds",
        "eligible",
        "rej",
        "non-resp",
        "flags",
    ):
        view.add_column(column)
    for cell in table.itertuples():
        flags = [name for name in ("pooled_gap", "few_seeds") if getattr(cell, name)]
        interval = "—" if cell.ci_low is None else f"[{cell.ci_low:.3f}, {cell.ci_high:.3f}]"
        mean = "undefined" if cell.status == "undefined" else _fmt(cell.per_seed_mean)
        view.add_row(
            cell.stack,
            cell.model,
            cell.tools_mode,
            mean,
            interval,
            _fmt(cell.pooled),
            str(cell.n_seeds),
            str(cell.n_eligible_turns),
            str(cell.n_rejected),
            str(cell.n_non_response),
            " ".join(flags),
        )
    console.print(view)
