"""The two channels end to end on a real llama-server with the real formation MCP server: `orchestrate
matrix` with channels, `orchestrate gate`, `orchestrate ablate` (resumable, sampling seeds reused), and the
harness's record of every call checked against what the MCP server itself logged it received."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.runner.product.ablationrun import ablation_dir
from orchestrator.serving.registry import REPO_ROOT

pytestmark = pytest.mark.integration
ENV = {**os.environ, "COLUMNS": "250"}
CASES = ["f-05", "f-12"]  # a deterministic tool (short_circuit) and small talk (no call is right)


def orchestrate(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=ENV, timeout=timeout
    )


def turns(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def product_run(tmp_path_factory: pytest.TempPathFactory, llama_server_binary: str) -> Path:
    matrix = yaml.safe_load((REPO_ROOT / "matrices" / "product-cpu.yaml").read_text())
    matrix |= {"name": "product-test", "samples": 1, "tasks": [{"suite": "formation", "seeds": CASES}]}
    matrix |= {"gate": ["product.all.tool >= 1/2"], "turn_cap": 3}
    matrix["decoding"] = {**matrix["decoding"], "max_tokens": 96}
    root = tmp_path_factory.mktemp("product")
    path = root / "product-test.yaml"
    path.write_text(yaml.safe_dump(matrix))
    done = orchestrate("matrix", str(path), "--results", str(root / "results"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = [p for p in (root / "results").iterdir() if p.is_dir()]
    return run


def test_both_channels_ran_every_case_and_recorded_what_the_tool_server_got(product_run: Path) -> None:
    records = turns(product_run)
    ended = {(r["channel"], r["seed"]) for r in records if r.get("end")}
    assert ended == {(channel, seed) for channel in ("model", "product") for seed in CASES}
    assert all(not r["executions"] and not r["guard_events"] for r in records if r["channel"] == "model")
    product = [r for r in records if r["channel"] == "product"]
    assert all(r["guard_events"] for r in product if r["outcome"] in ("valid_call", "hallucinated_call"))
    # Every call the harness says it sent is what the MCP server logged it received, in order; nothing more.
    sent = [(e["call"]["name"], e["call"]["arguments"]) for r in product for e in r["executions"] if e["sent"]]
    log = product_run / "tool_calls" / "formation.jsonl"
    received = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    assert sent == [(entry["tool"], entry["arguments"]) for entry in received]
    cells = {json.loads(p.read_text())["cell_id"]: json.loads(p.read_text()) for p in (product_run / "cells").iterdir()}
    (config,) = [c for c in cells.values() if c["channel"] == "product"]
    assert config["guards"] == sorted(["dedup", "final_json", "repair", "short_circuit", "stall"])
    assert config["tool_server"]["formation"]["transport"] == "stdio"


def test_gate_exit_code_agrees_with_its_numbers(product_run: Path) -> None:
    result = orchestrate("gate", str(product_run), "--json")
    assert result.returncode in (0, 1), result.stderr
    (line,) = [json.loads(text) for text in result.stdout.splitlines()]
    assert line["total"] == 2 and line["ok"] == (line["passes"] * 2 >= line["total"])
    assert result.returncode == (0 if line["ok"] else 1)


def test_ablate_reruns_with_the_runs_sampling_seeds_and_resumes_without_rerunning(product_run: Path) -> None:
    done = orchestrate("ablate", str(product_run), "--guard", "short_circuit", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {row["guard"] for row in rows} == {"short_circuit"} and rows
    keys = {"guard", "stack_config", "model", "mode", "dimension", "delta_mean", "ci_low", "ci_high", "fired"}
    assert all(keys | {"changed", "n_seeds"} <= set(row) for row in rows)
    ablation = ablation_dir(product_run)
    manifest = json.loads((ablation / "manifest.json").read_text())
    assert manifest["ablation"]["guards"] == ["short_circuit"] and manifest["config_mismatch"] == []
    parent = {(r["seed"], r["sampling_seed"]) for r in turns(product_run) if r["channel"] == "product"}
    rerun = turns(ablation)
    assert {(r["seed"], r["sampling_seed"]) for r in rerun} <= parent
    assert all(r["without"] == "short_circuit" for r in rerun)
    again = orchestrate("ablate", str(product_run), "--guard", "short_circuit", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert turns(ablation) == rerun  # a finished ablation executes nothing more
