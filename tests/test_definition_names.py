"""Stack and suite names are names, never paths (issue 28, defect 2): `validate`, `classify` and `report --reclassify`
resolve a stack only inside `stacks/` (or the run's snapshot) through the one resolver (runner/config/resolve.py),
and a name with `/`, `..` or an absolute path is one clear error; what they read is read by the bounded loader."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

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
    one_error(orchestrate("validate", str(matrix)), f"field models.0.sources: stack name {name!r} is not a plain")


def test_classify_refuses_a_stack_named_by_a_path(tmp_path: Path) -> None:
    name = str(outside_stack(tmp_path))
    exchange = {"id": 1, "stack": name, "mode": "native", "tools": [], "http_status": 200, "body": {"choices": []}}
    exchanges = tmp_path / "x.jsonl"
    exchanges.write_text(json.dumps(exchange) + "\n")
    result = orchestrate("classify", str(exchanges))
    one_error(result, f"x.jsonl:1: field 'stack': stack name {name!r} is not a plain name")
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
    one_error(result, f"a recorded turn or cell: stack name {name!r} is not a plain name")
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
