"""Load stack definitions from `stacks/*.yaml` (the one place a stack's knowledge lives)."""

from __future__ import annotations

import difflib
import os
from functools import cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from orchestrator.serving.stackspec import StackSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


def stacks_dir() -> Path:
    return Path(os.environ.get("TOOLCALL_MATRIX_STACKS", REPO_ROOT / "stacks"))


class UnknownStackError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def stack_names() -> list[str]:
    return sorted(path.stem for path in stacks_dir().glob("*.yaml"))


@cache
def load_stack(name: str) -> StackSpec:
    path = stacks_dir() / f"{name}.yaml"
    if not path.is_file():
        names = stack_names()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownStackError(f"unknown stack {name!r} (known: {', '.join(names)}){hint}")
    try:
        data = yaml.safe_load(path.read_text())
        return StackSpec.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"{path}: invalid stack definition: {exc}") from exc
