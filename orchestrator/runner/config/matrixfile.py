"""Reading a matrix file: YAML parsed within bounds (serving/yamlfiles.py: size, nesting, aliases, plain types
only) and validated, with one error that names the file, the field path and the line (the model itself, and
its expansion into servers and cells, are in runner/config/matrix.py)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.runner.config.matrix import Matrix
from orchestrator.runner.config.resolve import RunAssets, validation_context
from orchestrator.serving.yamlfiles import YamlInputError, load_yaml

MESSAGE_LIMIT = 400  # characters of a validation message (a hostile value may be megabytes long)
# A whole-matrix check starts its message with the field path it is about ("models.1.name: ...").
_LEADING_PATH = re.compile(r"([A-Za-z_]\w*(?:\.\w+)*)[\s:(]")


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
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MESSAGE_LIMIT else flat[: MESSAGE_LIMIT - 1] + "…"


def _named_path(message: str, data: dict[Any, Any]) -> tuple[Any, ...]:
    """The field path a whole-matrix message starts with, when it names a top-level field."""
    match = _LEADING_PATH.match(message + " ")
    if match is None or match.group(1).split(".")[0] not in data:
        return ()
    return tuple(int(part) if part.isdigit() else part for part in match.group(1).split("."))


def validation_message(path: Path, node: yaml.Node | None, data: dict[Any, Any], exc: ValidationError) -> str:
    """`FILE:LINE: field PATH: MESSAGE (and N more)`, on one line, for the first error."""
    error = exc.errors(include_url=False, include_input=False)[0]
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-")))
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if not loc:
        loc = _named_path(message, data)
        message = message.removeprefix(".".join(str(part) for part in loc) + ": ") if loc else message
    field = ".".join(str(part) for part in loc) or "(top level)"
    if error["type"] == "missing":
        message = "required field is missing"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}:{_line_of(node, loc)}: field {_one_line(field)}: {_one_line(message)}{more}"


def load_matrix(path: Path, assets: RunAssets | None = None) -> tuple[Matrix, str]:
    """Parse and validate a matrix file against `assets` (default: the checkout's stacks and suites, resolved
    once here and carried by the matrix); returns (matrix, file sha256). Raises MatrixError, and nothing else."""
    try:
        text, node, data = load_yaml(path)
    except YamlInputError as exc:
        raise MatrixError(str(exc)) from None
    if not isinstance(data, dict):
        raise MatrixError(f"{path}:1: a matrix file is a mapping of fields")
    try:
        matrix = Matrix.model_validate(data, context=validation_context(assets or RunAssets.from_checkout()))
    except ValidationError as exc:
        raise MatrixError(validation_message(path, node, data, exc)) from None
    return matrix, hashlib.sha256(text.encode()).hexdigest()
