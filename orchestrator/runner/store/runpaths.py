"""The one path guard for what a command writes or removes inside a run directory (issue 28, defect 3).

A run directory is data someone may have edited: `report` used to follow a `RUN/report` symlink, write its files
wherever it pointed and recursively delete the target's `cells/`. Every write, rename, new folder and removal inside
a run goes through `owned_path`: the path lies lexically under the run directory, and no entry on the way down from
the run directory to it (the path itself included) is a symbolic link, which may point anywhere. The run directory
itself may be reached through links (`results/latest`): which run to open is the caller's choice. A refused path is
an OutsideRunError (a StoreError) naming it, raised before anything is changed. A file is replaced through a new
temporary file and a rename, so a hard link to a file outside the run is never written through either.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from orchestrator.runner.store.diskfull import named_writes


class StoreError(ValueError):
    """A run directory that cannot be read or written as asked: the message names the file and why."""


class OutsideRunError(StoreError):
    """A write or removal inside a run that could reach outside it: nothing was written or removed."""


def owned_path(run_dir: Path, path: Path) -> Path:
    """`path`, when writing or removing it cannot touch anything outside `run_dir` (see the module); else
    OutsideRunError naming it."""
    try:
        relative = path.relative_to(run_dir)
    except ValueError:
        raise OutsideRunError(f"{path}: not inside the run directory {run_dir}; nothing written or removed") from None
    if ".." in relative.parts:
        raise OutsideRunError(f"{path}: '..' leads outside the run directory {run_dir}; nothing written or removed")
    current = run_dir
    for part in relative.parts:
        current = current / part
        if current.is_symlink():
            raise OutsideRunError(
                f"{current}: a symbolic link inside the run directory (it may point outside the run); nothing "
                "written or removed: replace it with the file or folder itself"
            )
    return path


def owned_dir(run_dir: Path, path: Path) -> Path:
    """The folder `path` inside the run, made if missing (with its parents), after the guard."""
    owned_path(run_dir, path).mkdir(parents=True, exist_ok=True)
    return path


def remove_owned(run_dir: Path, path: Path) -> None:
    """Remove the file or folder `path` inside the run, if there (a folder with all it holds: rmtree removes a
    link it meets inside, never what the link points to)."""
    owned_path(run_dir, path)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def replace_owned(run_dir: Path, source: Path, target: Path) -> None:
    """Rename `source` (a file this command made) to `target` inside the run."""
    owned_path(run_dir, target).parent.mkdir(parents=True, exist_ok=True)
    source.replace(target)


def write_bytes_atomic(path: Path, data: bytes, *, run_dir: Path) -> None:
    """Write `path` inside the run through a temporary name, flushed to disk, then renamed: a crash leaves the old
    file or the new one, a full disk a DiskFull naming `path` and no temporary file."""
    tmp = owned_path(run_dir, path.with_suffix(path.suffix + ".tmp"))
    owned_path(run_dir, path)
    tmp.unlink(missing_ok=True)  # one left by a crash (or a hard link to a file elsewhere): never written through
    with named_writes(path, remove=tmp), tmp.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def write_json_atomic(path: Path, data: Any, *, run_dir: Path) -> None:
    """`data` as indented JSON in `path` inside the run, as `write_bytes_atomic` writes."""
    write_bytes_atomic(path, json.dumps(data, indent=2, default=str, sort_keys=False).encode(), run_dir=run_dir)
