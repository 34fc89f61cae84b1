"""A cell's identity, in one place: its key (the axes that make it a cell) and its id (a file-safe name).

A cell is (stack config, model, tools mode) and later axes (`CellAxes`: the channel, streaming, tool_choice,
parallel_tool_calls, the sample index, the guard an ablation switches off), which have a default each; an axis
at its default adds nothing to the id, so the ids of every run made before the axis existed stay what they were.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.types import ToolsMode

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def slug(text: str) -> str:
    """A file-name-safe form of a label: letters, digits and `_ . -` only, so never a path (no `/`), and never
    starting with `.` (no `..`, no hidden file). The matrix refuses names that would collide or run long
    (runner/config/matrixentries.py, runner/config/matrixchecks.py); this is the last line, for ids built anywhere."""
    safe = _UNSAFE.sub("_", text)
    return "_" + safe[1:] if safe.startswith(".") else safe


# The channels a case is scored in (core/scoring.py), and the channel axis of a cell: "agent" is the plain loop.
Channel = Literal["model", "product"]
CHANNELS: tuple[Channel, ...] = get_args(Channel)
CellChannel = Literal["agent", Channel]


class CellAxes(BaseModel):
    """The later axes of a cell, each with its default; declared here only (the runner's `Cell` inherits them)."""

    model_config = ConfigDict(frozen=True)

    channel: CellChannel = Field(
        "agent", description="agent: the plain loop; model: the first answer only; product: the loop with guards."
    )
    stream: bool = False
    tool_choice: str = Field("auto", description="auto | required | none | a tool name.")
    parallel_tool_calls: bool | None = Field(None, description="None: not sent.")
    sample: int = Field(0, ge=0, description="Index of a repeated sample of the same cases.")
    without: str | None = Field(None, description="Ablation: the product-channel guard switched off.")
    category: str | None = Field(None, description="BFCL: the category of the cell's cases (id suffix __bfcl-<c>).")


class CellKey(CellAxes):
    """The axes of a cell. The first three (PRIMARY_AXES) always name it; the later ones (CellAxes) only when not
    at their default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stack_config: str = Field(description="Stack config label (stack + tool configuration), e.g. vllm-hermes.")
    model: str
    tools_mode: ToolsMode

    @property
    def cell_id(self) -> str:
        base = f"{self.stack_config}__{self.model}__{self.tools_mode.value}"
        return slug(
            base + "".join(f"__{ID_NAMES.get(axis, axis)}-{value}" for axis, value in self.extra_axes().items())
        )

    def extra_axes(self) -> dict[str, object]:
        """The later axes that differ from their defaults, in declaration order."""
        return {
            name: getattr(self, name)
            for name in LATER_AXES
            if getattr(self, name) != CellAxes.model_fields[name].default
        }


# How an axis is spelled in a cell id where not by its own name: a BFCL cell ends `__bfcl-<category>`.
ID_NAMES: dict[str, str] = {"category": "bfcl"}
# Both derived from the declarations above. PRIMARY_AXES are also the turn-record fields that group turns into
# cells (what `stats` and reports group by).
LATER_AXES: tuple[str, ...] = tuple(CellAxes.model_fields)
PRIMARY_AXES: tuple[str, ...] = tuple(name for name in CellKey.model_fields if name not in LATER_AXES)
