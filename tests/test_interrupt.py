"""Ctrl-C during a matrix with concurrency > 1 (real llama-server): queued seeds are cancelled at once, the
server is torn down, no running seed writes another record, and `--resume` finishes exactly what is
missing with no duplicated record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.serving.assets import cache_root

pytestmark = pytest.mark.integration
ENV = {**os.environ, "COLUMNS": "250"}
SEEDS = 8
MATRIX = f"""\
name: interrupt
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process, ctx: 1024}}
models:
  - name: smollm2-135m-instruct
    sources: {{llamacpp: {{asset: smollm2-135m-instruct}}}}
modes: [text-tools]
tasks:
  - {{suite: ops, count: {SEEDS}}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 48, seed: 5}}
turn_cap: 3
concurrency: 2
bootstrap: {{resamples: 200}}
"""


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]


def test_ctrl_c_cancels_queued_seeds_and_resume_finishes_them(tmp_path: Path, llama_server_binary: str) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "matrix", str(matrix), "--results", str(results)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        turns = list(results.glob("*/turns.jsonl"))
        if turns and turns[0].read_text().count("\n") >= 1:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    proc.wait(timeout=120)
    took = time.monotonic() - interrupted
    assert proc.returncode != 0
    assert took < 60, f"Ctrl-C took {took:.0f}s: queued seeds were not cancelled"
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    assert not [p for p in (cache_root() / "pids").glob("*.json") if run.name in p.read_text()], "server left"

    before = records(run)
    started = {r["seed"] for r in before}
    ended = {r["seed"] for r in before if r.get("end")}
    assert len(started - ended) <= 2, "only the seeds running at Ctrl-C may be partial"
    assert len(started) < SEEDS, "queued seeds must stay unstarted"

    resumed = subprocess.run(
        [sys.executable, "-m", "orchestrator", "matrix", "--resume", str(run)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = records(run)
    keys = [(r["seed"], r.get("seed_attempt", 0), r["turn"], r["attempt"]) for r in after]
    assert len(keys) == len(set(keys))
    assert sorted(r["seed"] for r in after if r.get("end")) == [f"ops-{i:02d}" for i in range(SEEDS)]
    # The seeds that had finished before Ctrl-C kept their records unchanged.
    kept = [r for r in before if r["seed"] in ended]
    assert [r for r in after if r["seed"] in ended] == kept
