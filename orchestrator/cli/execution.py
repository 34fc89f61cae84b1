"""How `orchestrate matrix` opens a run to resume, and which executor it asks for: `local` (one group after
another in this process) or `ray` (spread over a Ray cluster). Both are checked before a run directory is made
or a resume touches one; running the sweep is runner/executors/dispatch.py's (`run_sweep`), which records the executor
in the manifest (a resume: in its entry)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.cli import fail
from orchestrator.runner.executors.dispatch import EXECUTORS, ExecutorChoice, connect


def recorded_executor(manifest: dict[str, Any]) -> dict[str, Any]:
    """The executor a run last ran with (its latest resume's, else its own); {} for runs from before it was kept."""
    for resume in reversed(manifest.get("resumes") or []):
        if isinstance(resume, dict) and isinstance(resume.get("executor"), dict):
            return dict(resume["executor"])
    return dict(manifest.get("executor") or {})


def check_tracing() -> None:
    """One clear error (exit 2) when the environment asks for traces and OpenTelemetry is not installed."""
    from orchestrator.runner.turn.tracing import TracingUnavailable, check_available

    try:
        check_available()
    except TracingUnavailable as exc:
        fail(str(exc))


def check_executor(
    executor: str | None, address: str | None, matrix: Any, manifest: dict[str, Any] | None
) -> ExecutorChoice:
    """The executor and address to use (given, else the run's recorded ones on a resume, else the matrix's),
    checked usable here, Ray's cluster joined, or one clear error (exit 2): before a run directory exists. Traces
    an OTLP endpoint asks for are checked here too (the `otel` extra installed)."""
    check_tracing()
    recorded = recorded_executor(manifest) if manifest is not None else {}
    chosen = executor or recorded.get("kind") or matrix.executor
    if chosen not in EXECUTORS:
        fail(f"--executor {chosen!r}: one of {', '.join(EXECUTORS)}")
    if chosen == "local" and address:
        fail("--address is for --executor ray")
    if chosen == "local":
        return ExecutorChoice()
    address = address or (recorded.get("address") if not executor or executor == recorded.get("kind") else None)
    choice = ExecutorChoice(chosen, address)
    try:
        connect(choice)
    except ImportError as exc:
        fail(f"the Ray executor needs Ray: pip install -e '.[ray]' ({exc})")
    except Exception as exc:  # an unreachable cluster: said before anything is made
        fail(f"cannot join the Ray cluster at {address or 'RAY_ADDRESS / the local default'}: {exc}")
    return choice


def reopen(resume: Path, allow_drift: bool, check: Callable[[Any, dict[str, Any]], Any]) -> tuple[Any, Any, Any]:
    """The matrix and store of a run to resume, and what `check(matrix, manifest)` returns: all judged before
    the resume changes anything in the run."""
    from orchestrator.core.redact import REDACTED
    from orchestrator.runner.run.runs import DriftError, recorded_matrix, resume_run
    from orchestrator.runner.store.runstore import RunStore, StoreError
    from orchestrator.serving.handle import RunIdError

    try:
        manifest = RunStore(resume).manifest()
        matrix = recorded_matrix(resume, manifest, allow_drift=allow_drift, launch=True)  # the run's own stacks
        if any(REDACTED in arg for stack in matrix.stacks for arg in stack.extra_args):
            fail(
                f"{resume}/manifest.json: the matrix passed a secret in extra_args, which the run did not store; "
                "a resume cannot restore it: pass it as `${NAME}` (read from the environment at launch)"
            )
        checked = check(matrix, manifest)
        return matrix, resume_run(resume, allow_drift=allow_drift), checked
    except (StoreError, DriftError, KeyError) as exc:
        fail(str(exc))
    except RunIdError as exc:
        fail(f"{resume}: {exc}")
    except ValidationError as exc:
        fail(f"{resume}/manifest.json: its matrix no longer validates: {exc.errors()[0]['msg']}")
    raise AssertionError("unreachable")  # fail() exits
