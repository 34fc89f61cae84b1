"""Reading a matrix file: YAML parsed and validated, with errors that name the file, the field path and the line
(the model itself, and its expansion into servers and cells, are in runner/matrix.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.runner.matrix import Matrix


class MatrixError(ValueError):
    """A bad matrix file: the message names the file, the field path and the line."""


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the YAML node at `loc` (or of its deepest existing parent)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((value for key, value in node.value if key.value == str(part)), None)
            if match is None:
                break
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def load_matrix(path: Path) -> tuple[Matrix, str]:
    """Parse and validate a matrix file; returns (matrix, file sha256). Raises MatrixError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise MatrixError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise MatrixError(f"{path}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise MatrixError(f"{path}:1: a matrix file is a mapping of fields")
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        named = str(error["msg"]).removeprefix("Value error, ").split(":", 1)[0]
        if not loc and named in data:  # a whole-matrix check names the field it is about: point at its line
            loc = (named,)
        field = ".".join(str(part) for part in loc) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "required field is missing"
        line = _line_of(node, loc)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise MatrixError(f"{path}:{line}: field {field}: {message}{more}") from None
    return matrix, hashlib.sha256(text.encode()).hexdigest()
