"""Whole-matrix checks on what a matrix expands to (runner/config/matrix.py runs them when a matrix validates): every
message starts with the field path it is about, so the loader can point at its line."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from orchestrator.core.types import ToolsMode
from orchestrator.runner.config.matrixentries import Exclude

# (cell id, stack label, model name) of each cell, in expansion order.
CellName = tuple[str, str, str]


CASE_NOTE = "one file on a case-insensitive file system (macOS, Windows): rename one of them"


def check_cell_ids(cells: Iterable[CellName], *, max_length: int, max_cells: int) -> int:
    """Refuse a matrix with no cell, too many cells, an id too long for a file name, or two cells whose
    different names slug to one id, or to ids that differ only in case (one would overwrite the other's files).
    Returns the cell count."""
    owners: dict[str, tuple[str, str]] = {}
    folded: dict[str, str] = {}  # lower-cased id -> the id as it is
    count = 0
    for cell_id, stack, model in cells:
        count += 1
        if count > max_cells:
            raise ValueError(f"models: the matrix expands to more than {max_cells} cells")
        if len(cell_id) > max_length:
            raise ValueError(
                f"models: cell id {cell_id[:60]!r}… is {len(cell_id)} characters, at most {max_length} (it names "
                f"files): shorten model {model[:40]!r} or stack {stack[:40]!r} (an id)"
            )
        owner = owners.setdefault(cell_id, (stack, model))
        if owner != (stack, model):
            raise ValueError(
                f"models: stack {stack!r} with model {model!r} and stack {owner[0]!r} with model {owner[1]!r} "
                f"give the same cell id {cell_id!r}: rename one of them"
            )
        other = folded.setdefault(cell_id.lower(), cell_id)
        if other != cell_id:
            owner = owners[other]
            raise ValueError(
                f"models: stack {stack!r} with model {model!r} and stack {owner[0]!r} with model {owner[1]!r} "
                f"give cell ids {cell_id!r} and {other!r}, which differ only in case: {CASE_NOTE}"
            )
    if count == 0:
        raise ValueError(
            "exclude: the matrix has no cells (every stack, model and mode is excluded, or no model has a source "
            "for a listed stack)"
        )
    return count


def check_excludes(
    rules: Sequence[Exclude], stack_names: set[str], model_names: set[str], modes: Sequence[ToolsMode]
) -> None:
    """An exclude rule names what the matrix has: a typo would silently exclude nothing."""
    for index, rule in enumerate(rules):
        if rule.stack is not None and rule.stack not in stack_names:
            raise ValueError(f"exclude.{index}.stack: {rule.stack!r} is no stack label or stack of this matrix")
        if rule.model is not None and rule.model not in model_names:
            raise ValueError(f"exclude.{index}.model: {rule.model!r} is no model of this matrix")
        if rule.mode is not None and rule.mode not in modes:
            raise ValueError(f"exclude.{index}.mode: {rule.mode.value!r} is not in modes")


def check_suites_once(suites: Sequence[str]) -> None:
    """A suite is one entry of `tasks`: a second entry would run its seeds again in every cell (the same seed ids
    twice), never a separate sample."""
    for index, name in enumerate(suites):
        if name in suites[:index]:
            raise ValueError(
                f"tasks.{index}: suite {name!r} is listed twice (first at tasks.{suites.index(name)}): its seeds "
                "would run twice in every cell; list it once, with every seed it should run"
            )


def check_seed_ids_distinct(seed_ids: dict[str, list[str]]) -> None:
    """Two suites of one matrix never share a seed id: a turn record's identity is (cell, seed, seed attempt,
    turn, attempt), so a shared id would make two cases' records copies of each other (core/runrecords.py)."""
    owner: dict[str, str] = {}
    for index, (suite, ids) in enumerate(seed_ids.items()):
        for seed in ids:
            first = owner.setdefault(seed, suite)
            if first != suite:
                raise ValueError(
                    f"tasks.{index}: suite {suite!r} has seed id {seed!r}, as suite {first!r} has: a record names its "
                    "case by seed id, so the two cases' records would be one; rename one of them"
                )


def check_case_distinct(stack_labels: Sequence[str], model_names: Sequence[str]) -> None:
    """Stack labels (they name servers' files) and model names (part of every cell id) that differ only in case
    would be one file where case is not told apart: refused, naming both (an exact repeat is refused before)."""
    for field, what, names in (("stacks", "stack label", stack_labels), ("models", "model name", model_names)):
        seen: dict[str, int] = {}
        for index, name in enumerate(names):
            first = seen.setdefault(name.lower(), index)
            if names[first] != name:
                suffix = ".name" if field == "models" else ""
                raise ValueError(
                    f"{field}.{index}{suffix}: {what} {name!r} and {names[first]!r} ({field}.{first}) differ only "
                    f"in case: {CASE_NOTE}"
                )
