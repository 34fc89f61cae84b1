"""A seed's records never depend on what the server ran before it (real llama.cpp and real vLLM CPU).

The same cell runs twice: alone on a fresh server, and last on a server that first ran other cells (whose
prompts share the system prompt and tools, so a warm prompt/prefix cache would be reused). With the
stack's cache policy (stacks/*.yaml `prompt_cache`: cleared at each seed's start, or off) every record's
raw answer and outcome must be identical. Before the policy, llama.cpp gave 23/42 vs 43/48 valid turns here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ENV = {**os.environ, "COLUMNS": "250"}

MATRIX = """\
name: isolation
stacks:
  - {{stack: {stack}, tool_config: {tool_config}, launcher: process, ctx: 2048}}
models:
  - name: qwen2.5-coder-0.5b-instruct
    sources: {{{stack}: {{asset: qwen2.5-coder-0.5b-instruct}}}}
modes: {modes}
tasks:
  - {{suite: ops, count: 2}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 48, seed: 7}}
turn_cap: 3
bootstrap: {{resamples: 200}}
"""
COMPARED = ("seed", "turn", "attempt", "http_status", "outcome", "detail", "raw_content", "raw_tool_calls", "flags")


def run_cell(tmp_path: Path, name: str, stack: str, tool_config: str, modes: list[str]) -> list[dict]:
    matrix = tmp_path / f"{name}.yaml"
    matrix.write_text(MATRIX.format(stack=stack, tool_config=tool_config, modes=json.dumps(modes)))
    results = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "matrix", str(matrix), "--results", str(results)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["tools_mode"] == "text-tools"]


@pytest.mark.parametrize(
    ("stack", "tool_config", "fixture"),
    [("llamacpp", "jinja", "llama_server_binary"), ("vllm", "hermes", "vllm_python")],
)
def test_a_cell_alone_and_after_other_cells_gives_identical_records(
    tmp_path: Path, stack: str, tool_config: str, fixture: str, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(fixture)
    alone = run_cell(tmp_path, "alone", stack, tool_config, ["text-tools"])
    after = run_cell(tmp_path, "after", stack, tool_config, ["native+hint", "constrained", "text-tools"])
    assert alone, "the cell produced no records"
    assert all(r["prompt_cache"]["cleared"] for r in alone + after if r.get("prompt_cache"))
    assert [{k: r.get(k) for k in COMPARED} for r in after] == [{k: r.get(k) for k in COMPARED} for r in alone]
