"""Task suites (data in `seeds/*.yaml`) and their deterministic dry-run tools. Pure.

A suite declares its tools (OpenAI schema), how each tool behaves in dry-run (a generic kind over the
seed's own data tables: `keys`, `lookup`, `submit`), and its seeds: the user request, the expected answer
and the data. Tool results are a pure function of the arguments and the seed's data; an unknown tool or
arguments that violate the schema get a tool error message; nothing real is touched.

A suite may instead take its tools from an MCP server (`mcp:`): its tools are what the server's `tools/list`
says, and its calls are answered by that server in dry run. Its seeds then declare what is right for each case
(`expect`: a call, an answer, asking the user, or a plain reply) and it runs in the model and product channels.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.core.bfcl import BfclCase
from orchestrator.core.classify import tools_by_name, validate_call
from orchestrator.core.scoring import Expectation, normalise_text
from orchestrator.core.toolschemas import tool_schema_problems
from orchestrator.core.types import ParsedCall


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DryRunTool(_Strict):
    kind: Literal["keys", "lookup", "submit"]
    table: str | None = Field(None, description="Seed data table the tool reads (keys, lookup).")
    key: str | None = Field(None, description="Argument holding the row key (lookup) or the answer (submit).")
    result_key: str = Field("items", description="keys: the result field holding the key list.")


class ParallelCall(_Strict):
    """One call a seed's first turn should make (`Seed.parallel`)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Seed(_Strict):
    id: str
    template: str | None = Field(None, description="Which request template made this seed (scripts/make_seeds.py).")
    request: str
    expected: Any = Field(None, description="The answer a submit call must carry (agent-loop suites).")
    expect: Expectation | None = Field(None, description="What is right for this case (model/product channels).")
    parallel: list[ParallelCall] | None = Field(
        None,
        description="The independent calls the first turn should make together, in that one turn (any order): "
        "at least two, each naming an offered tool with arguments valid under its schema "
        "(analysis/report/parallel.py).",
    )
    data: dict[str, dict[str, Any]] = Field(default_factory=dict)
    bfcl: BfclCase | None = Field(None, description="A BFCL case (runner/suites/bfclcases.py): its own tools.")


class McpSource(_Strict):
    server: str = Field(description="A tool server of the package (runner/suites/mcpclient.py MCP_SERVERS).")
    transport: Literal["stdio", "http"] = "stdio"


class Suite(_Strict):
    suite: str
    version: int
    description: str
    system_prompt: str
    tools: list[dict[str, Any]] = Field(default_factory=list)
    dry_run: dict[str, DryRunTool] = Field(default_factory=dict)
    mcp: McpSource | None = Field(None, description="Take the tools from this MCP server (it answers the calls).")
    deterministic: list[str] = Field(
        default_factory=list, description="Tools whose result is the answer (hashes, encodings): short_circuit."
    )
    core: list[str] = Field(default_factory=list, description="The core cases a release gate reads.")
    benchmark: str | None = Field(
        None, description="A public benchmark's cases (`bfcl-eval==…`): built from its data, not from a file."
    )
    seeds: list[Seed] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Suite:
        ids = [seed.id for seed in self.seeds]
        if len(set(ids)) != len(ids):
            raise ValueError("seed ids must be unique")
        if self.benchmark is not None:  # each case carries its own tools and BFCL's checker scores it
            if not all(seed.bfcl for seed in self.seeds):
                raise ValueError("a benchmark suite's seeds are its cases: every one needs `bfcl`")
            return self
        if any(seed.bfcl for seed in self.seeds):
            raise ValueError("`bfcl` cases come from the bfcl suite only (tasks: [{suite: bfcl, ...}])")
        if len(self.seeds) < 8:
            raise ValueError(f"a suite needs at least 8 seeds, not {len(self.seeds)}")
        echoed = [
            (seed.id, answer)
            for seed in self.seeds
            for answer in (seed.expect.answers if seed.expect else ())
            if normalise_text(answer) in normalise_text(seed.request)
        ]
        if echoed:
            raise ValueError(f"accepted answers that the request itself contains (an echo would pass): {echoed}")
        unknown_core = sorted(set(self.core) - set(ids))
        if unknown_core:
            raise ValueError(f"core names cases the suite does not have: {unknown_core}")
        if self.mcp is not None:  # its tools are listed later: resolve.listed_suites checks `parallel` against them
            if self.dry_run:
                raise ValueError("a suite with an MCP server has no dry_run: the server answers its calls")
            if not all(seed.expect for seed in self.seeds):
                raise ValueError("every case of an MCP suite needs `expect` (it runs in the model/product channels)")
            return self
        schema_problems = tool_schema_problems(self.tools)  # caught before a run, not as hallucinated calls
        if schema_problems:
            raise ValueError(f"unusable tool schema: {'; '.join(schema_problems)}")
        names = set(tools_by_name(self.tools))
        if names != set(self.dry_run):
            raise ValueError(f"tools {sorted(names)} and dry_run {sorted(self.dry_run)} must name the same tools")
        if not any(tool.kind == "submit" for tool in self.dry_run.values()) and not all(s.expect for s in self.seeds):
            raise ValueError("a suite needs a submit tool, or an `expect` on every case")
        problems = parallel_problems(self.tools, self.seeds, self.submit_tool)
        if problems:
            raise ValueError(f"bad `parallel` entries: {'; '.join(problems)}")
        unanswered = [
            f"{seed.id}: {entry.name}({entry.arguments})"
            for seed in self.seeds
            for entry in seed.parallel or []
            if execute(self, seed, ParsedCall(name=entry.name, arguments=entry.arguments)).error
        ]
        if unanswered:
            raise ValueError(f"expected parallel calls the dry run answers with an error (no such row): {unanswered}")
        return self

    @property
    def scored(self) -> bool:
        """Every case says what is right: the suite can run in the model and product channels."""
        return all(seed.expect is not None for seed in self.seeds)

    def seed(self, seed_id: str) -> Seed:
        for seed in self.seeds:
            if seed.id == seed_id:
                return seed
        raise KeyError(f"suite {self.suite!r} has no seed {seed_id!r}")

    @property
    def tools_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.tools, sort_keys=True).encode()).hexdigest()

    @property
    def submit_tool(self) -> str | None:
        return next((name for name, tool in self.dry_run.items() if tool.kind == "submit"), None)


