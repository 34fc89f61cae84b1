"""Load stack definitions from `stacks/*.yaml` (the one place a stack's knowledge lives)."""

from __future__ import annotations

import difflib
import os
import re
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from orchestrator.serving.stackspec import StackSpec
from orchestrator.serving.yamlfiles import YamlInputError, decode_text, parse_yaml, read_bytes_bounded

REPO_ROOT = Path(__file__).resolve().parents[2]
# A stack or suite is named by its file's stem, never by a path: the name is checked before it becomes one.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def stacks_dir() -> Path:
    return Path(os.environ.get("TOOLCALL_MATRIX_STACKS", REPO_ROOT / "stacks"))


class InvalidStackError(ValueError):
    """A stack file that cannot be read or does not validate (a ValueError, as before)."""


class UnknownStackError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def plain_name_problem(name: object, what: str) -> str | None:
    """Why `name` cannot name a definition file in its directory (None: it can): a plain name of at most 64
    letters, digits and `_ . -`, starting with a letter or digit, without `..` (no `/`, no absolute path)."""
    if isinstance(name, str) and PLAIN_NAME.fullmatch(name) and ".." not in name:
        return None
    shown = repr(name)[:80] if isinstance(name, str) else f"of type {type(name).__name__}"
    return (
        f"{what} name {shown} is not a plain name (at most 64 letters, digits and _ . -, no '/' or '..'): "
        f"a {what} is a file of its directory, named without a path"
    )


def stack_names() -> list[str]:
    return sorted(path.stem for path in stacks_dir().glob("*.yaml"))


@cache
def load_stack(name: str) -> StackSpec:
    problem = plain_name_problem(name, "stack")
    if problem is not None:
        raise UnknownStackError(problem)
    path = stacks_dir() / f"{name}.yaml"
    if not path.is_file():
        names = stack_names()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownStackError(f"unknown stack {name!r} (known: {', '.join(names)}){hint}")
    return read_stack_file(path)


def read_stack_file(path: Path) -> StackSpec:
    """A stack definition read within the bounds of every YAML file the package reads (serving/yamlfiles.py):
    a hostile or broken file is one `InvalidStackError` naming the file, never a traceback."""
    try:
        raw = read_bytes_bounded(path)
    except YamlInputError as exc:
        raise InvalidStackError(str(exc)) from None
    return parse_stack(raw, path)


def parse_stack(raw: bytes, path: Path) -> StackSpec:
    """A stack definition from its file's bytes (`path` names it in errors)."""
    try:
        data = parse_yaml(decode_text(raw, path), path)[1]
    except YamlInputError as exc:
        raise InvalidStackError(str(exc)) from None
    try:
        return StackSpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidStackError(f"{path}: invalid stack definition: {exc}") from exc
