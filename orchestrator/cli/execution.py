"""How `orchestrate matrix` opens a run to resume, and which executor runs its server groups: `local` (one
after another in this process) or `ray` (spread over a Ray cluster by runner/rayexecutor.py, the only module
that imports Ray). Both are checked before a run directory is made or a resume touches one; the executor used
is recorded in the manifest (a resume: in its entry)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.cli import fail

EXECUTORS = ("local", "ray")


def check_executor(executor: str, address: str | None) -> str:
    """The executor, usable here, or one clear error (exit 2)."""
    if executor not in EXECUTORS:
        fail(f"--executor {executor!r}: one of {', '.join(EXECUTORS)}")
    if executor == "local" and address:
        fail("--address is for --executor ray")
    if executor == "ray":
        try:
            import orchestrator.runner.rayexecutor  # noqa: F401  # Ray imported here and only here
        except ImportError as exc:
            fail(f"the Ray executor needs Ray: pip install -e '.[ray]' ({exc})")
    return executor


def execute(sweep: Any, executor: str, address: str | None, *, resumed: bool) -> int:
    """Record the executor in the run's manifest, then run the sweep here or its groups on the cluster."""
    entry = {"kind": executor, "address": address}
    store = sweep.store
    if resumed and store.manifest().get("resumes"):
        resumes = store.manifest()["resumes"]
        store.update_manifest(resumes=[*resumes[:-1], {**resumes[-1], "executor": entry}])
    else:
        store.update_manifest(executor=entry)
    if executor == "local":
        return int(sweep.run())
    from orchestrator.runner.rayexecutor import RayExecutor

    return RayExecutor(sweep, address).run()


def reopen(resume: Path, allow_drift: bool, check: Callable[[Any], Any]) -> tuple[Any, Any]:
    """The matrix and store of a run to resume; the matrix (and `check` on it) judged before the resume
    changes anything in the run."""
    from orchestrator.core.redact import REDACTED
    from orchestrator.runner.matrix import Matrix
    from orchestrator.runner.runs import DriftError, resume_run
    from orchestrator.runner.store import RunStore, StoreError

    try:
        matrix = Matrix.model_validate(RunStore(resume).manifest()["matrix"])
        if any(REDACTED in arg for stack in matrix.stacks for arg in stack.extra_args):
            fail(
                f"{resume}/manifest.json: the matrix passed a secret in extra_args, which the run did not store; "
                "a resume cannot restore it: pass it as `${NAME}` (read from the environment at launch)"
            )
        check(matrix)
        return matrix, resume_run(resume, allow_drift=allow_drift)
    except (StoreError, DriftError, KeyError) as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"{resume}/manifest.json: its matrix no longer validates: {exc.errors()[0]['msg']}")
    raise AssertionError("unreachable")  # fail() exits
