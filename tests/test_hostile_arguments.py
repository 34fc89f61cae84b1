"""Hostile arguments (issue 28, defects 13 and 20): a gate expression is read in one pass, linear in its length,
however it is built; the bootstrap options have one set of bounds, refused the same way by every command."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.cli.bootstrapoptions import setting_bounds
from orchestrator.core.gateexpr import GateError, parse_gate, split_shape
from orchestrator.core.stats import MAX_RESAMPLES, MAX_RNG_SEED, BootstrapSettings
from orchestrator.runner.config.matrixfile import MatrixError, load_matrix
from orchestrator.serving.yamlfiles import MAX_BYTES
from tests.cliinprocess import orchestrate
from tests.test_matrix_channels import CHANNELS

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "results" / "examples"
DIFF_A, DIFF_B = EXAMPLES / "20261203T173011Z-diffcheck-98d599", EXAMPLES / "20261203T173250Z-diffcheck-8cf938"

# ------------------------------------------------------------------------------ defect 13: gate parsing is linear

HOSTILE_SIZE = 48 * 1024  # a backtracking reading took > 10 s on the first shape at this size; one pass, < 0.1 s
HOSTILE_SHAPES = [
    "product.core.answer " + "=" * HOSTILE_SIZE + " x y",  # the operator run, backtracked once per character
    "product.core.answer " + "=" * HOSTILE_SIZE,
    "product.core.answer >= " + " " * HOSTILE_SIZE + "1/2 x",
    "product.core.answer" + " " * HOSTILE_SIZE + ">=" + " " * HOSTILE_SIZE + "1 1",
    "a" * HOSTILE_SIZE + "=" * HOSTILE_SIZE + "b" * HOSTILE_SIZE + " ",
    "= " * HOSTILE_SIZE,
    "product.core.answer >= " + "9" * HOSTILE_SIZE + "x",
]


@pytest.mark.parametrize("text", HOSTILE_SHAPES, ids=range(len(HOSTILE_SHAPES)))
def test_a_hostile_gate_is_refused_in_one_pass(text: str) -> None:
    started = time.process_time()
    with pytest.raises(GateError):
        parse_gate(text)
    assert time.process_time() - started < 2.0  # the quadratic reading: 10-30 s here; the linear one: milliseconds


def test_a_matrix_file_of_the_largest_size_holding_a_hostile_gate_is_refused_quickly(tmp_path: Path) -> None:
    prefix = CHANNELS.replace('gate: ["product.core.answer >= 7/8"]\n', "gate: ['product.core.answer ")
    path = tmp_path / "m.yaml"
    path.write_text(prefix + "=" * (MAX_BYTES - len(prefix) - 8) + " x y']\n")
    assert path.stat().st_size <= MAX_BYTES
    started = time.process_time()
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    assert time.process_time() - started < 10.0  # was ~15 minutes
    assert str(raised.value).startswith(f"{path}:") and "field gate" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("product.core.answer >= 12/14", ("product.core.answer", ">=", "12/14")),
        ("  model.all.tool>=0.5  ", ("model.all.tool", ">=", "0.5")),
        ("model.all.tool\t==\t85%", ("model.all.tool", "==", "85%")),
        ("model.all.tool >== 1", ("model.all.tool", ">==", "1")),  # an operator run read whole: unknown operator
        ("model.all.tool >= 1 2", None),
        ("model.all.tool", None),
        (">= 1", None),
        ("model.all.tool >=", None),
    ],
)
def test_the_one_pass_reading_splits_as_the_expression_shape_says(text: str, parts: tuple[str, ...] | None) -> None:
    assert split_shape(text) == parts


def test_valid_gates_read_as_before() -> None:
    gate = parse_gate(" product.core.answer>= 12/14 ")
    assert (gate.metric, gate.op, gate.threshold_text, gate.expression) == (
        "product.core.answer",
        ">=",
        "12/14",
        "product.core.answer>= 12/14",
    )


# ------------------------------------------------------------- defect 20: one definition of the bootstrap bounds


def test_the_options_bounds_are_the_settings_bounds() -> None:
    assert setting_bounds("resamples") == (1, MAX_RESAMPLES)
    assert setting_bounds("rng_seed") == (0, MAX_RNG_SEED)
    for name in ("resamples", "rng_seed"):
        low, high = setting_bounds(name)
        BootstrapSettings(**{name: low}), BootstrapSettings(**{name: high})  # both ends accepted by the settings


OUT_OF_RANGE = [
    ["--rng-seed", "-1"],
    ["--rng-seed", str(2**128)],
    ["--rng-seed", str(MAX_RNG_SEED + 1)],
    ["--resamples", "5000000"],
    ["--resamples", "0"],
]


def _command(name: str, tmp_path: Path) -> list[str]:
    if name == "stats":
        path = tmp_path / "turns.jsonl"
        path.write_text('{"stack": "vllm", "model": "m", "tools_mode": "native", "seed": 1, "turn": 0, '
                        '"outcome": "valid_call"}\n')  # fmt: skip
        return ["stats", str(path)]
    if name == "audit":
        path = tmp_path / "trajectories.jsonl"
        path.write_text('{"messages": []}\n')
        return ["audit", str(path)]
    return ["diff", str(DIFF_A), str(DIFF_B)]


@pytest.mark.parametrize("command", ["stats", "diff", "audit"])
@pytest.mark.parametrize("option", OUT_OF_RANGE, ids=lambda option: " ".join(option))
def test_every_command_refuses_bootstrap_options_out_of_range_alike(
    command: str, option: list[str], tmp_path: Path
) -> None:
    done = orchestrate(*_command(command, tmp_path), *option, cwd=REPO)  # a traceback propagates: the test fails
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "ValidationError" not in done.stderr
    assert option[0] in done.stderr and "Invalid value" in done.stderr
