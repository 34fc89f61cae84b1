"""Matrix files with the channel axes of issue 12 (runner/config/matrix.py): channels x samples and the ablation's
`without` expand into cells with their ids; what a matrix may combine fails at load with file, field and line;
and the run's manifest records the guards that are on (TOOLCALL_MATRIX_GUARDS wins) and the scored cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.runner.config.cellconfig import cell_config
from orchestrator.runner.config.matrix import Matrix, expand
from orchestrator.runner.config.matrixfile import MatrixError, load_matrix
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.run.runs import start_run
from orchestrator.runner.turn.guards import GUARDS, GUARDS_ENV, GuardConfigError, active_guards
from orchestrator.serving.registry import REPO_ROOT

# Line numbers matter: the validation tests name them.
CHANNELS = """\
name: t
stacks:
  - {stack: llamacpp, tool_config: jinja}
models:
  - name: m
    sources:
      llamacpp: {asset: smollm2-135m-instruct}
modes: [text-tools]
tasks:
  - {suite: formation}
channels: [model, product]
guards: {stall: on, repair: on}
gate: ["product.core.answer >= 7/8"]
"""
BASE = "llamacpp-jinja__m__text-tools"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def load(tmp_path: Path, text: str) -> Matrix:
    return load_matrix(write(tmp_path, text))[0]


def cell_ids(matrix: Matrix) -> list[str]:
    return [cell.cell_id for plan in expand(matrix) for cell in plan.cells]


def load_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = write(tmp_path, text)
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    return path, str(raised.value)


# ---- expansion ----------------------------------------------------------------------------------------------


@pytest.mark.server
def test_channels_run_three_samples_each_by_default(tmp_path: Path) -> None:
    matrix = load(tmp_path, CHANNELS)
    assert matrix.sample_count == 3
    assert cell_ids(matrix) == [
        f"{BASE}__channel-model",
        f"{BASE}__channel-model__sample-1",
        f"{BASE}__channel-model__sample-2",
        f"{BASE}__channel-product",
        f"{BASE}__channel-product__sample-1",
        f"{BASE}__channel-product__sample-2",
    ]
    cells = [cell for plan in expand(matrix) for cell in plan.cells]
    assert [(c.channel, c.sample, c.without, c.order) for c in cells] == [
        (channel, sample, None, 3 * i + sample) for i, channel in enumerate(("model", "product")) for sample in range(3)
    ]
    assert all(len(c.seeds) == 12 and c.seeds[0] == ("formation", "f-01") for c in cells)


@pytest.mark.server
def test_samples_and_channels_multiply_across_modes(tmp_path: Path) -> None:
    text = CHANNELS.replace("channels: [model, product]", "channels: [product]\nsamples: 5").replace(
        "modes: [text-tools]", "modes: [native, text-tools]"
    )
    ids = cell_ids(load(tmp_path, text))
    assert len(ids) == 10 == len(set(ids))
    assert ids[:2] == [
        "llamacpp-jinja__m__native__channel-product",
        "llamacpp-jinja__m__native__channel-product__sample-1",
    ]
    assert ids[-1] == f"{BASE}__channel-product__sample-4"


def test_without_channels_one_plain_agent_loop_cell(tmp_path: Path) -> None:
    text = CHANNELS.replace("{suite: formation}", "{suite: ops, count: 2}")
    text = text.replace("channels: [model, product]\n", "").replace('gate: ["product.core.answer >= 7/8"]\n', "")
    matrix = load(tmp_path, text)
    assert matrix.sample_count == 1
    (cell,) = [cell for plan in expand(matrix) for cell in plan.cells]
    assert (cell.cell_id, cell.channel, cell.sample, cell.without) == (BASE, "agent", 0, None)
    two = load(tmp_path, text + "samples: 2\n")
    assert cell_ids(two) == [BASE, f"{BASE}__sample-1"]


@pytest.mark.server
def test_an_ablation_matrix_has_one_product_cell_per_guard_off_and_sample(tmp_path: Path) -> None:
    text = CHANNELS.replace("channels: [model, product]", "channels: [product]\nwithout: [repair, stall]")
    cells = [cell for plan in expand(load(tmp_path, text)) for cell in plan.cells]
    assert [c.cell_id for c in cells] == [
        f"{BASE}__channel-product__without-repair",
        f"{BASE}__channel-product__sample-1__without-repair",
        f"{BASE}__channel-product__sample-2__without-repair",
        f"{BASE}__channel-product__without-stall",
        f"{BASE}__channel-product__sample-1__without-stall",
        f"{BASE}__channel-product__sample-2__without-stall",
    ]
    assert {(c.channel, c.without) for c in cells} == {("product", "repair"), ("product", "stall")}


@pytest.mark.server
def test_the_cell_config_records_the_channel_axes_and_the_guards(tmp_path: Path) -> None:
    matrix = load(tmp_path, CHANNELS)
    cells = {(c.channel, c.sample): c for plan in expand(matrix) for c in plan.cells}
    guards = frozenset({"dedup", "stall"})
    model = cell_config(matrix, cells[("model", 0)], None, None, None, resolved=matrix.suites(), guards=guards)
    product = cell_config(matrix, cells[("product", 1)], None, None, None, resolved=matrix.suites(), guards=guards)
    assert (model["channel"], model["sample"], model["without"], model["guards"]) == ("model", 0, None, None)
    assert (product["channel"], product["sample"], product["guards"]) == ("product", 1, ["dedup", "stall"])
    other = cell_config(
        matrix, cells[("product", 1)], None, None, None, resolved=matrix.suites(), guards=frozenset({"stall"})
    )
    assert len({model["config_sha256"], product["config_sha256"], other["config_sha256"]}) == 3


# ---- validation ---------------------------------------------------------------------------------------------


@pytest.mark.server
def test_the_shipped_product_matrix_validates() -> None:
    matrix, _digest = load_matrix(REPO_ROOT / "matrices" / "product-cpu.yaml")
    assert (matrix.channels, matrix.sample_count) == (["model", "product"], 3)
    assert len(cell_ids(matrix)) == 6


def test_a_suite_without_expect_cannot_run_in_the_channels(tmp_path: Path) -> None:
    path, text = load_error(tmp_path, CHANNELS.replace("{suite: formation}", "{suite: ops}"))
    assert text.startswith(f"{path}:"), text
    assert "suite 'ops' declares no `expect`" in text and "channels" in text


@pytest.mark.server
def test_a_suite_without_a_submit_tool_needs_the_channels(tmp_path: Path) -> None:
    path, text = load_error(tmp_path, CHANNELS.replace("channels: [model, product]\n", "").replace("gate:", "#"))
    assert text.startswith(f"{path}:"), text
    assert "suite 'formation' has no submit tool" in text and "channels: [model, product]" in text


@pytest.mark.server
def test_without_needs_the_product_channel_alone(tmp_path: Path) -> None:
    _path, text = load_error(tmp_path, CHANNELS.replace("gate:", "without: [dedup]\ngate:"))
    assert "set channels: [product]" in text


@pytest.mark.server
@pytest.mark.parametrize(
    ("old", "new", "field", "line", "message"),
    [
        ("{stall: on, repair: on}", "{stall: on, retry: on}", "guards", 12, "unknown guards ['retry']"),
        ("channels: [model, product]", "channels: [model, user]", "channels.1", 11, "Input should be"),
        ("channels: [model, product]", "channels: [product]\nwithout: [rety]", "without", 12, "unknown guards"),
        ("channels: [model, product]", "channels: [product]\nsamples: 0", "samples", 12, "greater than or equal"),
        ("channels: [model, product]", "channels: [product]\nsamples: 16", "samples", 12, "less than or equal"),
    ],
)
def test_bad_channel_fields_name_file_field_and_line(
    tmp_path: Path, old: str, new: str, field: str, line: int, message: str
) -> None:
    path, text = load_error(tmp_path, CHANNELS.replace(old, new))
    assert text.startswith(f"{path}:{line}: field {field}"), text
    assert message in text


@pytest.mark.server
@pytest.mark.parametrize(
    ("gate", "problem"),
    [("product.core.answer >= 13/0", "zero denominator"), ("product.core.answers >= 1/2", "answers")],
)
def test_a_bad_gate_fails_at_load_naming_the_gate_field_and_its_line(tmp_path: Path, gate: str, problem: str) -> None:
    path, text = load_error(tmp_path, CHANNELS.replace("product.core.answer >= 7/8", gate))
    assert text.startswith(f"{path}:13: field gate"), text
    assert problem in text and gate in text


# ---- the manifest: guards and cases -------------------------------------------------------------------------


def manifest_of(tmp_path: Path, text: str) -> dict:
    path = write(tmp_path, text)
    matrix, digest = load_matrix(path)
    store = start_run(matrix, path, digest, tmp_path / "results")
    return json.loads(store.manifest_path.read_text())


@pytest.mark.server
def test_the_environment_names_the_guards_that_are_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert active_guards({"stall": True}, {GUARDS_ENV: "stall,dedup"}) == {"stall", "dedup"}
    monkeypatch.setenv(GUARDS_ENV, "stall, dedup")
    assert manifest_of(tmp_path, CHANNELS)["guards"] == {"active": ["dedup", "stall"], "env": "stall, dedup"}


@pytest.mark.server
def test_an_empty_environment_switches_every_guard_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(GUARDS_ENV, "")
    assert manifest_of(tmp_path, CHANNELS)["guards"] == {"active": [], "env": ""}


@pytest.mark.server
def test_without_the_environment_the_matrix_switches_decide(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(GUARDS_ENV, raising=False)
    text = CHANNELS.replace("{stall: on, repair: on}", "{stall: off, repair: on}")
    assert manifest_of(tmp_path, text)["guards"] == {"active": sorted(set(GUARDS) - {"stall"}), "env": None}


@pytest.mark.server
def test_an_unknown_guard_in_the_environment_fails_before_the_run_exists(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(GUARDS_ENV, "stall,retry")
    with pytest.raises(GuardConfigError, match="unknown guard 'retry'"):
        manifest_of(tmp_path, CHANNELS)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


@pytest.mark.server
def test_the_manifest_records_each_scored_case_and_the_core(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(GUARDS_ENV, raising=False)
    manifest = manifest_of(tmp_path, CHANNELS)
    suite = load_suite("formation")
    cases = manifest["cases"]
    assert list(cases) == ["formation"]
    assert (cases["formation"]["version"], cases["formation"]["core"]) == (suite.version, suite.core)
    assert list(cases["formation"]["expect"]) == [seed.id for seed in suite.seeds]
    assert cases["formation"]["expect"]["f-05"]["answer"] == "5d41402abc4b2a76b9719d911017c592"
    assert cases["formation"]["expect"]["f-10"]["ask_user"] is True
    assert manifest["matrix"]["channels"] == ["model", "product"] and manifest["matrix"]["gate"] == [
        "product.core.answer >= 7/8"
    ]


@pytest.mark.server
def test_a_plain_agent_loop_run_records_no_cases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(GUARDS_ENV, raising=False)
    text = CHANNELS.replace("{suite: formation}", "{suite: ops, count: 2}")
    text = text.replace("channels: [model, product]\n", "").replace('gate: ["product.core.answer >= 7/8"]\n', "")
    assert manifest_of(tmp_path, text)["cases"] == {}


@pytest.mark.server  # lists the formation suite's tools from its real MCP server
def test_a_launch_failed_product_cell_records_the_tools_its_mcp_server_offers(tmp_path: Path) -> None:
    """A cell whose server never started still records the suite as the run offers it: the MCP server's tools,
    listed once when the run starts, not the suite file's empty list."""
    from rich.console import Console

    from orchestrator.runner.config.resolve import listed_suites
    from orchestrator.runner.store.runstore import RunStore
    from orchestrator.runner.sweep.cellledger import CellLedger
    from orchestrator.runner.sweep.session import LaunchFailed

    matrix, _digest = load_matrix(REPO_ROOT / "matrices" / "product-cpu.yaml")
    suites = listed_suites(matrix.suites())
    (suite,) = suites.values()
    assert suite.mcp is not None and suite.tools  # listed from the server
    (tmp_path / "cells").mkdir()
    store = RunStore(tmp_path)
    cell = next(cell for plan in expand(matrix) for cell in plan.cells if cell.channel == "product")
    CellLedger(matrix, suites, store, Console(file=None, quiet=True)).mark_launch_failed(
        [cell], LaunchFailed("no binary"), None
    )
    recorded = json.loads((tmp_path / "cells" / f"{cell.cell_id}.json").read_text())
    assert recorded["status"] == "launch_failed"
    from orchestrator.core.runcontract import CellFile

    assert set(recorded) <= set(CellFile.model_fields), sorted(set(recorded) - set(CellFile.model_fields))
    assert recorded["tool_count"] == {suite.suite: len(suite.tools)}
    assert recorded["config_sha256"] == cell_config(matrix, cell, None, None, None, resolved=suites)["config_sha256"]


def test_a_new_run_whose_mcp_server_lists_no_tools_is_one_error_and_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tools are listed before the run directory is made: a server that cannot list them leaves nothing to
    resume, and the error names the server (the SDK's failure is replayed: no process is started)."""
    from orchestrator.runner.suites import mcpclient, tasks
    from orchestrator.runner.suites.mcperror import McpError
    from tests.cliinprocess import orchestrate

    def broken(server: str, transport: str = "stdio") -> list[dict[str, object]]:
        raise McpError(f"MCP server {server!r} exited before it listed its tools")

    monkeypatch.setattr(mcpclient, "list_server_tools", broken)
    tasks._listed_tools.cache_clear()
    results = tmp_path / "results"
    done = orchestrate("matrix", str(REPO_ROOT / "matrices" / "product-cpu.yaml"), "--results", str(results))
    tasks._listed_tools.cache_clear()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot list the tools of MCP server 'formation'" in done.stderr
    assert "Traceback" not in done.stderr and not results.exists()
