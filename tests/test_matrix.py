"""Matrix files: the shipped ones validate; bad ones fail before anything starts with file, field and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.textcalls import FORMATS
from orchestrator.runner.config.cellconfig import cell_config, config_sha256
from orchestrator.runner.config.matrix import expand
from orchestrator.runner.config.matrixfile import MatrixError, load_matrix
from orchestrator.serving.registry import REPO_ROOT
from tests.cliinprocess import orchestrate

GOOD = """\
name: t
stacks:
  - {stack: llamacpp, tool_config: jinja}
  - {stack: vllm, tool_config: default}
models:
  - name: m
    sources:
      llamacpp: {asset: smollm2-135m-instruct}
      vllm: {asset: smollm2-135m-instruct}
modes: [native, text-tools]
tasks:
  - {suite: ops, count: 3}
turn_cap: 4
"""


@pytest.mark.parametrize("name", ["cpu", "smoke", "full", "paper", "paper-cpu", "diffcheck", "diffcheck-flag"])
def test_shipped_matrices_validate(name: str) -> None:
    matrix, digest = load_matrix(REPO_ROOT / "matrices" / f"{name}.yaml")
    assert len(digest) == 64 and expand(matrix)


def test_cpu_matrix_has_the_required_shape() -> None:
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / "cpu.yaml")
    configs = {(s.stack, s.resolved_tool_config) for s in matrix.stacks}
    assert configs == {("llamacpp", "jinja"), ("llamacpp", "no-jinja"), ("vllm", "default"), ("vllm", "hermes")}
    assert {m.name for m in matrix.models} == {"qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"}
    assert len(matrix.modes) == 5 and all(len(t.seed_ids()) >= 8 for t in matrix.tasks)
    # raw-template sends no tools: it runs once per stack, beside the configuration that has a parser.
    raw = {c.cell_id.split("__")[0] for p in expand(matrix) for c in p.cells if c.mode.value == "raw-template"}
    assert raw == {"llamacpp-jinja", "vllm-hermes"}


OLLAMA_RAW = """\
name: t
stacks:
  - {stack: ollama, tool_config: default}
models:
  - name: m
    sources: {ollama: {tag: "qwen2.5-coder:0.5b"}}
modes: [native, raw-template]
tasks:
  - {suite: ops, count: 1}
