"""scripts/capacity.py: the arithmetic on a small synthetic matrix and run, the decode rule against its anchors
and held-out figures, the committed output (results/examples/capacity-full/) equal to what the script computes
now, and the README's "Capacity on paper" section equal to what the script renders from that output."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # capacity.py imports its sibling modules
_spec = importlib.util.spec_from_file_location("capacity", ROOT / "scripts" / "capacity.py")
assert _spec is not None and _spec.loader is not None
capacity = importlib.util.module_from_spec(_spec)
sys.modules["capacity"] = capacity
_spec.loader.exec_module(capacity)
capacity_model = sys.modules["capacity_model"]
capacity_workload = sys.modules["capacity_workload"]

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
    recs = capacity_workload.read_run(runs / "r1", {MODEL}, {"text-tools"})
    assert len(recs) == 4
    w = capacity_workload.workload(recs)
    assert (w.requests, w.seed_runs, w.answered) == (4, 2, 3)
    assert w.requests_per_seed == 2.0  # (3 + 1) / 2
    assert w.capped_share == 0.0
    assert w.prompt_per_request == 112.5  # 450 / 4: the refusal counts 0
    assert w.completion_per_request == 7.5
    assert w.completion_per_answered == 10.0
    assert w.prompt_at_turn0 == pytest.approx(100.0)
    assert w.prompt_growth_per_turn == pytest.approx(50.0)
    lower = capacity_model.cell_load(w, seeds=6, cap=5, upper=False)
    assert lower == (12.0, 1350.0, 90.0)
    upper = capacity_model.cell_load(w, seeds=6, cap=5, upper=True)  # 30 requests at 100 + 50 x 2 mean prompt
    assert upper == pytest.approx((30.0, 6000.0, 300.0))
    assert capacity_workload.start_times([runs / "r1"]) == {"llamacpp": {"launches": 2, "median_s": 3.0, "max_s": 4.0}}


def test_plan_counts_servers_cells_and_seed_runs(synthetic: tuple[Path, Path]) -> None:
    matrix_path, _ = synthetic
    matrix, _ = capacity_model.load_matrix(matrix_path)
    servers = capacity_model.plan(matrix)
    assert [s["server_id"] for s in servers] == [f"llamacpp-jinja__{MODEL}", f"llamacpp-no-jinja__{MODEL}"]
    assert [len(s["cells"]) for s in servers] == [2, 2]
    assert {cell for s in servers for cell in s["cells"]} == {(MODEL, 3, 5)}


@pytest.mark.slow
def test_totals_add_up_from_the_rates(synthetic: tuple[Path, Path]) -> None:
    matrix_path, runs = synthetic
    result = capacity_model.compute(matrix_path, runs, capacity_model.DEFAULT_RATES)
    lower, upper = result["bounds"]["lower"]["totals"], result["bounds"]["upper"]["totals"]
    assert result["matrix"] | {"name": None} == {
        "name": None,
        "servers": 2,
        "cells": 4,
        "seed_runs": 12,
        "turn_caps": [5],
        "concurrency": 1,
        "modes": ["native", "text-tools"],
        "models": [{"name": MODEL, "params_b": 0.49}],
    }
    assert (lower["requests"], lower["prompt_tokens"], lower["completion_tokens"]) == (24.0, 2700.0, 180.0)
    assert (upper["requests"], upper["prompt_tokens"], upper["completion_tokens"]) == (60.0, 12000.0, 600.0)
    rates = capacity_model.gpu_rates(yaml.safe_load(capacity_model.DEFAULT_RATES.read_text()), "llamacpp", MODEL)
    overhead = yaml.safe_load(capacity_model.DEFAULT_RATES.read_text())["harness_overhead_s"]["lower"]
    seconds = 2700 / rates["prefill_tps"] + 180 / rates["decode_tps"] + 24 * overhead
    assert lower["gpu_h"] == pytest.approx(seconds / 3600, rel=1e-5)
    start = yaml.safe_load(capacity_model.DEFAULT_RATES.read_text())["gpu_start"]  # 2 servers, one model each
    one = start["container_s"]["llamacpp"] + 491400064 / (start["disk_read_gbs"] * 1e9)
    assert lower["start_h"] == pytest.approx(2 * one / 3600, rel=1e-5)


HELD_OUT_TOLERANCE = 0.35  # a held-out published figure within 35% of the rule's, either way


def _rates() -> dict[str, Any]:
    return yaml.safe_load(capacity_model.DEFAULT_RATES.read_text())


@pytest.mark.parametrize("stack", ["llamacpp", "vllm", "sglang", "ollama"])
def test_decode_rule_respects_the_ceiling_and_its_anchors(stack: str) -> None:
    """Efficiency at most the stated ceiling, and no anchor predicted faster than its published figure (the rule
    may only err slow), with at least one anchor met: the overhead is the largest the anchors need, no larger."""
    rates = _rates()
    efficiency, overhead = capacity_model.decode_fit(rates, stack)
    assert 0 < efficiency <= rates["rules"]["efficiency_ceiling"]["value"]
    assert overhead > 0
    spec = capacity_model._stack_spec(rates, stack)
    ratios = [
        capacity_model.decode_tps(rates, stack, a["weight_bytes"], a["gpu"]) / a["tokens_per_s"]
        for a in spec["decode_anchors"]
    ]
    assert max(ratios) == pytest.approx(1.0, rel=1e-9)
    assert all(ratio <= 1.0 + 1e-9 for ratio in ratios)


def test_decode_rule_predicts_held_out_figures() -> None:
    """Published figures kept out of the fit (another format; another model on the reference GPU)."""
    rates = _rates()
    checks = [(stack, c) for stack, spec in rates["stacks"].items() for c in spec.get("decode_checks", [])]
    assert len(checks) >= 2
    for stack, check in checks:
        predicted = capacity_model.decode_tps(rates, stack, check["weight_bytes"], check["gpu"])
        assert abs(predicted / check["tokens_per_s"] - 1) <= HELD_OUT_TOLERANCE, (stack, check["model"], predicted)


def test_decode_rate_falls_with_weight_bytes_and_bandwidth() -> None:
    rates = _rates()
    for stack in ("llamacpp", "vllm", "sglang"):
        speeds = [
            capacity_model.decode_tps(rates, stack, size * 1e9, "H100-SXM-80GB") for size in (0.5, 1, 2, 4, 8, 16, 32)
        ]
        assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == len(speeds)
        assert capacity_model.decode_tps(rates, stack, 4e9, "L4") < capacity_model.decode_tps(
            rates, stack, 4e9, "H100-SXM-80GB"
        )
    ordered = sorted(rates["models"], key=lambda name: rates["models"][name]["params_b"])
    for stack in ("llamacpp", "vllm"):
        decode = [capacity_model.gpu_rates(rates, stack, model)["decode_tps"] for model in ordered]
        assert decode == sorted(decode, reverse=True)


def test_gpu_start_reads_each_model_once() -> None:
    rates = _rates()
    start = rates["gpu_start"]
    weights = capacity_model.weight_bytes(rates, "vllm", "qwen2.5-coder-7b-instruct")
    expected = start["container_s"]["vllm"] + weights / (start["disk_read_gbs"] * 1e9)
    models = ["qwen2.5-coder-7b-instruct"] * 3
    assert capacity_model.gpu_start_s(rates, "vllm", models) == pytest.approx(expected)


def test_hosts_pack_and_split() -> None:
    packed = capacity_model.hosts([(6.0, 0.0), (6.0, 0.0), (3.0, 0.0)], window_h=10.0)
    assert (packed["hosts_1gpu"], packed["hosts_8gpu"], packed["split_servers"]) == (2, 1, 0)
    split = capacity_model.hosts([(25.0, 1.0)], window_h=10.0)  # 3 parts of 25/3 h, each with its 1 h start
    assert (split["hosts_1gpu"], split["split_servers"]) == (3, 1)
    assert split["longest_stream_h"] == pytest.approx(25 / 3 + 1)


@pytest.mark.slow
def test_committed_output_is_what_the_script_computes_now() -> None:
    """The README section is rendered from these files: they must not drift from the script and its inputs."""
    out = capacity_model.DEFAULT_OUT
    committed = json.loads((out / "capacity.json").read_text())
    assert (out / "capacity.md").read_text() == capacity.render(committed)
    now = json.loads(
        json.dumps(
            capacity_model.compute(
                capacity_model.DEFAULT_MATRIX, capacity_model.DEFAULT_RUNS, capacity_model.DEFAULT_RATES
            )
        )
    )
    for result in (committed, now):
        result["inputs"].pop("commit")  # the git history may be shallow where tests run; the hashes stay
    assert now == committed


def _readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Capacity on paper\n") + 1
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def test_readme_section_is_rendered_from_the_committed_output() -> None:
    """Every number in README "Capacity on paper" comes from capacity.json: the section is the script's rendering
    (`scripts/capacity.py --readme`), verbatim."""
    committed = json.loads((capacity_model.DEFAULT_OUT / "capacity.json").read_text())
    assert _readme_section() == capacity.readme_section(committed)


def test_readme_flag_prints_the_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--readme"]) == 0
    assert capsys.readouterr().out == _readme_section()
