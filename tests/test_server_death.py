"""A planted llama-server death (tests/faults/dying-llama-server: the real binary, SIGKILLed when its Nth
request starts) mid-seed: the running seeds end `server_died`, never as finished; the sweep restarts the
server once and reruns them, keeping the aborted records marked superseded; a second death marks the cell
`server_died`, and `--resume` reruns those seeds until they finish."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

FAULTS = Path(__file__).resolve().parent / "faults"
pytestmark = pytest.mark.integration

MATRIX = """\
name: death
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process, ctx: 1024, binary: {binary}}}
models:
  - name: {model}
    sources: {{llamacpp: {{asset: {model}}}}}
modes: [text-tools]
tasks:
  - {{suite: ops, count: 2}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 40, seed: 3}}
turn_cap: 3
retries: {{max_attempts: 2, backoff_s: 0.2}}
bootstrap: {{resamples: 200}}
"""
QWEN, SMOLLM = "qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"


def cell_file(run: Path, model: str) -> dict:
    return json.loads((run / "cells" / f"llamacpp-jinja__{model}__text-tools.json").read_text())


def orchestrate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env, timeout=900
    )


def setup(tmp_path: Path, llama_server_binary: str, plan: list[int], model: str) -> tuple[dict[str, str], Path]:
    plan_file = tmp_path / "plan"
    plan_file.write_text("".join(f"{n}\n" for n in plan))
    env = {**os.environ, "TOOLCALL_FAULT_BINARY": llama_server_binary, "TOOLCALL_FAULT_PLAN": str(plan_file)}
    matrix = tmp_path / "death.yaml"
    matrix.write_text(MATRIX.format(binary=FAULTS / "dying-llama-server", model=model))
    return env, matrix


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]


def only_run(results: Path) -> Path:
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return run


def test_a_server_that_dies_once_is_restarted_and_its_seeds_rerun(tmp_path: Path, llama_server_binary: str) -> None:
    # Qwen calls tools in text-tools mode, so its first seed runs several turns: request 1 is the probe,
    # 2 is the first seed's turn 0, and the server dies under its turn 1: mid-seed.
    env, matrix = setup(tmp_path, llama_server_binary, [3, 0], QWEN)
    done = orchestrate(env, "matrix", str(matrix), "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run(tmp_path / "r")
    rows = records(run)
    died = [r for r in rows if r.get("end") == "server_died"]
    assert died, "the planted death must end a running seed as server_died"
    assert all(r["outcome"] == "non_response" for r in died)
    # Every record of an aborted run is kept and marked superseded; each seed finished exactly once.
    aborted = [r for r in rows if r.get("seed_attempt", 0) == 0 and r["seed"] in {d["seed"] for d in died}]
    assert aborted and all(r.get("superseded") for r in aborted)
    assert any(r["turn"] > 0 for r in died), "the death should fall mid-seed (after the seed's first turn)"
    finished = [r for r in rows if r.get("end") and not r.get("superseded")]
    assert sorted(r["seed"] for r in finished) == ["ops-00", "ops-01"]
    assert all(r["end"] != "server_died" for r in finished)
    cell = cell_file(run, QWEN)
    assert cell["status"] == "complete"
    assert [launch["ok"] for launch in cell["launches"]] == [True, True]
    assert "died" in cell["launches"][1]["reason"]
    long = pd.read_csv(run / "report" / "cells_long.csv").iloc[0]
    counted = [r for r in rows if not r.get("superseded")]
    eligible = [r for r in counted if r["outcome"] not in ("rejected_request", "non_response")]
    assert long["n_turn_records"] - long["n_superseded_records"] == len(counted)
    assert long["n_eligible_turns"] == len(eligible)  # the aborted run's turns are not in the denominator


def test_a_second_death_marks_the_cell_and_resume_reruns_it(tmp_path: Path, llama_server_binary: str) -> None:
    # The restarted server dies at its first request, so a rerun seed dies again.
    env, matrix = setup(tmp_path, llama_server_binary, [3, 1, 0], SMOLLM)
    done = orchestrate(env, "matrix", str(matrix), "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run(tmp_path / "r")
    cell = cell_file(run, SMOLLM)
    assert cell["status"] == "server_died"
    long = pd.read_csv(run / "report" / "cells_long.csv").iloc[0]
    assert long["text"].endswith("server_died") and long["seeds_server_died"] >= 1
    unfinished = {r["seed"] for r in records(run) if r.get("end") == "server_died" and not r.get("superseded")}
    assert unfinished

    resumed = orchestrate(env, "matrix", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = records(run)
    live = [r for r in rows if not r.get("superseded")]
    assert not [r for r in live if r.get("end") == "server_died"]
    assert sorted(r["seed"] for r in live if r.get("end")) == ["ops-00", "ops-01"]
    assert {r.get("seed_attempt", 0) for r in live if r["seed"] in unfinished} == {2}
    cell = cell_file(run, SMOLLM)
    assert cell["status"] == "complete"
    assert len(cell["launches"]) == 3 and cell["launches"][0]["reason"] == "initial"
    again = orchestrate(env, "matrix", "--resume", str(run))
    assert "0 seed run(s) executed" in again.stdout


def test_a_restart_that_fails_marks_cells_and_the_matrix_finishes(tmp_path: Path, llama_server_binary: str) -> None:
    """The server dies, and every restart fails: the running cell ends `server_died` with the error, the next
    cell (another mode on the same server) is `launch_failed`, and the matrix still finishes."""
    env, matrix = setup(tmp_path, llama_server_binary, [3, -1, -1, -1], SMOLLM)
    matrix.write_text(matrix.read_text().replace("modes: [text-tools]", "modes: [text-tools, native]"))
    done = orchestrate(env, "matrix", str(matrix), "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run(tmp_path / "r")
    first = cell_file(run, SMOLLM)
    assert first["status"] == "server_died"
    assert "server exited while waiting" in first["error"]  # the failed restart's own complaint
    assert [launch["ok"] for launch in first["launches"]] == [True, False]
    second = json.loads((run / "cells" / f"llamacpp-jinja__{SMOLLM}__native.json").read_text())
    assert second["status"] == "launch_failed"
    assert [launch["ok"] for launch in second["launches"]] == [False]
