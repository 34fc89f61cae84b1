"""Stack files are read with the same bounded YAML loader as matrices and suites (serving/yamlfiles.py): a
hostile stack file is one error naming the file and the line, fast, through the registry and a run's snapshot."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.runner.run.provenance import run_stacks
from orchestrator.runner.store.runstore import RunStore, StoreError
from orchestrator.serving.registry import InvalidStackError, load_stack, read_stack_file
from orchestrator.serving.yamlfiles import MAX_DEPTH

LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)
HOSTILE_STACKS = {
    "deep nesting": (
        "name: bad\nlaunch: " + "[" * 10_000 + "\n",
        rf"bad\.yaml:2: YAML refused: nested more than {MAX_DEPTH}",
    ),
    "billion laughs": (LAUGHS, r"bad\.yaml:1: YAML refused: more than 100000 nodes once its aliases"),
    "python object": ("name: !!python/object/apply:os.system [echo hi]\n", r"bad\.yaml:1: not valid YAML: .*plain"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_STACKS))
def test_a_hostile_stack_file_is_one_error_fast(tmp_path: Path, case: str) -> None:
    text, pattern = HOSTILE_STACKS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(InvalidStackError, match=pattern) as caught:
        read_stack_file(path)
    assert time.monotonic() - started < 1.0
    assert caught.value.__cause__ is None and "\n" not in str(caught.value)  # one line, no chained traceback


def test_the_registry_reads_through_the_bounded_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.yaml").write_text(LAUGHS)
    monkeypatch.setenv("TOOLCALL_MATRIX_STACKS", str(tmp_path))
    load_stack.cache_clear()
    try:
        with pytest.raises(InvalidStackError, match=r"bad\.yaml:1: YAML refused"):
            load_stack("bad")
    finally:
        load_stack.cache_clear()


def test_a_hostile_stack_snapshot_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "bad.yaml").write_text("launch: " + "{a: " * 10_000)
    with pytest.raises(StoreError, match=r"stack snapshot cannot be read.*YAML refused: nested more than"):
        run_stacks(RunStore(tmp_path))("bad")


def test_cli_validate_with_a_hostile_stack_is_one_line_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "llamacpp.yaml").write_text(LAUGHS)
    matrix = Path(__file__).resolve().parents[1] / "matrices" / "smoke.yaml"
    monkeypatch.setenv("TOOLCALL_MATRIX_STACKS", str(stacks))
    load_stack.cache_clear()
    try:  # in process (typer's runner): no subprocess, so it stays in the fast tier
        result = CliRunner().invoke(app, ["validate", str(matrix)])
    finally:
        load_stack.cache_clear()
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no traceback
    assert "llamacpp.yaml:1: YAML refused" in result.output
