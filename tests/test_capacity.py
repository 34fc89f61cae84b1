"""scripts/capacity.py: the arithmetic on a small synthetic matrix and run, and the committed output
(results/examples/capacity-full/, whose numbers the README quotes) equal to what the script computes now."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("capacity", ROOT / "scripts" / "capacity.py")
assert _spec is not None and _spec.loader is not None
capacity = importlib.util.module_from_spec(_spec)
sys.modules["capacity"] = capacity
_spec.loader.exec_module(capacity)

MODEL = "qwen2.5-coder-0.5b-instruct"
MATRIX = f"""
name: tiny
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process}}
  - {{stack: llamacpp, tool_config: no-jinja, launcher: process}}
models:
  - name: {MODEL}
    quantization: Q4_K_M
    sources:
      llamacpp: {{asset: {MODEL}}}
modes: [native, text-tools]
tasks:
  - {{suite: ops, count: 3}}
turn_cap: 5
"""


def _record(cell: str, seed: str, turn: int, prompt: int | None, completion: int | None, **extra: Any) -> str:
    tokens = None if prompt is None else {"prompt": prompt, "completion": completion}
    body = {"cell_id": cell, "seed": seed, "turn": turn, "model": MODEL, "stack": "llamacpp"}
    body |= {"tools_mode": "text-tools", "tokens": tokens, "latency_s": 1.0, "seed_attempt": 0, **extra}
    return json.dumps(body)


@pytest.fixture
def synthetic(tmp_path: Path) -> tuple[Path, Path]:
    """A run capped at 6: seed a answered 3 requests (prompt 100, 150, 200; completion 10 each), seed b one
    refused request; plus lines the reader must leave out (another model, a channel, a superseded one)."""
    (tmp_path / "tiny.yaml").write_text(MATRIX)
    run = tmp_path / "runs" / "r1"
    (run / "cells").mkdir(parents=True)
    manifest = {"matrix": {"turn_cap": 6, "models": [{"name": MODEL}]}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    lines = [
        _record("c", "a", 0, 100, 10),
        _record("c", "a", 1, 150, 10),
        _record("c", "a", 2, 200, 10),
        _record("c", "b", 0, None, None),
        _record("c", "a", 0, 999, 999, channel="product"),
        _record("c", "a", 0, 999, 999, superseded=True),
        _record("c", "a", 0, 999, 999, model="other"),
    ]
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n")
    cell = {"stack": "llamacpp", "stack_label": "llamacpp-jinja", "model": MODEL}
    cell["launches"] = [{"started": "t0", "ready_s": 4.0}, {"started": "t1", "ready_s": 2.0}]
    (run / "cells" / "c.json").write_text(json.dumps(cell))
    return tmp_path / "tiny.yaml", tmp_path / "runs"


def test_workload_counts_and_tokens(synthetic: tuple[Path, Path]) -> None:
    _, runs = synthetic
    recs = capacity.read_run(runs / "r1", {MODEL}, {"text-tools"})
    assert len(recs) == 4
    w = capacity.workload(recs)
    assert (w.requests, w.seed_runs, w.answered) == (4, 2, 3)
    assert w.requests_per_seed == 2.0  # (3 + 1) / 2
    assert w.capped_share == 0.0
    assert w.prompt_per_request == 112.5  # 450 / 4: the refusal counts 0
    assert w.completion_per_request == 7.5
    assert w.completion_per_answered == 10.0
    assert w.prompt_at_turn0 == pytest.approx(100.0)
    assert w.prompt_growth_per_turn == pytest.approx(50.0)
    lower = capacity.cell_load(w, seeds=6, cap=5, upper=False)
    assert lower == (12.0, 1350.0, 90.0)
    upper = capacity.cell_load(w, seeds=6, cap=5, upper=True)  # 30 requests at 100 + 50 x 2 mean prompt
    assert upper == pytest.approx((30.0, 6000.0, 300.0))
    assert capacity.start_times([runs / "r1"]) == {"llamacpp": {"launches": 2, "median_s": 3.0, "max_s": 4.0}}


def test_plan_counts_servers_cells_and_seed_runs(synthetic: tuple[Path, Path]) -> None:
    matrix_path, _ = synthetic
    matrix, _ = capacity.load_matrix(matrix_path)
    servers = capacity.plan(matrix)
    assert [s["server_id"] for s in servers] == [f"llamacpp-jinja__{MODEL}", f"llamacpp-no-jinja__{MODEL}"]
    assert [len(s["cells"]) for s in servers] == [2, 2]
    assert {cell for s in servers for cell in s["cells"]} == {(MODEL, 3, 5)}


def test_totals_add_up_from_the_rates(synthetic: tuple[Path, Path]) -> None:
    matrix_path, runs = synthetic
    result = capacity.compute(matrix_path, runs, capacity.DEFAULT_RATES)
    lower, upper = result["bounds"]["lower"]["totals"], result["bounds"]["upper"]["totals"]
    assert result["matrix"] | {"name": None} == {
        "name": None,
        "servers": 2,
        "cells": 4,
        "seed_runs": 12,
        "turn_caps": [5],
        "concurrency": 1,
    }
    assert (lower["requests"], lower["prompt_tokens"], lower["completion_tokens"]) == (24.0, 2700.0, 180.0)
    assert (upper["requests"], upper["prompt_tokens"], upper["completion_tokens"]) == (60.0, 12000.0, 600.0)
    rates = capacity.gpu_rates(capacity.yaml.safe_load(capacity.DEFAULT_RATES.read_text()), "llamacpp", MODEL)
    overhead = capacity.yaml.safe_load(capacity.DEFAULT_RATES.read_text())["harness_overhead_s"]["lower"]
    seconds = 2700 / rates["prefill_tps"] + 180 / rates["decode_tps"] + 24 * overhead
    assert lower["gpu_h"] == pytest.approx(seconds / 3600, rel=1e-5)
    assert lower["start_h"] == pytest.approx(2 * 3.0 / 3600, rel=1e-5)


def test_decode_rule_reproduces_its_anchors() -> None:
    rates = capacity.yaml.safe_load(capacity.DEFAULT_RATES.read_text())
    for stack in ("llamacpp", "vllm", "sglang"):
        efficiency, overhead = capacity.decode_fit(rates, stack)
        for anchor in rates["stacks"][stack]["decode_anchors"]:
            bandwidth = rates["gpus"][anchor["gpu"]]["bandwidth_gbs"] * 1e9
            step = anchor["weight_bytes"] / (efficiency * bandwidth) + overhead
            assert 1 / step == pytest.approx(anchor["tokens_per_s"], rel=1e-6)


def test_hosts_pack_and_split() -> None:
    packed = capacity.hosts([(6.0, 0.0), (6.0, 0.0), (3.0, 0.0)], window_h=10.0)
    assert (packed["hosts_1gpu"], packed["hosts_8gpu"], packed["split_servers"]) == (2, 1, 0)
    split = capacity.hosts([(25.0, 1.0)], window_h=10.0)  # 3 parts of 25/3 h, each with its 1 h start
    assert (split["hosts_1gpu"], split["split_servers"]) == (3, 1)
    assert split["longest_stream_h"] == pytest.approx(25 / 3 + 1)


def test_committed_output_is_what_the_script_computes_now() -> None:
    """README "Capacity on paper" copies these files: they must not drift from the script and its inputs."""
    out = capacity.DEFAULT_OUT
    committed = json.loads((out / "capacity.json").read_text())
    assert (out / "capacity.md").read_text() == capacity.render(committed)
    now = json.loads(
        json.dumps(capacity.compute(capacity.DEFAULT_MATRIX, capacity.DEFAULT_RUNS, capacity.DEFAULT_RATES))
    )
    for result in (committed, now):
        result["inputs"].pop("commit")  # the git history may be shallow where tests run; the hashes stay
    assert now == committed
