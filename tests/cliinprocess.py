"""`orchestrate ...` run in this process with typer's CliRunner, answered as a CompletedProcess (returncode, stdout,
stderr) so a test written against the real console script reads the same. For commands that start no server:
they then belong to the fast tier (no interpreter start, no import of the package per call).

A test about the process itself (signals, the exit status the shell sees, stdin as a pipe, the environment of a
child) keeps its subprocess and is marked slow."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app, console, err_console

WIDE = {"COLUMNS": "200"}  # rich wraps tables to the terminal width, read from COLUMNS when it prints


def orchestrate(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI's exit status, stdout and stderr. An exception the CLI does not turn into an exit status propagates
    (catch_exceptions=False): a crash fails the test with its traceback, as it would have shown one on stderr."""
    runner = CliRunner()
    environment = dict(env or WIDE)
    with (
        _signal_handlers_kept(),
        _console_width(environment.get("COLUMNS")),
        contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext(),
    ):
        result = runner.invoke(app, list(args), env=environment, input=input, catch_exceptions=False,
                               prog_name="orchestrate")  # fmt: skip
    return subprocess.CompletedProcess(["orchestrate", *args], result.exit_code, result.stdout, result.stderr)


@contextlib.contextmanager
def _console_width(columns: str | None) -> Iterator[None]:
    """A process's console reads its width from COLUMNS (or its terminal); in-process, the CLI's consoles were made
    when pytest imported them, under whatever terminal pytest has (an xdist worker's pty among them): the width the
    call asks for is set on them for the call, and what they had put back."""
    kept = [(c, c._width) for c in (console, err_console)]  # rich keeps a fixed width in _width; None: ask
    try:
        for target, _ in kept:
            target._width = int(columns) if columns and columns.isdigit() else None
        yield
    finally:
        for target, width in kept:
            target._width = width


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """`matrix` installs its SIGTERM/SIGINT handlers (serving.launchers.install_termination_handler) for the life of
    its process; here that process is pytest's, so they are put back after the call."""
    kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler)
