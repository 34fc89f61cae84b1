"""Read JSON Lines input with one clear error naming the file and line."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import msgspec
import numpy as np
from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)
MAX_LINE_BYTES = 64 * 1024 * 1024  # far above any record; a longer line is refused before it fills memory


class InputError(Exception):
    """Bad user input: the message names what and where."""


MAX_JSON_FILE_BYTES = 64 * 1024 * 1024  # a manifest or cell file: far above any this code writes


def read_regular_file(path: Path, max_bytes: int = MAX_JSON_FILE_BYTES) -> bytes:
    """A regular file's bytes, at most `max_bytes`: ValueError for a longer file (refused before it is read whole)
    or one that is no regular file (a FIFO would block the reader forever, a device never end), OSError where it
    cannot be opened. Opened without blocking, so a FIFO is refused, not waited on."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError("not a regular file")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes; not read")
    return data


class LineTooLong(ValueError):
    """A line longer than a reader's limit, refused before it is read whole."""

    def __init__(self, number: int, limit: int) -> None:
        super().__init__(f"line {number} is longer than {limit} bytes")
        self.number, self.limit = number, limit

    def where(self, path: Path) -> str:
        return f"{path}:{self.number}: line longer than {self.limit} bytes: not a record"


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "(record)"
    return f"field {where!r}: {error['msg']}"


def text_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for each non-blank line of a JSON Lines text. Lines end at `\\n` only (a `\\r` before
    it is JSON whitespace): `str.splitlines` would also cut at U+2028, U+0085 and the other Unicode line breaks,
    which a JSON string may hold raw, and report the halves as truncated JSON."""
    return ((number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip())


def read_jsonl(path: Path, model: type[ModelT]) -> Iterator[tuple[int, ModelT]]:
    """Yield (line number, record) for each non-blank line; raise InputError on the first bad one. Lines end
    at `\n` only (a JSON string may hold U+2028); each must be UTF-8 JSON, an object, at most MAX_LINE_BYTES
    long and nested no deeper than the JSON reader allows."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:  # a directory, a device that fails mid-read
                raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise InputError(LineTooLong(number, MAX_LINE_BYTES).where(path))
            if raw.strip():
                yield number, _record(path, number, raw, model)


def _record(path: Path, number: int, raw: bytes, model: type[ModelT]) -> ModelT:
    where = f"{path}:{number}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: bad JSON: {exc}") from exc
    except RecursionError as exc:
        raise InputError(f"{where}: bad JSON: nested too deeply to read") from exc
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{where}: {_first_error(exc)}") from exc
    except RecursionError as exc:
        raise InputError(f"{where}: record nested too deeply to read") from exc


READ_CHUNK = 16 * 1024 * 1024  # bytes read at a time: a file of any size is read in bounded memory


@dataclass(frozen=True)
class Chunk:
    """Complete lines of a file (`data` ends at a `\\n`, or is the unended tail), numbered from `first`;
    `base`: where `data` starts in the file (a line's byte offset is `base` plus its start in `data`)."""

    first: int
    data: bytes | memoryview
    ends: np.ndarray  # the offset of each `\\n` in data
    base: int = 0

    def starts(self) -> np.ndarray:
        """The file offset of each line's first byte (the unended tail's included)."""
        within = np.concatenate(([0], self.ends[: self.lines - 1] + 1)) if self.lines else np.empty(0, np.intp)
        return within.astype(np.int64) + self.base

    @property
    def unended(self) -> bool:
        """The chunk is the file's unended tail: bytes after its last `\\n`."""
        return len(self.data) > 0 and (len(self.ends) == 0 or int(self.ends[-1]) != len(self.data) - 1)

    @property
    def lines(self) -> int:
        return len(self.ends) + int(self.unended)


def _newlines(data: bytes, start: int, stop: int) -> np.ndarray:
    """The offsets (from `start`) of every `\\n` in data[start:stop]: memchr, one call a line, is three times
    quicker than comparing every byte in numpy for lines of a few KiB (the records' size)."""
    found: list[int] = []
    find, position = data.find, data.find(b"\n", start, stop)
    while position >= 0:
        found.append(position - start)
        position = find(b"\n", position + 1, stop)
    return np.asarray(found, dtype=np.intp)


NEWLINE = ord("\n")


def read_ahead(handle: BinaryIO) -> Iterator[bytes]:
    """The file's READ_CHUNK-byte reads, each next one read by a thread while the caller decodes this one (a
    read leaves the GIL: the copy from the page cache overlaps the decoding). At most three chunks are held (the
    caller's, one waiting, one being read); an error reading is raised here, in the caller; a caller that stops
    early stops the thread."""
    ready: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                chunk = handle.read(READ_CHUNK)
                ready.put(chunk)
                if not chunk:
                    return
        except BaseException as exc:  # handed to the caller, raised there
            ready.put(exc)

    thread = threading.Thread(target=reader, name="read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a reader waiting to put its last chunk
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.05)
        thread.join()


