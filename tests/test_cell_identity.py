"""A cell's identity lives in one function: today's ids stay as they are, later axes only add to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.cell import LATER_AXES, PRIMARY_AXES, CellKey
from orchestrator.core.types import Outcome, ToolsMode, TurnRecord
from orchestrator.runner.config.matrix import expand
from orchestrator.runner.config.matrixfile import load_matrix
from orchestrator.runner.store.storedamage import standin_cell
from orchestrator.serving.registry import REPO_ROOT
from tests.conftest import V1_CPU_RUN, committed_runs

# Every committed run of matrices/cpu.yaml: the first example (schema 1, now a fixture) and the current one.
CPU_RUNS = [
    V1_CPU_RUN,
    *(run for run in committed_runs() if json.loads((run / "manifest.json").read_text())["matrix"]["name"] == "cpu"),
]


def committed_cells() -> list[dict]:
    return [json.loads(p.read_text()) for run in CPU_RUNS for p in sorted(run.glob("cells/*.json"))]


def test_committed_example_cell_ids_are_reproduced() -> None:
    cells = committed_cells()
    assert len(cells) >= 32
    for cell in cells:
        key = CellKey(stack_config=cell["stack_label"], model=cell["model"], tools_mode=cell["tools_mode"])
        assert key.cell_id == cell["cell_id"]


def test_matrix_expansion_uses_the_one_identity() -> None:
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / "cpu.yaml")
    ids = [cell.cell_id for plan in expand(matrix) for cell in plan.cells]
    committed = {cell["cell_id"] for cell in committed_cells()}
    assert set(ids) == committed and len(ids) == len(set(ids))


@pytest.mark.parametrize(
    ("axis", "value", "suffix"),
    [
        ("channel", "product", "__channel-product"),
        ("stream", True, "__stream-True"),
        ("tool_choice", "required", "__tool_choice-required"),
        ("parallel_tool_calls", False, "__parallel_tool_calls-False"),
        ("sample", 2, "__sample-2"),
    ],
)
def test_a_later_axis_away_from_its_default_extends_the_id(axis: str, value: object, suffix: str) -> None:
    base = CellKey(stack_config="vllm-hermes", model="qwen", tools_mode=ToolsMode.NATIVE)
    moved = base.model_copy(update={axis: value})
    assert base.cell_id == "vllm-hermes__qwen__native"
    assert moved.cell_id == base.cell_id + suffix
    assert axis in LATER_AXES


def test_ids_are_file_safe() -> None:
    key = CellKey(stack_config="ollama/x y", model="qwen2.5:0.5b", tools_mode=ToolsMode.NATIVE_HINT)
    assert "/" not in key.cell_id and " " not in key.cell_id and ":" not in key.cell_id
    assert Path(key.cell_id).name == key.cell_id


def test_a_standin_cell_keeps_every_axis_of_its_cell(tmp_path: Path) -> None:
    # Every later axis away from its default: a stand-in that dropped one would rebuild another cell's id.
    primary = {"stack_config": "vllm-hermes", "model": "qwen", "tools_mode": ToolsMode.NATIVE_HINT}
    later = {"channel": "product", "stream": True, "tool_choice": "required", "parallel_tool_calls": False}
    key = CellKey(**primary, **later, sample=2, without="dedup", category="simple_python")
    assert set(key.extra_axes()) == set(LATER_AXES)
    record = TurnRecord(
        **primary, **{axis: getattr(key, axis) for axis in LATER_AXES}, run_id="r", cell_id=key.cell_id, seed="s1",
        turn=0, stack="vllm", hint=True, http_status=200, parse_path="server", outcome=Outcome.VALID_CALL,
    )  # fmt: skip
    turns = tmp_path / "turns.jsonl"
    turns.write_text(record.model_dump_json() + "\n")
    standin = standin_cell(key.cell_id, turns, "unreadable")
    assert standin is not None
    axes = {"stack_config": standin["stack_label"], **{axis: standin[axis] for axis in PRIMARY_AXES[1:] + LATER_AXES}}
    assert CellKey(**axes).cell_id == key.cell_id
