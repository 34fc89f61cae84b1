"""The sweep under faults that need no model server: a launch that raises (missing binary), a Docker image
that does not exist, and an Ollama pull that fails. None may abort the matrix: the cells are marked
`launch_failed` with the error, and the rest of the matrix runs (against the Ollama replay)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.runner.store.runstore import counted_turns
from tests.conftest import REPLAY_DIR

pytestmark = pytest.mark.server

ENV = {**os.environ, "COLUMNS": "250"}


def orchestrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=ENV, timeout=600
    )


def run_matrix(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    done = orchestrate("matrix", str(path), "--results", str(tmp_path / "r"))
    runs = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    assert len(runs) == 1, done.stderr[-2000:]
    return done, runs[0]


def test_a_missing_binary_marks_cells_and_the_sweep_goes_on(tmp_path: Path) -> None:
    done, run = run_matrix(
        tmp_path,
        f"""\
name: nobinary
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process, binary: /nonexistent/llama-server}}
  - {{stack: ollama, launcher: process, binary: {REPLAY_DIR / "ollama"}}}
models:
  - name: llama3.2
    sources:
      llamacpp: {{path: /nonexistent/m.gguf}}
      ollama: {{tag: "llama3.2:latest"}}
modes: [native]
tasks:
  - {{suite: ops, count: 2}}
turn_cap: 2
bootstrap: {{resamples: 200}}
""",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads((run / "cells" / "llamacpp-jinja__llama3.2__native.json").read_text())
    assert failed["status"] == "launch_failed"
    assert "FileNotFoundError" in failed["error"] and "/nonexistent/llama-server" in failed["reproduce"]
    long = pd.read_csv(run / "report" / "cells_long.csv").set_index("cell_id")
    assert long.loc["ollama-default__llama3.2__native", "n_eligible_turns"] == 4  # 2 seeds x turn cap 2


def test_a_missing_image_marks_cells_launch_failed(tmp_path: Path, docker_client) -> None:
    done, run = run_matrix(
        tmp_path,
        """\
name: noimage
stacks:
  - {stack: llamacpp, tool_config: jinja, launcher: docker, image: "toolcall-matrix/does-not-exist:0"}
models:
  - name: m
    sources: {llamacpp: {path: /nonexistent/m.gguf}}
modes: [native]
tasks:
  - {suite: ops, count: 2}
bootstrap: {resamples: 200}
""",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cell = json.loads((run / "cells" / "llamacpp-jinja__m__native.json").read_text())
    assert cell["status"] == "launch_failed" and "ImageNotFound" in cell["error"]


def test_a_failed_ollama_pull_marks_that_models_cells_not_a_refusal(tmp_path: Path) -> None:
    done, run = run_matrix(
        tmp_path,
        f"""\
name: pullfail
stacks:
  - {{stack: ollama, launcher: process, binary: {REPLAY_DIR / "ollama"}}}
models:
  - name: typo
    sources: {{ollama: {{tag: "qwen2.5-codr:0.5b"}}}}
  - name: llama3.2
    sources: {{ollama: {{tag: "llama3.2:latest"}}}}
modes: [native]
tasks:
  - {{suite: ops, count: 2}}
turn_cap: 2
bootstrap: {{resamples: 200}}
""",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    typo = json.loads((run / "cells" / "ollama-default__typo__native.json").read_text())
    assert typo["status"] == "launch_failed"
    assert "pull model manifest: file does not exist" in typo["error"]
    turns = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]
    assert not [t for t in turns if t["model"] == "qwen2.5-codr:0.5b"], (
        "no request may reach a model that failed to pull"
    )
    assert {t["model"] for t in turns} == {"llama3.2:latest"}


TWO_CELLS = """\
name: twocells
stacks:
  - {{stack: ollama, launcher: process, binary: {binary}}}
models:
  - name: llama3.2
    sources: {{ollama: {{tag: "llama3.2:latest"}}}}
modes: [native, text-tools]
tasks:
  - {{suite: ops, count: 2}}
