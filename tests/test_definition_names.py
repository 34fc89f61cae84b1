"""Names in definitions are names, never paths, and never one file twice (issue 28, defects 2 and 25).

Defect 2: `validate`, `classify` and `report --reclassify` resolve a stack only inside `stacks/` (or the run's
snapshot) through the one resolver (runner/config/resolve.py); a name with `/`, `..` or an absolute path is one
clear error, and what they read is read by the bounded loader. Defect 25: stack labels, model names and cell ids
that differ only in case are refused naming both (one file on a case-insensitive file system)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.runner.config.matrixchecks import check_cell_ids
from orchestrator.runner.config.resolve import RunAssets
from orchestrator.runner.suites.tasks import SuiteError
from orchestrator.serving.registry import REPO_ROOT, UnknownStackError, load_stack
from tests.cliinprocess import orchestrate
from tests.test_matrix import GOOD
from tests.test_stack_yaml_bounds import LAUGHS

EXAMPLE = REPO_ROOT / "results" / "examples" / "20261203T131653Z-cpu-87d008"


def outside_stack(tmp_path: Path) -> Path:
    """A valid stack file outside stacks/: what a path as a stack name would read (returned without `.yaml`)."""
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(REPO_ROOT / "stacks" / "llamacpp.yaml", tmp_path / "elsewhere" / "evil.yaml")
    return tmp_path / "elsewhere" / "evil"


def one_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 and one error holding each needle, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    err = " ".join(result.stderr.split())
    assert err.startswith("error:") and "Traceback" not in err, err
    assert all(needle in err for needle in needles), err


def path_names(tmp_path: Path) -> list[str]:
    absolute = outside_stack(tmp_path)
    relative = "../" * len(REPO_ROOT.parts) + str(absolute).lstrip("/")  # from stacks/ up to / and down again
    return [str(absolute), relative, "llamacpp/../llamacpp", "./llamacpp", ""]


@pytest.mark.parametrize("which", range(5))
def test_validate_refuses_a_stack_named_by_a_path(tmp_path: Path, which: int) -> None:
    name = path_names(tmp_path)[which]
    text = GOOD.replace("{stack: llamacpp,", f"{{stack: {json.dumps(name)},").replace("      llamacpp:", "      x:")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(text)
    result = orchestrate("validate", str(matrix))
    one_error(result, f"m.yaml:3: field stacks.0: stack name {repr(name)[:40]}", "is not a plain name")


def test_a_models_source_naming_a_path_is_refused_too(tmp_path: Path) -> None:
    name = str(outside_stack(tmp_path))
    matrix = tmp_path / "m.yaml"
    matrix.write_text(GOOD.replace("      vllm: {asset", f"      {json.dumps(name)}: {{asset"))
    result = orchestrate("validate", str(matrix))
    one_error(result, f"field models.0.sources: stack name {repr(name)[:40]}", "is not a plain name")  # shown cut


def test_classify_refuses_a_stack_named_by_a_path(tmp_path: Path) -> None:
    name = str(outside_stack(tmp_path))
    exchange = {"id": 1, "stack": name, "mode": "native", "tools": [], "http_status": 200, "body": {"choices": []}}
    exchanges = tmp_path / "x.jsonl"
    exchanges.write_text(json.dumps(exchange) + "\n")
    result = orchestrate("classify", str(exchanges))
    one_error(result, f"x.jsonl:1: field 'stack': stack name {repr(name)[:40]}", "is not a plain name")  # shown cut
    assert result.stdout == ""


def test_classify_reads_a_hostile_stack_file_through_the_bounded_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad.yaml").write_text(LAUGHS)
    monkeypatch.setenv("TOOLCALL_MATRIX_STACKS", str(tmp_path))
    exchanges = tmp_path / "x.jsonl"
    exchanges.write_text(json.dumps({"id": 1, "stack": "bad", "mode": "native", "tools": [], "http_status": 500}))
    one_error(orchestrate("classify", str(exchanges)), "bad.yaml:1: YAML refused: more than 100000 nodes")


def test_report_reclassify_refuses_a_recorded_stack_named_by_a_path(tmp_path: Path) -> None:
    name = str(outside_stack(tmp_path))
    run = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    turns = run / "turns.jsonl"
    turns.write_text(turns.read_text().replace('"stack":"llamacpp"', f'"stack":{json.dumps(name)}'))
    report_before = sorted((path.relative_to(run), path.read_bytes()) for path in (run / "report").rglob("*.*"))
    result = orchestrate("report", str(run), "--reclassify")
    one_error(result, f"a recorded turn or cell: stack name {repr(name)[:40]}", "is not a plain name")  # shown cut
    assert sorted((p.relative_to(run), p.read_bytes()) for p in (run / "report").rglob("*.*")) == report_before


@pytest.mark.parametrize("name", ["/etc/hostname", "../stacks/vllm", "a/b", "..", "x" * 65, ".hidden"])
def test_the_resolver_and_the_registry_take_plain_names_only(name: str) -> None:
    assets = RunAssets.from_checkout()
    with pytest.raises(UnknownStackError, match="is not a plain name"):
        assets.stack(name)
    with pytest.raises(UnknownStackError, match="is not a plain name"):
        load_stack(name)
    with pytest.raises(SuiteError, match=r"task suite name .* is not a plain name"):
        assets.suite(name)


def test_a_runs_snapshot_resolves_plain_names_only(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "stacks").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "stacks" / "vllm.yaml", run / "stacks" / "vllm.yaml")
    assets = RunAssets.from_run(run, {})
    assert assets.stack("vllm").name == "vllm"
    with pytest.raises(UnknownStackError, match="is not a plain name"):
        assets.stack(str(run / "stacks" / "vllm"))


# --- defect 25: names that differ only in case would be one file where case is not told apart --------------------


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        (
            "{stack: vllm, tool_config: default}",
            "{stack: llamacpp, tool_config: jinja, id: LLAMACPP-jinja}",
            r"m\.yaml:4: field stacks\.1: stack label 'LLAMACPP-jinja' and 'llamacpp-jinja' \(stacks\.0\) differ only "
            r"in case: one file on a case-insensitive file system",
        ),
        (
            "models:\n",
            "models:\n  - {name: M, sources: {vllm: {asset: x}}}\n",
            r"m\.yaml:7: field models\.1\.name: model name 'm' and 'M' \(models\.0\) differ only in case",
        ),
        (  # two names that differ in more than case, whose cell ids differ only in case (`:` slugs to `_`)
            "models:\n  - name: m\n",
            "models:\n  - {name: 'M:', sources: {llamacpp: {asset: x}}}\n  - name: m_\n",
            r"m\.yaml:6: field models: stack 'llamacpp-jinja' with model 'm_' and stack 'llamacpp-jinja' with model "
            r"'M:' give cell ids 'llamacpp-jinja__m___native' and 'llamacpp-jinja__M___native', which differ only in",
        ),
    ],
)
def test_names_that_differ_only_in_case_are_refused_naming_both(
    tmp_path: Path, old: str, new: str, pattern: str
) -> None:
    assert old in GOOD
    matrix = tmp_path / "m.yaml"
    matrix.write_text(GOOD.replace(old, new))
    result = orchestrate("validate", str(matrix))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert re.search(pattern, " ".join(result.stderr.split())), result.stderr


def test_cell_ids_that_differ_only_in_case_are_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"stack 'S' with model 'm' and stack 's' with model 'm' give cell ids 'S__m' "
                       r"and 's__m', which differ only in case"):  # fmt: skip
        check_cell_ids([("s__m", "s", "m"), ("S__m", "S", "m")], max_length=200, max_cells=10)
    assert check_cell_ids([("s__m", "s", "m"), ("s__n", "s", "n")], max_length=200, max_cells=10) == 2


def test_a_snapshot_file_linking_out_of_its_directory_is_refused(tmp_path: Path) -> None:
    outside = outside_stack(tmp_path)
    run = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    (run / "stacks" / "llamacpp.yaml").unlink()
    (run / "stacks" / "llamacpp.yaml").symlink_to(outside.with_suffix(".yaml"))
    one_error(orchestrate("report", str(run), "--reclassify"), "a link to a file outside", "stacks/llamacpp.yaml")
    (run / "stacks" / "vllm.yaml").unlink()
    (run / "stacks" / "vllm.yaml").symlink_to("openai.yaml")  # a link inside the directory is that file
    assert RunAssets.from_run(run, {}).stack("vllm").name == "openai"
