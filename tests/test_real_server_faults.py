"""Faults done to real servers from outside, while a real matrix runs (loopback only, each bounded in time):

- a llama-server *container* SIGKILLed mid-seed (`docker kill`): the turn is `non_response` with its error,
  the seed ends `server_died`, a new container starts, the seed reruns under its next seed attempt (the aborted
  records kept, superseded), the run finishes and no container of the run is left;
- a llama-server process that hangs (SIGSTOP: its socket stays open, nothing answers): each request ends at the
  matrix's `request_s`, the retries run out, the seed ends `retries_exhausted` (the process is alive, so it is no
  death), the next seed meets the same, and the run ends within the bound its timeouts give; the stopped server
  is killed at teardown. (The planted death of a process is tests/test_server_death.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.serving.assets import cache_root
from orchestrator.serving.handle import LABEL_RUN
from orchestrator.serving.launchers import cleanup
from orchestrator.serving.registry import load_stack
from orchestrator.serving.render import RENDER_TIMEOUT_S

pytestmark = pytest.mark.integration
QWEN = "qwen2.5-coder-0.5b-instruct"
REQUEST_S = 4.0
MATRIX = """\
name: {name}
stacks:
  - {{stack: llamacpp, tool_config: jinja, {launcher}, ctx: 1024}}
models:
  - name: {model}
    sources: {{llamacpp: {{asset: {model}}}}}
modes: [text-tools]
tasks:
  - {{suite: ops, count: 2}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 40, seed: 3}}
turn_cap: 3
timeouts: {{request_s: {request_s}, ready_s: 300}}
retries: {{max_attempts: 2, backoff_s: 0.2}}
bootstrap: {{resamples: 200}}
"""


def records(run: Path) -> list[dict]:
    path = run / "turns.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_matrix(tmp_path: Path, name: str, launcher: str) -> tuple[subprocess.Popen[str], Path]:
    matrix = tmp_path / f"{name}.yaml"
    matrix.write_text(MATRIX.format(name=name, launcher=launcher, model=QWEN, request_s=REQUEST_S))
    results = tmp_path / "r"
    log = (tmp_path / "orchestrate.log").open("w")
    argv = [sys.executable, "-m", "orchestrator", "matrix", str(matrix), "--results", str(results)]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True), results


def wait_for_records(process: subprocess.Popen[str], results: Path, count: int, limit_s: float = 300) -> Path:
    """The run directory once it holds `count` turn records (the run still going)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before the fault could be done to it"
        runs = [p for p in results.iterdir() if p.is_dir()] if results.is_dir() else []
        if runs and len(records(runs[0])) >= count:
            return runs[0]
        time.sleep(0.05)
    raise AssertionError(f"no {count} records within {limit_s}s")


def server_pids(run_id: str) -> list[int]:
    found = []
    for path in (cache_root() / "pids").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if record.get("run_id") == run_id:
                found.append(int(record["pid"]))
    return found


def test_a_container_killed_mid_seed_is_restarted_and_its_seed_rerun(
    tmp_path: Path, docker_client, fault_counts: Callable[[str], None]
) -> None:
    process, results = start_matrix(tmp_path, "container-kill", "launcher: docker, network: host")
    run = None
    try:
        run = wait_for_records(process, results, 1)
        (container,) = docker_client.containers.list(filters={"label": f"{LABEL_RUN}={run.name}"})
        container.kill(signal="SIGKILL")
        assert process.wait(timeout=600) == 0, (tmp_path / "orchestrate.log").read_text()[-3000:]
        rows = records(run)
        died = [r for r in rows if r.get("end") == "server_died"]
        # The seed under the kill dies; a seed started on the dead server before the restart dies too.
        assert died and all(r["outcome"] == "non_response" and r["error"] for r in died)
        assert died[0]["seed"] == rows[0]["seed"], "the seed running at the kill ends server_died"
        for seed in {r["seed"] for r in died}:
            aborted = [r for r in rows if r["seed"] == seed and (r.get("seed_attempt") or 0) == 0]
            assert aborted and all(r.get("superseded") for r in aborted)
            rerun = [r for r in rows if r["seed"] == seed and r.get("seed_attempt") == 1]
            assert rerun and not any(r.get("superseded") for r in rerun)
            assert rerun[-1].get("end") not in (None, "server_died")
        seed = died[0]["seed"]
        aborted = [r for r in rows if r["seed"] == seed and (r.get("seed_attempt") or 0) == 0]
        rerun = [r for r in rows if r["seed"] == seed and r.get("seed_attempt") == 1]
        cell = json.loads(next((run / "cells").glob("*.json")).read_text())
        assert cell["status"] == "complete"
        assert [launch["ok"] for launch in cell["launches"]] == [True, True]
        assert cell["launches"][0]["server"]["image_id"] == cell["launches"][1]["server"]["image_id"]
        launches = len(cell["launches"])
        fault_counts(
            f"killed container {container.short_id} after {len(aborted)} record(s) of {seed}; {len(rows)} records, "
            f"{len(died)} seed(s) ended server_died, {len(rerun)} rerun record(s) of {seed}, launches {launches}"
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if run is not None:
            cleanup(run.name)
            assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run.name}"}) == []


def test_a_hung_server_costs_its_timeouts_and_the_run_ends(
    tmp_path: Path, llama_server_binary: str, fault_counts: Callable[[str], None]
) -> None:
    process, results = start_matrix(tmp_path, "hang", f"launcher: process, binary: {llama_server_binary}")
    run, pid = None, None
    try:
        run = wait_for_records(process, results, 1)
        (pid,) = server_pids(run.name)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        # Bound, from the limits each request runs under: a prompt count in flight at the stop (up to 3 render
        # requests), then per seed its cache reset (the stack's step timeout) and max_attempts chat requests of
        # REQUEST_S, then teardown (SIGTERM waits 15 s on a stopped process, then SIGKILL), plus 30 s slack.
        step_s = load_stack("llamacpp").prompt_cache.clear[0].timeout_s
        bound = 3 * RENDER_TIMEOUT_S + 2 * (step_s + 2 * (REQUEST_S + 0.2)) + 15 + 30
        assert process.wait(timeout=bound) == 0, (tmp_path / "orchestrate.log").read_text()[-3000:]
        took = time.monotonic() - stopped
        rows = records(run)
        before = len([r for r in rows if r.get("latency_s") is not None and r["outcome"] != "non_response"])
        hung = [r for r in rows if r["outcome"] == "non_response"]
        assert before >= 1 and hung
        assert all(r["detail"].startswith("transport:") for r in hung), {r["detail"] for r in hung}
        assert all(r["latency_s"] <= REQUEST_S + 2 for r in hung), [r["latency_s"] for r in hung]
        ends = {r["seed"]: r["end"] for r in rows if r.get("end")}
        assert sorted(ends) == ["ops-00", "ops-01"] and "retries_exhausted" in ends.values()
        assert "server_died" not in ends.values()  # alive, only silent: no death, no restart
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest.get("finished")
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        fault_counts(
            f"SIGSTOP after {before} answered turn(s); {len(hung)} timed-out attempts of <= {REQUEST_S}s; "
            f"ends {ends}; the run ended {took:.0f}s after the stop (bound {bound:.0f}s)"
        )
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
        if run is not None:
            cleanup(run.name)
