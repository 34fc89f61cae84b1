"""`servers.jsonl`: one line per server session of a run, written when the session ends: the stack config and
model(s) it served, its cells, each start (with its launch, readiness and teardown seconds) and the seconds each
phase took (launch, readiness, probe, seeds, teardown). benchmarks/overhead.py reads it for the phase shares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.runner.config.matrix import ServerPlan
from orchestrator.runner.store.diskfull import append_line, named_writes
from orchestrator.runner.store.runstore import now
from orchestrator.runner.sweep.session import ServerSession

SERVERS_FILE = "servers.jsonl"


def record_server(
    run_dir: Path, plan: ServerPlan, session: ServerSession, phase_s: dict[str, float], started: str, wall_s: float
) -> None:
    """Append the session's line; `phase_s`: the seconds the sweep spent per phase of its own (probe, seeds)."""
    launches = session.launches
    phases = {
        "launch": sum(launch.get("start_s") or 0.0 for launch in launches),
        "readiness": sum(launch.get("ready_s") or 0.0 for launch in launches),
        **phase_s,
        "teardown": sum(launch.get("teardown_s") or 0.0 for launch in launches),
    }
    record: dict[str, Any] = {
        "server_id": plan.server_id,
        "stack_config": plan.stack.label,
        "stack": plan.stack.stack,
        "models": [model.name for model in plan.models],
        "cells": [cell.cell_id for cell in plan.cells],
        "started": started,
        "finished": now(),
        "wall_s": round(wall_s, 3),
        "phases_s": {name: round(value, 3) for name, value in phases.items()},
        "launches": [{k: v for k, v in launch.items() if k != "server"} for launch in launches],
    }
    path = run_dir / SERVERS_FILE
    with named_writes(path), path.open("ab", buffering=0) as out:  # a full disk: DiskFull naming the file
        append_line(out, (json.dumps(record, default=str) + "\n").encode(), path)
