"""Read JSON Lines input with one clear error naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


class InputError(Exception):
    """Bad user input: the message names what and where."""


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "(record)"
    return f"field {where!r}: {error['msg']}"


def read_jsonl(path: Path, model: type[ModelT]) -> Iterator[tuple[int, ModelT]]:
    """Yield (line number, record) for each non-blank line; raise InputError on the first bad one."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except ValueError as exc:
                    raise InputError(f"{path}:{number}: bad JSON: {exc}") from exc
                if not isinstance(data, dict):
                    raise InputError(f"{path}:{number}: expected a JSON object, got {type(data).__name__}")
                try:
                    yield number, model.model_validate(data)
                except ValidationError as exc:
                    raise InputError(f"{path}:{number}: {_first_error(exc)}") from exc
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text: {exc}") from exc
