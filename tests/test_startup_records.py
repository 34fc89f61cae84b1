"""Startup on a tiny real matrix (llama.cpp b11312 as a local process): each server group of the matrix (one
stack config x the model(s) one process serves; llama.cpp loads one GGUF per process, so one group per model) is
started exactly once, however many cells (modes) it serves, and every start is recorded with its launch,
readiness (model load) and teardown seconds: in `servers.jsonl` (one line per server session, with its phases)
and in the `launches` of each cell it served."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from orchestrator.runner.config.matrix import expand
from orchestrator.runner.config.matrixfile import load_matrix

pytestmark = pytest.mark.integration

MATRIX = """\
name: startup
stacks:
  - {stack: llamacpp, tool_config: jinja, launcher: process, ctx: 1024}
models:
  - name: qwen2.5-coder-0.5b-instruct
    sources: {llamacpp: {asset: qwen2.5-coder-0.5b-instruct}}
  - name: smollm2-135m-instruct
    sources: {llamacpp: {asset: smollm2-135m-instruct}}
modes: [text-tools, constrained]
tasks:
  - {suite: ops, count: 1}
decoding: {temperature: 0.0, max_tokens: 8, seed: 1}
turn_cap: 1
bootstrap: {resamples: 200}
"""
PHASES = ("launch", "readiness", "probe", "seeds", "teardown")


def test_each_server_group_is_started_once_and_its_startup_recorded(tmp_path: Path, llama_server_binary: str) -> None:
    matrix_path = tmp_path / "startup.yaml"
    matrix_path.write_text(MATRIX)
    matrix, _ = load_matrix(matrix_path)
    plans = expand(matrix)
    # Two models on a one-model-per-process stack: two server groups, each serving two cells (the modes).
    assert [(p.stack.label, [m.name for m in p.models], len(p.cells)) for p in plans] == [
        ("llamacpp-jinja", ["qwen2.5-coder-0.5b-instruct"], 2),
        ("llamacpp-jinja", ["smollm2-135m-instruct"], 2),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "matrix", str(matrix_path), "--results", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]

    # servers.jsonl: exactly one server session per (stack config, server group), each started once.
    servers = [json.loads(line) for line in (run / "servers.jsonl").read_text().splitlines()]
    assert sorted((s["stack_config"], tuple(s["models"])) for s in servers) == sorted(
        (p.stack.label, tuple(m.name for m in p.models)) for p in plans
    )
    assert sorted(s["server_id"] for s in servers) == sorted(p.server_id for p in plans)
    for server in servers:
        (launch,) = server["launches"]
        assert launch["reason"] == "initial" and launch["ok"] is True
        assert launch["started"] >= server["started"]
        assert launch["ready_s"] > 0 and launch["start_s"] >= 0 and launch["teardown_s"] >= 0
        phases = server["phases_s"]
        assert set(phases) == set(PHASES) and all(v >= 0 for v in phases.values())
        assert phases["readiness"] == round(launch["ready_s"], 3) and phases["seeds"] > 0
        assert sum(phases.values()) <= server["wall_s"] + 0.01  # the phases are parts of the session's wall

    # Each cell records the one start that served it: shared by the cells of its group, distinct across groups.
    cells = [json.loads(p.read_text()) for p in sorted((run / "cells").glob("*.json"))]
    assert len(cells) == 4 and all(c["status"] == "complete" for c in cells)
    starts_by_group: dict[tuple[str, str], set[tuple[int, str]]] = defaultdict(set)
    for cell in cells:
        (launch,) = cell["launches"]
        assert launch["ok"] is True and launch["ready_s"] > 0 and launch["start_s"] >= 0
        assert cell["timings"]["seeds_s"] > 0 and cell["timings"]["seed_runs"] == 1
        starts_by_group[(cell["stack_label"], cell["model"])].add((launch["server"]["pid"], launch["started"]))
    assert len(starts_by_group) == 2 and all(len(starts) == 1 for starts in starts_by_group.values())
    pids = [pid for starts in starts_by_group.values() for pid, _ in starts]
    assert len(set(pids)) == 2
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)  # every server torn down
