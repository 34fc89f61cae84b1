"""Nothing a command writes or removes resolves outside the run directory (issue 28, defect 3). `report` used to
follow a `RUN/report` symlink, write its files where it pointed and recursively delete the target's `cells/`
(exit 0). Every write, rename and removal inside a run now goes through one guard (runner/store/runpaths.py):
a symlink on the way (or `..`, or another root) is one clear error naming it, and nothing outside is touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runner.store import storerepair
from orchestrator.runner.store.runpaths import OutsideRunError, StoreError, owned_path, write_json_atomic
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.store.streamstore import StreamStore
from tests.cliinprocess import orchestrate

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "results" / "examples"
CPU_RUN = EXAMPLES / "20261203T131653Z-cpu-87d008"
PRODUCT_RUN = EXAMPLES / "20261203T194941Z-product-cpu-7ec463"


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes: what a test compares before and after the attack."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every run, with a `cells/` folder and a page of its own: what the attack reached."""
    target = tmp_path / "outside"
    (target / "cells").mkdir(parents=True)
    (target / "cells" / "precious.txt").write_text("not the product's\n")
    (target / "index.html").write_text("mine\n")
    return target


def copied(tmp_path: Path, run: Path = CPU_RUN) -> Path:
    destination = tmp_path / "results" / run.name
    shutil.copytree(run, destination, symlinks=True)
    return destination


def linked(run: Path, relative: str, target: Path) -> None:
    """Replace `run/relative` with a symbolic link to `target`."""
    path = run / relative
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def refused(done: subprocess.CompletedProcess[str], link: Path) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "symbolic link" in done.stderr, done.stderr
    assert str(link) in done.stderr.replace("\n", ""), done.stderr


# ------------------------------------------------------------------------------------------------ the commands


def test_report_through_a_report_link_writes_and_deletes_nothing_outside(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path)
    linked(run, "report", outside)
    before = files(outside)
    done = orchestrate("report", str(run), cwd=REPO)
    refused(done, run / "report")
    assert files(outside) == before  # cells/precious.txt still there; no page written over index.html
    assert (run / "report").is_symlink() and not list(run.glob(".report-*"))  # no staging folder left behind


@pytest.mark.parametrize("relative", ["report/cells", "report/index.html", "report/DAMAGE.md", "report/cells_long.csv"])
def test_report_through_a_link_inside_report_changes_nothing(tmp_path: Path, outside: Path, relative: str) -> None:
    run = copied(tmp_path)
    target = outside / "cells" if relative == "report/cells" else outside / "index.html"
    linked(run, relative, target)
    (run / "report" / "cells_wide.md").write_text("an older report\n")  # a new report would differ from it
    report_before = files(run / "report")
    before = files(outside)
    done = orchestrate("report", str(run), cwd=REPO)
    refused(done, run / relative)
    assert files(outside) == before
    assert files(run / "report") == report_before  # all or nothing: the report as it was


def test_report_under_allow_damaged_follows_no_link_either(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path)
    linked(run, "report", outside)
    before = files(outside)
    done = orchestrate("report", "--allow-damaged", str(run), cwd=REPO)
    refused(done, run / "report")
    assert files(outside) == before


def test_triage_saves_no_verdicts_through_a_link(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path)
    linked(run, "report", outside)
    before = files(outside)
    done = orchestrate("triage", str(run), cwd=REPO)
    refused(done, run / "report")
    assert files(outside) == before


def test_channels_writes_nothing_through_a_link(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path, PRODUCT_RUN)
    linked(run, "report", outside)
    before = files(outside)
    done = orchestrate("channels", str(run), cwd=REPO)
    refused(done, run / "report")
    assert files(outside) == before


def test_images_into_a_run_writes_its_manifest_through_no_link(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path)
    record = tmp_path / "images.json"
    record.write_text(json.dumps({"entries": []}))
    linked(run, "manifest.json.tmp", outside / "index.html")  # the temporary name a manifest is written under
    before, manifest = files(outside), (run / "manifest.json").read_bytes()
    done = orchestrate("images", "--record", str(record), "--into", str(run), cwd=REPO)
    refused(done, run / "manifest.json.tmp")
    assert files(outside) == before
    assert (run / "manifest.json").read_bytes() == manifest and not (run / "manifest.json").is_symlink()