"""


def test_raw_template_needs_a_completion_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "raw.yaml"
    path.write_text(OLLAMA_RAW)
    with pytest.raises(MatrixError, match=r"raw\.yaml:\d+: .*raw-template needs a raw completion endpoint.*ollama"):
        load_matrix(path)
    path.write_text(OLLAMA_RAW + "exclude:\n  - {stack: ollama, mode: raw-template}\n")
    matrix, _ = load_matrix(path)
    assert [c.mode.value for p in expand(matrix) for c in p.cells] == ["native"]


def test_paper_matrix_matches_the_paper_setup() -> None:
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / "paper.yaml")
    assert (matrix.decoding.temperature, matrix.decoding.top_p, matrix.turn_cap) == (1.0, 1.0, 40)
    assert len([m for m in matrix.models if "ollama" in m.sources]) == 9
    assert any(s.stack == "vllm" and s.resolved_tool_config == "hermes" for s in matrix.stacks)


def test_a_model_turn_cap_overrides_the_matrix_cap_and_is_recorded_per_cell(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        GOOD.replace(
            "      vllm: {asset: smollm2-135m-instruct}\n",
            "      vllm: {asset: smollm2-135m-instruct}\n    turn_cap: 2\n",
        ).replace("models:\n", "models:\n  - name: other\n    sources: {llamacpp: {asset: smollm2-135m-instruct}}\n")
    )
    matrix, _ = load_matrix(path)
    entries = {m.name: m for m in matrix.models}
    assert (matrix.turn_cap_for(entries["m"]), matrix.turn_cap_for(entries["other"])) == (2, 4)
    caps = {
        cell.model.name: cell_config(matrix, cell, None, None, None, resolved=matrix.suites())["turn_cap"]
        for plan in expand(matrix)
        for cell in plan.cells
    }
    assert caps == {"m": 2, "other": 4}


def test_paper_cpu_matrix_keeps_the_papers_cap_where_it_can() -> None:
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / "paper-cpu.yaml")
    assert (matrix.decoding.temperature, matrix.decoding.top_p, matrix.turn_cap) == (1.0, 1.0, 40)
    caps = {m.name: matrix.turn_cap_for(m) for m in matrix.models}
    assert caps == {"qwen2.5-coder-0.5b-instruct": 40, "qwen2.5-coder-1.5b-instruct": 10}


def test_expansion_one_server_per_model_for_single_model_stacks(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD)
    plans = expand(load_matrix(path)[0])
    assert [p.server_id for p in plans] == ["llamacpp-jinja__m", "vllm-default__m"]
    assert [c.cell_id for c in plans[0].cells] == ["llamacpp-jinja__m__native", "llamacpp-jinja__m__text-tools"]
    assert all(len(c.seeds) == 3 for p in plans for c in p.cells)


@pytest.mark.parametrize(
    ("old", "new", "field", "line", "message"),
    [
        (
            "  - {stack: vllm, tool_config: default}",
            "  - {stack: vlm, tool_config: default}",
            "stacks.1",
            4,
            "did you mean 'vllm'",
        ),
        ("turn_cap: 4", "turn_cap: many", "turn_cap", 13, "valid integer"),
        (
            "  - {stack: llamacpp, tool_config: jinja}",
            "  - {stack: llamacpp, tool_config: jinjaa}",
            "stacks.0",
            3,
            "no tool configuration 'jinjaa'",
        ),
        ("modes: [native, text-tools]", "modes: [native, texttools]", "modes.1", 10, "Input should be"),
        ("  - {suite: ops, count: 3}", "  - {suite: opps, count: 3}", "tasks.0", 12, "unknown task suite"),
    ],
)
def test_bad_matrix_names_file_field_and_line(
    tmp_path: Path, old: str, new: str, field: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    text = str(raised.value)
    assert text.startswith(f"{path}:{line}: field {field}"), text
    assert message in text


def test_missing_models_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "\n".join(
            line
            for line in GOOD.splitlines()
            if not line.startswith(("models", "  - name", "    sources", "      l", "      v"))
        )
    )
    with pytest.raises(MatrixError, match=r"bad.yaml:1: field models: required field is missing"):
        load_matrix(path)


def test_cli_bad_matrix_fails_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("stack: vllm,", "stack: nope,"))
    results = tmp_path / "results"
    done = orchestrate("matrix", str(path), "--results", str(results))  # in-process: the guard sees no server
    assert done.returncode == 2
    assert f"{path}:4: field stacks.1" in done.stderr and "unknown stack 'nope'" in done.stderr
    assert not results.exists()  # no run directory, no server


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("modes: [native, text-tools]", "modes: [native, text-tools"))
    with pytest.raises(MatrixError, match=r"bad.yaml:1\d: not valid YAML"):
        load_matrix(path)


@pytest.mark.parametrize("extra", ["{cache_prompt: false}", "{top_k: 5}", "{options: {}}", "{repeat_penalty: 1.3}"])
def test_decoding_extra_may_not_replace_what_the_harness_sends(tmp_path: Path, extra: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD.replace("turn_cap: 4", f"turn_cap: 4\ndecoding: {{extra: {extra}}}"))
    with pytest.raises(MatrixError, match=r"decoding\.extra sets"):
        load_matrix(path)


# A model's call format (README: Call formats): validated, recorded per cell, part of its config identity.


def with_format(model_line: str, source_line: str = "") -> str:
    text = GOOD.replace("  - name: m\n", f"  - name: m\n{model_line}")
    return text.replace("      vllm: {asset: smollm2-135m-instruct}\n", source_line) if source_line else text


def test_a_matrix_names_a_models_call_format_and_the_cell_records_it(tmp_path: Path) -> None:
    assert {"pythonic", "qwen3_xml"} <= set(FORMATS)
    path = tmp_path / "m.yaml"
    path.write_text(
        with_format(
            "    call_format: pythonic\n", "      vllm: {asset: smollm2-135m-instruct, call_format: qwen3_xml}\n"
        )
    )
    matrix, _ = load_matrix(path)
    suites = matrix.suites()
    configs = {
        cell.cell_id: cell_config(matrix, cell, None, None, None, resolved=suites)
        for p in expand(matrix)
        for cell in p.cells
    }
    llama = configs["llamacpp-jinja__m__native"]
    assert llama["call_format"] == "pythonic"
    assert configs["vllm-default__m__text-tools"]["call_format"] == "qwen3_xml"  # the stack's source wins
    auto = {**llama, "call_format": "auto"}
    assert config_sha256(llama) != config_sha256(auto)  # it changes how outputs are read: part of the identity
    old = {k: v for k, v in auto.items() if k != "call_format"}
    assert config_sha256(old) == config_sha256(auto)  # a cell recorded before the field keeps its digest


def test_the_default_call_format_is_auto(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD)
    matrix, _ = load_matrix(path)
    assert {cell.call_format for p in expand(matrix) for cell in p.cells} == {"auto"}


@pytest.mark.parametrize(
    ("model_line", "source_line", "field", "line"),
    [
        ("    call_format: yaml\n", "", "models.0.call_format", 7),
        (
            "",
            "      vllm: {asset: smollm2-135m-instruct, call_format: yaml}\n",
            "models.0.sources.vllm.call_format",
            9,
        ),
    ],
)
def test_an_unknown_call_format_fails_the_matrix_naming_file_and_field(
    tmp_path: Path, model_line: str, source_line: str, field: str, line: int
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(with_format(model_line, source_line))
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    text = str(raised.value)
    assert text.startswith(f"{path}:{line}: field {field}: unknown call format 'yaml'"), text
    assert "pythonic" in text