turn_cap: 2
bootstrap: {{resamples: 200}}
"""
COMPLETE_CELL = "ollama-default__llama3.2__native.json"
PARTIAL_CELL = "ollama-default__llama3.2__text-tools.json"


def read_turns(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]


def run_then_kill_one_seed(tmp_path: Path, binary: Path) -> tuple[Path, bytes, str]:
    """Run two cells, then make the run look killed: the text-tools cell's last seed never ended.
    Returns the run, the complete (native) cell file's bytes and the killed seed's id."""
    done, run = run_matrix(tmp_path, TWO_CELLS.format(binary=binary))
    assert done.returncode == 0, done.stderr[-3000:]
    turns = run / "turns.jsonl"
    rows = [json.loads(line) for line in turns.read_text().splitlines()]
    last = max(i for i, r in enumerate(rows) if r["cell_id"].endswith("text-tools"))
    rows[last].pop("end")
    turns.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, (run / "cells" / COMPLETE_CELL).read_bytes(), rows[last]["seed"]


def test_resume_leaves_complete_cells_exactly_as_they_were(tmp_path: Path) -> None:
    run, before, _ = run_then_kill_one_seed(tmp_path, REPLAY_DIR / "ollama")
    resumed = orchestrate("matrix", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 seed run(s) executed" in resumed.stdout
    assert (run / "cells" / COMPLETE_CELL).read_bytes() == before
    rerun = json.loads((run / "cells" / PARTIAL_CELL).read_text())
    assert rerun["status"] == "complete" and len(rerun["launches"]) == 2


def replay_copy(tmp_path: Path) -> Path:
    """A copy of the Ollama replay that a test may change or remove between the run and its resume."""
    server = tmp_path / "ollama"
    server.write_text((REPLAY_DIR / "ollama").read_text().replace(
        "sys.path.insert(0, str(Path(__file__).resolve().parent))", f"sys.path.insert(0, {str(REPLAY_DIR)!r})"
    ))  # fmt: skip
    server.chmod(0o755)
    return server


def test_records_of_a_resumed_seed_carry_the_version_that_served_them(tmp_path: Path) -> None:
    server = replay_copy(tmp_path)
    run, _, killed_seed = run_then_kill_one_seed(tmp_path, server)
    server.write_text(server.read_text().replace('VERSION = "0.30.8"', 'VERSION = "0.30.9"'))
    resumed = orchestrate("matrix", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    partial = [r for r in read_turns(run) if r["cell_id"] + ".json" == PARTIAL_CELL]
    versions = {(r["seed"] == killed_seed, r["stack_version"]) for r in counted_turns(partial)}
    assert versions == {(False, "0.30.8"), (True, "0.30.9")}
    # The killed seed run's records stay on disk, superseded, with the version that served them.
    cut_short = {(r["seed"], r["stack_version"]) for r in partial if r.get("superseded")}
    assert cut_short == {(killed_seed, "0.30.8")}
    cell = json.loads((run / "cells" / PARTIAL_CELL).read_text())
    assert cell["stack_version"] == "0.30.8", "the cell keeps the config of its first launch"
    long = pd.read_csv(run / "report" / "cells_long.csv").set_index("cell_id")
    assert long.loc[PARTIAL_CELL.removesuffix(".json"), "stack_versions_served"] == "0.30.8 0.30.9"


def test_a_failed_start_on_resume_never_touches_complete_cells(tmp_path: Path) -> None:
    server = replay_copy(tmp_path)  # the resume will not find it
    run, before, _ = run_then_kill_one_seed(tmp_path, server)
    server.unlink()
    resumed = orchestrate("matrix", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (run / "cells" / COMPLETE_CELL).read_bytes() == before
    partial = json.loads((run / "cells" / PARTIAL_CELL).read_text())
    assert partial["status"] == "launch_failed"
    assert partial["argv"] is not None, "the config of the launch that served its stored turns is kept"
    assert [launch["ok"] for launch in partial["launches"]] == [True, False]


def test_a_models_own_turn_cap_is_what_its_seeds_run_under(tmp_path: Path) -> None:
    # The entry's label (llama3.2) differs from the name the server is asked for (its tag): the cap must follow
    # the entry, in the records as in the cell's config.
    text = (
        TWO_CELLS.format(binary=REPLAY_DIR / "ollama")
        .replace(
            'sources: {ollama: {tag: "llama3.2:latest"}}',
            'sources: {ollama: {tag: "llama3.2:latest"}}\n    turn_cap: 1',
        )
        .replace("turn_cap: 2\n", "turn_cap: 3\n")
    )
    done, run = run_matrix(tmp_path, text)
    assert done.returncode == 0, done.stderr[-3000:]
    native = [r for r in read_turns(run) if r["cell_id"] + ".json" == COMPLETE_CELL]
    assert native and max(r["turn"] for r in native) == 0
    assert {r["end"] for r in native if r.get("end")} == {"turn_cap"}
    assert json.loads((run / "cells" / COMPLETE_CELL).read_text())["turn_cap"] == 1