def iter_chunks(
    handle: BinaryIO, max_line: int | None = None, on_long: Callable[[int], None] | None = None
) -> Iterator[Chunk]:
    """A binary file as chunks of whole lines, about READ_CHUNK bytes each (views into what was read, not
    copies), then its unended tail (if any); LineTooLong on a line longer than `max_line` bytes (refused once
    that many bytes of it are read, never read whole). A line cut by a chunk's end is its own one-line chunk.
    `on_long`: a line too long is skipped instead (its bytes passed over unkept to its `\n`), and `on_long` is
    told its number (a reader that reads around damage; numbering goes on as in the file)."""
    max_line = MAX_LINE_BYTES if max_line is None else max_line
    if on_long is not None and max_line < READ_CHUNK:
        raise ValueError("skipping long lines needs a line bound of at least READ_CHUNK bytes")
    number, carried, position = 1, 0, handle.tell() if handle.seekable() else 0  # a pipe: offsets from its start
    pieces: list[bytes] = []  # a line that began in an earlier chunk, `carried` bytes of it so far
    for chunk in read_ahead(handle):
        start, chunk_base = 0, position
        position += len(chunk)
        if carried:
            head = chunk.find(b"\n")
            if head < 0:  # the carried line goes on past this chunk too
                carried += len(chunk)
                pieces = _kept(pieces, chunk, carried, number, max_line, on_long)
                continue
            line, start = b"".join([*pieces, chunk[: head + 1]]), head + 1
            too_long, pieces, carried = carried + head > max_line, [], 0
            if too_long and on_long is not None:
                on_long(number)
            else:
                _check_length(len(line) - 1, number, max_line)
                yield Chunk(number, line, np.asarray([len(line) - 1]), chunk_base + head + 1 - len(line))
            number += 1
        cut = chunk.rfind(b"\n") + 1
        if cut > start:
            body = memoryview(chunk)[start:cut]
            ends = _newlines(chunk, start, cut)
            if len(body) > max_line:  # only where a chunk is longer than a line may be: find the one at fault
                for index, line in enumerate(bytes(body).split(b"\n")):
                    _check_length(len(line), number + index, max_line)
            yield Chunk(number, body, ends, chunk_base + start)
            number += len(ends)
        carry = chunk[max(cut, start) :]
        if carry:
            carried = len(carry)
            pieces = _kept([], carry, carried, number, max_line, on_long)
    if carried and carried > max_line and on_long is not None:
        on_long(number)
    elif carried:
        unended = Chunk(number, b"".join(pieces), np.empty(0, dtype=np.intp), position - carried)
        yield unended  # no `\\n` at its end


def _kept(
    pieces: list[bytes], piece: bytes, carried: int, number: int, max_line: int, on_long: Callable[[int], None] | None
) -> list[bytes]:
    """The pieces of a carried line with `piece` added, while it is within `max_line` (`carried`: its length so
    far); past it, LineTooLong, or (skipping, `on_long` given) none kept."""
    if carried <= max_line:
        return [*pieces, piece]
    if on_long is None:
        raise LineTooLong(number, max_line)
    return []


def _check_length(length: int, number: int, max_line: int) -> None:
    if length > max_line:
        raise LineTooLong(number, max_line)


def numbered_lines(chunk: Chunk) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its `\\n`) for each non-blank line of a chunk."""
    lines = bytes(chunk.data).split(b"\n")
    if not chunk.unended:
        lines.pop()
    return ((chunk.first + i, raw) for i, raw in enumerate(lines) if raw.strip())


BulkDecode = Callable[[bytes | memoryview, np.ndarray], list[Any]]  # (lines, offsets of their `\\n`) -> records


def bulk_decoded(chunk: Chunk, decode_lines: BulkDecode) -> list[Any] | None:
    """Every line of a chunk decoded at once (fast), or None where the line-by-line reader must decide: a line
    that does not run from `{` to `}` (a blank or indented line, a value cut over two lines, anything but a
    record as written), a bulk decoder that fails, or one that reads another number of records than the chunk
    has lines (two objects on a line)."""
    if chunk.unended or not _all_lines_open_an_object(chunk):
        return None
    try:
        records = decode_lines(chunk.data, chunk.ends)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return records if len(records) == chunk.lines else None


def _all_lines_open_an_object(chunk: Chunk) -> bool:
    """Every line starts with `{` and ends with `}`: no record can then run over two lines (the bulk decoder
    reads a stream of values, not lines), and two records on one line show in the count."""
    if not len(chunk.ends) or int(chunk.ends[0]) == 0:
        return False
    data = np.frombuffer(chunk.data, dtype=np.uint8)
    starts = np.concatenate(([0], chunk.ends[:-1] + 1))
    return bool((data[starts] == OPEN_BRACE).all() and (data[chunk.ends - 1] == CLOSE_BRACE).all())


OPEN_BRACE, CLOSE_BRACE = ord("{"), ord("}")


def read_jsonl_batches(
    path: Path, model: type[ModelT], decode_lines: BulkDecode, *, fill_defaults: bool = True
) -> Iterator[list[dict[str, Any]]]:
    """What `read_jsonl` yields, as `model_dump(mode="json")` dicts in batches of a chunk's lines, for files of
    millions of lines: a chunk of good lines is decoded at once by `decode_lines` (msgspec, typed as strictly as
    `model`; defaults filled from `model`, unless the caller fills them column by column: `fill_defaults=False`),
    and a chunk it refuses is read line by line by `read_jsonl`'s own reader, which names the bad line (or, where
    the two disagree, is the one obeyed)."""
    defaults = {name: field.get_default() for name, field in model.model_fields.items() if not field.is_required()}
    defaults = defaults if fill_defaults else {}
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        try:
            for chunk in iter_chunks(handle):
                rows = bulk_decoded(chunk, decode_lines)
                if rows is None:
                    yield [_record(path, n, raw, model).model_dump(mode="json") for n, raw in numbered_lines(chunk)]
                    continue
                for row in rows:
                    for name, default in defaults.items():
                        row.setdefault(name, default)
                yield rows
        except (OSError, ValueError) as exc:
            raise InputError(read_error(path, exc)) from exc


def read_error(path: Path, exc: OSError | ValueError) -> str:
    """`path:N: line longer than ...` for an overlong line (as `read_jsonl` says it), else what failed."""
    if isinstance(exc, LineTooLong):
        return exc.where(path)
    return f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}"
