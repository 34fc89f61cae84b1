"""Task suites (data in `seeds/*.yaml`) and their deterministic dry-run tools. Pure.

A suite declares its tools (OpenAI schema), how each tool behaves in dry-run (a generic kind over the
seed's own data tables: `keys`, `lookup`, `submit`), and its seeds: the user request, the expected answer
and the data. Tool results are a pure function of the arguments and the seed's data; an unknown tool or
arguments that violate the schema get a tool error message; nothing real is touched.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.core.classify import tools_by_name, validate_call
from orchestrator.core.types import ParsedCall


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DryRunTool(_Strict):
    kind: Literal["keys", "lookup", "submit"]
    table: str | None = Field(None, description="Seed data table the tool reads (keys, lookup).")
    key: str | None = Field(None, description="Argument holding the row key (lookup) or the answer (submit).")
    result_key: str = Field("items", description="keys: the result field holding the key list.")


class Seed(_Strict):
    id: str
    template: str | None = Field(None, description="Which request template made this seed (scripts/make_seeds.py).")
    request: str
    expected: Any
    data: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Suite(_Strict):
    suite: str
    version: int
    description: str
    system_prompt: str
    tools: list[dict[str, Any]]
    dry_run: dict[str, DryRunTool]
    seeds: list[Seed] = Field(min_length=8)

    @model_validator(mode="after")
    def _consistent(self) -> Suite:
        names = set(tools_by_name(self.tools))
        if names != set(self.dry_run):
            raise ValueError(f"tools {sorted(names)} and dry_run {sorted(self.dry_run)} must name the same tools")
        if not any(tool.kind == "submit" for tool in self.dry_run.values()):
            raise ValueError("a suite needs a submit tool")
        ids = [seed.id for seed in self.seeds]
        if len(set(ids)) != len(ids):
            raise ValueError("seed ids must be unique")
        return self

    def seed(self, seed_id: str) -> Seed:
        for seed in self.seeds:
            if seed.id == seed_id:
                return seed
        raise KeyError(f"suite {self.suite!r} has no seed {seed_id!r}")

    @property
    def tools_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.tools, sort_keys=True).encode()).hexdigest()

    @property
    def submit_tool(self) -> str:
        return next(name for name, tool in self.dry_run.items() if tool.kind == "submit")


class ToolResult(BaseModel):
    call: ParsedCall
    result: Any
    error: bool
    submitted: bool = False
    answer: Any = None


def execute(suite: Suite, seed: Seed, call: ParsedCall) -> ToolResult:
    """Run one call against the dry-run tools: a pure function of (suite, seed data, call)."""
    problem = validate_call(call, tools_by_name(suite.tools))
    if problem == "call:unknown_tool":
        return ToolResult(call=call, result={"error": f"unknown tool {call.name!r}"}, error=True)
    if problem:
        return ToolResult(call=call, result={"error": f"invalid arguments ({problem})"}, error=True)
    behaviour = suite.dry_run[call.name]
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    if behaviour.kind == "submit":
        answer = arguments.get(behaviour.key or "answer")
        return ToolResult(call=call, result={"status": "submitted"}, error=False, submitted=True, answer=answer)
    table = seed.data.get(behaviour.table or "", {})
    if behaviour.kind == "keys":
        return ToolResult(call=call, result={behaviour.result_key: sorted(table)}, error=False)
    row_key = str(arguments.get(behaviour.key or "", ""))
    if row_key not in table:
        return ToolResult(call=call, result={"error": f"{behaviour.key} {row_key!r} not found"}, error=True)
    return ToolResult(call=call, result=table[row_key], error=False)


def answer_correct(expected: Any, answer: Any) -> bool:
    """Numbers match within 0.01 (answers often arrive as strings); text matches case-insensitively."""
    try:
        return math.isclose(float(expected), float(str(answer).replace(",", "").strip()), abs_tol=0.01)
    except (TypeError, ValueError):
        return str(expected).strip().lower() == str(answer).strip().lower()


class SuiteError(ValueError):
    pass


def seeds_dir() -> Path:
    from orchestrator.serving.registry import REPO_ROOT

    return REPO_ROOT / "seeds"


def load_suite(name: str, directory: Path | None = None) -> Suite:
    path = (directory or seeds_dir()) / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (directory or seeds_dir()).glob("*.yaml"))
        raise SuiteError(f"unknown task suite {name!r} (known: {', '.join(known)})")
    try:
        return Suite.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as exc:
        raise SuiteError(f"{path}: invalid suite: {exc}") from exc