def parallel_problems(tools: list[dict[str, Any]], seeds: list[Seed], submit_tool: str | None) -> list[str]:
    """What is wrong with the seeds' `parallel` lists: fewer than two calls, a repeated call, the submit tool (it
    ends the task), a tool not offered, or arguments its schema refuses. Empty when all is well."""
    offered = tools_by_name(tools)
    problems = []
    for seed in seeds:
        entries = seed.parallel or []
        if seed.parallel is not None and len(entries) < 2:
            problems.append(f"{seed.id}: a parallel turn needs at least two calls, not {len(entries)}")
        keys = [json.dumps([e.name, e.arguments], sort_keys=True) for e in entries]
        if len(set(keys)) != len(keys):
            problems.append(f"{seed.id}: the same call is listed twice")
        for number, entry in enumerate(entries):
            where = f"{seed.id}: parallel[{number}] ({entry.name})"
            problem = validate_call(ParsedCall(name=entry.name, arguments=entry.arguments), offered)
            if entry.name == submit_tool:
                problems.append(f"{where}: the submit tool ends the task, it is no parallel lookup")
            elif problem == "call:unknown_tool":
                problems.append(f"{where}: names a tool the suite does not offer (offered: {sorted(offered)})")
            elif problem:
                problems.append(f"{where}: arguments {entry.arguments} do not validate against its schema ({problem})")
    return problems


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


def parse_suite(data: Any, path: Path) -> Suite:
    """A suite from its file's data (`path` names it in errors); an MCP suite's tools are not listed yet. A file
    never declares benchmark cases: those come from the benchmark's own data (runner/suites/bfclcases.py)."""
    seeds = data.get("seeds") if isinstance(data, dict) else None
    if isinstance(data, dict) and (
        "benchmark" in data or any(isinstance(seed, dict) and "bfcl" in seed for seed in seeds or [])
    ):
        raise SuiteError(f"{path}: invalid suite: `benchmark` and `bfcl` cases come from the bfcl suite only")
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(f"{path}: invalid suite: {exc}") from exc


def with_listed_tools(suite: Suite, path: Path) -> Suite:
    """The suite with its MCP server's tools (listed once per process, checked); other suites as they are.
    This starts the server: a run does it when it starts, validation never does."""
    if suite.mcp is None:
        return suite
    from orchestrator.runner.suites.mcperror import McpError  # raised by mcpclient, also when the SDK is missing

    try:
        tools = _listed_tools(suite.mcp.server)
    except McpError as exc:
        raise SuiteError(f"{path}: cannot list the tools of MCP server {suite.mcp.server!r}: {exc}") from exc
    schema_problems = tool_schema_problems(tools)
    if schema_problems:
        raise SuiteError(f"{path}: MCP server {suite.mcp.server!r} lists unusable tool schemas: {schema_problems}")
    unknown = sorted(set(suite.deterministic) - set(tools_by_name(tools)))
    if unknown:
        raise SuiteError(f"{path}: deterministic names tools the MCP server does not offer: {unknown}")
    problems = parallel_problems(tools, suite.seeds, None)
    if problems:
        raise SuiteError(f"{path}: bad `parallel` entries: {'; '.join(problems)}")
    return suite.model_copy(update={"tools": tools})


@cache
def _listed_tools(server: str) -> list[dict[str, Any]]:
    """The server's tools as the model sees them: pydantic's `title` annotations left out (they restate names,
    and a small model copies `form_entityArguments` as the tool's name); everything else as listed."""
    from orchestrator.runner.suites.mcpclient import list_server_tools

    return [_without_titles(tool) for tool in list_server_tools(server, "stdio")]


def _without_titles(node: Any, in_properties: bool = False) -> Any:
    """A schema without its `title` keywords; a property that is itself called `title` stays."""
    if isinstance(node, list):
        return [_without_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _without_titles(value, in_properties=key in ("properties", "$defs") and not in_properties)
        for key, value in node.items()
        if in_properties or not (key == "title" and isinstance(value, str))
    }
