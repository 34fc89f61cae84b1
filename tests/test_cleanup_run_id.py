"""`cleanup` removes one run's leftovers, or every run's only when asked for by name (issue 28, defect 4): an empty
`--run-id ""` (a script's unset variable) or a malformed id used to read as "no filter" and kill every run's
servers and remove every managed container. Here nothing is killed: os.killpg and the Docker client are stand-ins
that record what cleanup asked of them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker
import pytest

from orchestrator.serving import launchers
from orchestrator.serving.handle import LABEL_MANAGED, LABEL_RUN, RunIdError, check_run_id, pid_dir
from tests.cliinprocess import orchestrate

REPO = Path(__file__).resolve().parents[1]
RUN_A, RUN_B = "20261203T131653Z-cpu-87d008", "20261203T154909Z-cpu-a65567"


class FakeContainers:
    """Managed containers of two runs; `list` filters by label as the engine does, `remove` is recorded."""

    def __init__(self, removed: list[str]) -> None:
        self.removed = removed
        self.all = [{LABEL_MANAGED: "true", LABEL_RUN: run} for run in (RUN_A, RUN_B)]

    def list(self, *, all: bool, filters: dict[str, Any]) -> list[Any]:
        wanted = dict(label.split("=", 1) for label in filters["label"])
        return [self._container(labels) for labels in self.all if wanted.items() <= labels.items()]

    def _container(self, labels: dict[str, str]) -> Any:
        return SimpleNamespace(
            short_id=labels[LABEL_RUN], labels=labels, remove=lambda force: self.removed.append(labels[LABEL_RUN])
        )


@pytest.fixture
def leftovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Two runs' PID records (this very process stands for their servers) and containers; what gets killed or
    removed is recorded, never done."""
    monkeypatch.setenv("TOOLCALL_MATRIX_CACHE", str(tmp_path / "cache"))
    pid_dir().mkdir(parents=True)
    argv0 = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    for index, run in enumerate((RUN_A, RUN_B)):
        record = {"pid": os.getpid(), "argv": [argv0, "serve", run], "run_id": run}
        (pid_dir() / f"{index}.json").write_text(json.dumps(record))
    done: dict[str, list[Any]] = {"killed": [], "removed": []}
    monkeypatch.setattr(launchers.os, "killpg", lambda pid, sig: done["killed"].append(pid))
    client = SimpleNamespace(containers=FakeContainers(done["removed"]))
    monkeypatch.setattr(docker, "from_env", lambda: client)
    return done


def _records() -> list[str]:
    return sorted(json.loads(path.read_text())["run_id"] for path in pid_dir().glob("*.json"))


@pytest.mark.parametrize("run_id", ["", " ", "*", "..", "../x", "a b", "-x", "x\n", "a" * 300])
def test_an_empty_or_malformed_run_id_is_an_error_and_removes_nothing(
    run_id: str, leftovers: dict[str, list[Any]]
) -> None:
    done = orchestrate("cleanup", "--run-id", run_id, cwd=REPO)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not a run id" in done.stderr and "Traceback" not in done.stderr
    assert leftovers == {"killed": [], "removed": []}
    assert _records() == [RUN_A, RUN_B]  # nothing of either run touched


def test_cleanup_without_a_choice_is_an_error_not_every_run(leftovers: dict[str, list[Any]]) -> None:
    for args in ([], ["--run-id", RUN_A, "--all-runs"]):
        done = orchestrate("cleanup", *args, cwd=REPO)
        assert done.returncode == 2 and "--all-runs" in done.stderr, done.stdout + done.stderr
    assert leftovers == {"killed": [], "removed": []}
    assert _records() == [RUN_A, RUN_B]


def test_one_runs_cleanup_removes_that_run_only(leftovers: dict[str, list[Any]]) -> None:
    done = orchestrate("cleanup", "--run-id", RUN_A, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert leftovers == {"killed": [os.getpid()], "removed": [RUN_A]}
    assert _records() == [RUN_B]


def test_every_runs_cleanup_is_asked_for_by_name(leftovers: dict[str, list[Any]]) -> None:
    done = orchestrate("cleanup", "--all-runs", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert leftovers == {"killed": [os.getpid(), os.getpid()], "removed": [RUN_A, RUN_B]}
    assert _records() == []


def test_the_library_refuses_an_empty_run_id_too(leftovers: dict[str, list[Any]]) -> None:
    with pytest.raises(RunIdError):
        launchers.cleanup("")
    assert leftovers == {"killed": [], "removed": []}


@pytest.mark.parametrize("run_id", [RUN_A, "20261203T122843Z-paper-cpu-fbef52-ablation", "probe-4242", "test-orphan"])
def test_the_run_ids_the_product_makes_are_run_ids(run_id: str) -> None:
    assert check_run_id(run_id) == run_id


def test_a_resume_of_a_directory_named_no_run_id_changes_nothing(
    tmp_path: Path, leftovers: dict[str, list[Any]]
) -> None:
    from orchestrator.runner.run.runs import resume_run

    run = tmp_path / "my run"
    shutil.copytree(REPO / "results" / "examples" / RUN_A, run)
    manifest = (run / "manifest.json").read_bytes()
    with pytest.raises(RunIdError):
        resume_run(run, allow_drift=True)
    assert (run / "manifest.json").read_bytes() == manifest
    assert leftovers == {"killed": [], "removed": []}
