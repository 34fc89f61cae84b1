"""A full disk (or a quota, or a file size limit) while a run writes: one clear error naming the file.

Every write point of the store goes through here. A failed append leaves turns.jsonl as it was before the
record (the partial bytes are cut off again), a failed atomic write leaves the old file and no temporary one,
so what was written stays intact and a resume after freeing space finishes the run."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class DiskFull(OSError):
    """No room to write `filename` (ENOSPC, EDQUOT or EFBIG)."""

    def __str__(self) -> str:
        reason = "no space left on device" if self.errno == errno.ENOSPC else f"no space left ({self.strerror})"
        return f"{self.filename}: {reason}"


def is_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def full_disk_error(exc: BaseException) -> DiskFull | None:
    """The full-disk error behind `exc` (itself, its cause or context: a later write in a `finally` may have
    failed too, without a file name), preferring one that names its file."""
    found: list[OSError] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if is_full(current):
            assert isinstance(current, OSError)
            found.append(current)
        current = current.__cause__ or current.__context__
    named = [e for e in found if isinstance(e, DiskFull)] or [e for e in found if e.filename]
    chosen = named[0] if named else (found[0] if found else None)
    if chosen is None:
        return None
    if isinstance(chosen, DiskFull):
        return chosen
    return DiskFull(chosen.errno, chosen.strerror or os.strerror(chosen.errno or 0), chosen.filename or "(a file)")


@contextlib.contextmanager
def named_writes(path: Path, *, remove: Path | None = None) -> Iterator[None]:
    """Turn a full-disk OSError inside into DiskFull naming `path`; `remove` (a temporary file) is deleted."""
    try:
        yield
    except OSError as exc:
        if not is_full(exc) or isinstance(exc, DiskFull):
            raise
        if remove is not None:
            with contextlib.suppress(OSError):
                remove.unlink()
        raise DiskFull(exc.errno, exc.strerror or os.strerror(exc.errno or 0), str(path)) from exc


def append_line(handle: BinaryIO, data: bytes, path: Path) -> None:
    """Append `data` to an unbuffered file opened "ab"; on a full disk the bytes already written are cut off
    again (the file ends where it did), then DiskFull."""
    fd = handle.fileno()
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            written = handle.write(view)
            if not written:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[written:]
    except OSError as exc:
        if is_full(exc):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        with named_writes(path):
            raise
