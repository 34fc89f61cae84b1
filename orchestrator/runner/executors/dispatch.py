"""The one way a sweep runs, for `orchestrate matrix` and `orchestrate ablate` alike: the executor recorded in
the run's manifest, the sweep run here (`local`) or its server groups spread over a Ray cluster (`ray`, where
each group runs the same Sweep on its node: runner/executors/rayexecutor.py, the only module that imports Ray), the
store closed, and the run's end recorded. The CLI parses arguments and calls `run_sweep`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console

from orchestrator.runner.config.matrix import Matrix
from orchestrator.runner.run.runs import finish_run
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.sweep.sweep import Sweep

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class ExecutorChoice:
    kind: str = "local"  # one of EXECUTORS
    address: str | None = None  # the Ray cluster's; None: RAY_ADDRESS, else a new local cluster


def connect(choice: ExecutorChoice) -> None:
    """Join the chosen executor's cluster (nothing to join for `local`); raises what joining raised."""
    if choice.kind == "ray":
        from orchestrator.runner.executors.rayexecutor import connect as join  # Ray imported here and only here

        join(choice.address)


def record_executor(store: RunStore, choice: ExecutorChoice, *, resumed: bool) -> None:
    """The executor in the run's manifest (a resume: in its own entry, the first run's left as it was)."""
    entry = {"kind": choice.kind, "address": choice.address}
    resumes = store.manifest().get("resumes") if resumed else None
    if resumes:
        store.update_manifest(resumes=[*resumes[:-1], {**resumes[-1], "executor": entry}])
    else:
        store.update_manifest(executor=entry)


def run_sweep(
    matrix: Matrix,
    store: RunStore,
    console: Console,
    *,
    resumed: bool,
    guards: frozenset[str] | None = None,
    executor: ExecutorChoice | None = None,
    suites: dict[str, Suite] | None = None,
) -> int:
    """Run what is left of the run; returns the seed runs executed. `suites`: the run's suites as offered (MCP
    tools listed before the run directory was made); none: listed here. The run's end is recorded only when the
    sweep returns: an exception leaves the run resumable, its store closed, and a sweep that could not be made
    (its MCP server's tools unlisted) records no executor."""
    choice = executor or ExecutorChoice()
    started = time.monotonic()
    try:
        sweep = Sweep(matrix, store, console, guards=guards, suites=suites)
        record_executor(store, choice, resumed=resumed)
        if choice.kind == "local":
            executed = int(sweep.run())
        else:
            from orchestrator.runner.executors.rayexecutor import RayExecutor

            executed = RayExecutor(sweep, choice.address).run()
    finally:
        store.close()
    finish_run(store, wall_s=round(time.monotonic() - started, 1), resumed=resumed)
    return executed
