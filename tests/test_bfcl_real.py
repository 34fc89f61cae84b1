"""BFCL through the matrix on the real stacks: llama.cpp b11312 (`--jinja` and without) and vLLM CPU (hermes),
Qwen2.5-Coder-0.5B, two categories x two cases x native / text-tools. Every record carries BFCL's verdict; a
refused request has none and is counted apart; `report --reclassify` recomputes the same verdicts from the
run's snapshot and refuses a tampered snapshot by name; triage reads BFCL's verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.cliinprocess import orchestrate

pytestmark = pytest.mark.integration
QWEN = "qwen2.5-coder-0.5b-instruct"
CATEGORIES = ["simple_python", "irrelevance"]


def test_bfcl_cells_on_real_llamacpp_and_vllm_are_judged_by_bfcls_checker(
    tmp_path: Path, llama_server_binary: str, vllm_python: str
) -> None:
    matrix = {
        "name": "bfcl-real",
        "stacks": [
            {"stack": "llamacpp", "tool_config": "jinja", "launcher": "process", "ctx": 4096},
            {"stack": "llamacpp", "tool_config": "no-jinja", "launcher": "process", "ctx": 4096},
            {"stack": "vllm", "tool_config": "hermes", "launcher": "process", "ctx": 4096},
        ],
        "models": [{"name": QWEN, "sources": {"llamacpp": {"asset": QWEN}, "vllm": {"asset": QWEN}}}],
        "modes": ["native", "text-tools"],
        "tasks": [{"suite": "bfcl", "categories": CATEGORIES, "count": 2}],
        "decoding": {"temperature": 0.001, "top_p": 1.0, "max_tokens": 256, "seed": 7},
        "turn_cap": 1,
        "timeouts": {"request_s": 120, "ready_s": 600},
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(matrix))
    done = orchestrate("matrix", str(path), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = next((tmp_path / "results").iterdir())
    turns = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]
    assert len({(t["cell_id"], t["seed"]) for t in turns}) == 3 * 2 * 2 * 2
    for turn in turns:  # every record judged, by the case it answers, in its category's cell
        assert turn["bfcl"]["id"] == turn["seed"] and turn["cell_id"].endswith(f"__bfcl-{turn['category']}")
        assert (turn["bfcl"]["valid"] is None) == (turn["outcome"] in ("rejected_request", "non_response"))
    cells = pd.read_csv(run / "report" / "bfcl_cells.csv").set_index("cell_id")
    assert len(cells) == 12 and set(cells["category"]) == set(CATEGORIES)
    # No --jinja: llama.cpp refuses every tools= request; those cases have no verdict, on irrelevance too.
    refused = cells[(cells["stack_config"] == "llamacpp-no-jinja") & (cells["tools_mode"] == "native")]
    assert (refused["n_no_verdict"] == 2).all() and refused["served"].isna().all()
    answered = cells[cells["stack_config"] != "llamacpp-no-jinja"]
    assert (answered["n_verdict"] == 2).all() and answered["served"].between(0, 1).all()
    subscores = pd.read_csv(run / "report" / "bfcl_subscores.csv")
    assert set(subscores["subscore"]) == {"non_live_python", "irrelevance"}
    snapshot = run / "bfcl" / "cases.jsonl"
    snapshot_ids = [json.loads(line)["id"] for line in snapshot.read_text().splitlines()]
    assert len(snapshot_ids) == 4 and set(snapshot_ids) == {t["seed"] for t in turns}
    # The verdicts are recomputed from the run's own snapshot, identically.
    before = (run / "report" / "bfcl_cells.csv").read_text()
    again = orchestrate("report", str(run), "--reclassify")
    assert again.returncode == 0, again.stderr
    assert (run / "report" / "bfcl_cells.csv").read_text() == before
    triage = orchestrate("triage", str(run), "--json")
    assert triage.returncode == 0, triage.stderr
    verdicts = {row["cell_id"]: row for row in map(json.loads, triage.stdout.splitlines())}
    for cell_id, row in verdicts.items():  # low by BFCL accuracy; parser loss read from BFCL's verdicts
        judged = [t["bfcl"] for t in turns if t["cell_id"] == cell_id and t["bfcl"]["valid"] is not None]
        failed = [v for v in judged if not v["valid"]]
        lost = [v for v in failed if v["valid_as_said"]]
        if judged:
            assert row["per_seed_mean"] == pytest.approx(1 - len(failed) / len(judged)) and row["ci_low"] is None
        assert (row["verdict"] == "parser_loss") == (bool(failed) and 2 * len(lost) >= len(failed)), row
    # A tampered snapshot: refused by name, the report left as it was.
    snapshot.write_text(snapshot.read_text().replace('"simple_python"', '"simple_python" ', 1))
    refused_run = orchestrate("report", str(run), "--reclassify")
    assert refused_run.returncode == 2 and "cases.jsonl: not the BFCL cases this run recorded" in refused_run.stderr
    assert (run / "report" / "bfcl_cells.csv").read_text() == before