def test_a_run_opened_through_a_link_to_it_is_reported_as_before(tmp_path: Path) -> None:
    """Which run to open is the caller's choice: the run directory itself may be a link (of the run's name: a run
    id is its directory's name)."""
    run, plain = copied(tmp_path / "linked"), copied(tmp_path / "plain")
    link = tmp_path / "via" / run.name
    link.parent.mkdir()
    link.symlink_to(run)
    done = orchestrate("report", str(link), cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert orchestrate("report", str(plain), cwd=REPO).returncode == 0
    assert files(run / "report") == files(plain / "report")


# ------------------------------------------------------------------------------------- the store's own writes


def test_the_store_writes_no_cell_file_through_a_cells_link(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path)
    linked(run, "cells", outside / "cells")
    before = files(outside)
    with pytest.raises(OutsideRunError):
        RunStore(run).write_cell("c", {"cell_id": "c"})
    assert files(outside) == before


def test_the_store_appends_no_stream_or_torn_line_through_a_link(tmp_path: Path, outside: Path) -> None:
    run = copied(tmp_path)
    linked(run, "streams", outside / "cells")
    linked(run, "turns.jsonl.torn", outside / "index.html")
    before = files(outside)
    with pytest.raises(OutsideRunError):
        StreamStore(run).append("c", {"key": {}})
    with pytest.raises(OutsideRunError):
        storerepair.keep_torn(RunStore(run), b'{"cell_id": "c", "se')
    assert files(outside) == before


def test_a_manifest_update_replaces_no_file_through_a_hard_link(tmp_path: Path, outside: Path) -> None:
    """A stale temporary file hard-linked to a file elsewhere is replaced, not written through."""
    run = copied(tmp_path)
    os.link(outside / "index.html", run / "manifest.json.tmp")
    RunStore(run).update_manifest(note="x")
    assert (outside / "index.html").read_text() == "mine\n"
    assert json.loads((run / "manifest.json").read_text())["note"] == "x"


# ------------------------------------------------------------------------------------------------- the guard


@pytest.mark.parametrize("relative", ["../elsewhere", "report/../../elsewhere"])
def test_the_guard_refuses_a_way_out_by_dots(tmp_path: Path, relative: str) -> None:
    with pytest.raises(OutsideRunError, match=r"'\.\.'"):
        owned_path(tmp_path / "run", tmp_path / "run" / relative)


def test_the_guard_refuses_another_root_and_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not inside the run directory"):
        owned_path(tmp_path / "run", tmp_path / "other" / "file")
    with pytest.raises(OutsideRunError):
        write_json_atomic(tmp_path / "other.json", {}, run_dir=tmp_path / "run")
    assert not (tmp_path / "other.json").exists()


def test_the_guard_refuses_a_link_even_one_pointing_inside_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "real").mkdir(parents=True)
    (run / "alias").symlink_to(run / "real")
    with pytest.raises(OutsideRunError, match="alias"):
        owned_path(run, run / "alias" / "file")
    assert owned_path(run, run / "real" / "new" / "file") == run / "real" / "new" / "file"


# ---------------------------------------------------------------------------------------- as a non-root user


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the `nobody` user can reach (pytest's tmp_path is private to root)."""
    directory = Path(tempfile.mkdtemp(prefix="toolcall-guard-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_report_run_as_nobody_through_a_link_to_nobodys_files_touches_nothing(shared_dir: Path) -> None:
    """As root every folder is writable, so a test as root cannot show that only the guard stopped the write: here
    the command runs as `nobody`, the link points at a folder `nobody` owns and may write, and still nothing
    outside the run changes."""
    run = copied(shared_dir)
    outside = shared_dir / "outside"
    (outside / "cells").mkdir(parents=True)
    (outside / "cells" / "precious.txt").write_text("nobody's own\n")
    linked(run, "report", outside)
    as_nobody: list[str] = []
    if os.geteuid() == 0:  # as root (CI's containers): the command runs as nobody, who owns every file here
        for path in [shared_dir, *shared_dir.rglob("*")]:
            os.lchown(path, 65534, 65534)
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    before = files(outside)
    command = [*as_nobody, sys.executable, "-m", "orchestrator"]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(shared_dir), "COLUMNS": "200"}
    done = subprocess.run([*command, "report", str(run)], env=env, cwd=shared_dir, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    refused(done, run / "report")
    assert files(outside) == before
