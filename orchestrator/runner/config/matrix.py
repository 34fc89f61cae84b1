"""Matrix files (`matrices/*.yaml`): validated with errors that name the file, the field path and the line,
and expanded into servers and cells before anything starts.

A matrix that validates expands to at least one cell and at most `MAX_CELLS`; its cell ids are distinct (two
names that slug to one id are refused, naming both) and at most `MAX_CELL_ID` characters, so each is a file
name on every file system (long names are refused, not hashed: ids stay readable and stable across runs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from orchestrator.core.cell import LATER_AXES, CellAxes, CellChannel, CellKey, slug
from orchestrator.core.constraints import RequestSemantics, ToolChoice, request_semantics
from orchestrator.core.gateexpr import GateError, parse_gate
from orchestrator.core.modes import mode_of
from orchestrator.core.scoring import Channel
from orchestrator.core.types import ToolsMode
from orchestrator.runner.config import matrixchecks as checks
from orchestrator.runner.config.matrixchecks import CellName
from orchestrator.runner.config.matrixentries import (
    MAX_TURN_CAP,
    Exclude,
    MatrixBootstrap,
    MatrixDecoding,
    ModelEntry,
    Retries,
    StackEntry,
    TaskEntry,
    Timeouts,
    check_name,
    strict_count,
)
from orchestrator.runner.config.resolve import RunAssets, assets_in, context_or_checkout
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.turn.guards import GUARDS
from orchestrator.serving.chatapi import SamplerNotSupported, sampler_fields
from orchestrator.serving.registry import UnknownStackError

# Body fields a request is made of: `decoding.extra` may add fields, never replace these.
RESERVED_BODY_FIELDS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "options",
        "format",
        "response_format",
        "keep_alive",
    }
)
ParallelSetting = Literal["default"] | bool  # default: not sent (the stack's own default)
MAX_CELL_ID = 200  # characters: cells/<id>.json, streams/<id>.jsonl and an ablation's `__without-<guard>` fit 255
MAX_CELLS = 100_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PRODUCT_SAMPLES = 3  # cases run this often in the channels unless the matrix says otherwise (majority vote)


class Matrix(_Strict):
    _assets: RunAssets | None = PrivateAttr(default=None)  # set by validation (runner/config/resolve.py)
    name: str
    description: str = ""
    stacks: list[StackEntry] = Field(min_length=1)
    models: list[ModelEntry] = Field(min_length=1)
    modes: list[ToolsMode] = Field(min_length=1)
    tasks: list[TaskEntry] = Field(min_length=1)
    decoding: MatrixDecoding = MatrixDecoding()
    turn_cap: int = strict_count(40, le=MAX_TURN_CAP)
    loop_repeats: int = strict_count(
        3, ge=2, le=MAX_TURN_CAP, description="constrained: this many identical calls in a row end a seed."
    )
    timeouts: Timeouts = Timeouts()
    retries: Retries = Retries()
    concurrency: int = strict_count(1, le=256)
    executor: Literal["local", "ray"] = Field(
        "local", description="local: server groups one after another here; ray: spread over a Ray cluster."
    )
    bootstrap: MatrixBootstrap = MatrixBootstrap()
    exclude: list[Exclude] = Field(default_factory=list)
    channels: list[Channel] | None = Field(
        None, description="model and/or product channel (scored suites); absent: the plain agent loop."
    )
    samples: int | None = strict_count(
        None,
        le=15,
        description=f"Runs per case, decided by majority vote; default {PRODUCT_SAMPLES} with channels, else 1.",
    )
    guards: dict[str, bool] = Field(
        default_factory=dict,
        description="Product-channel guards on/off (default on); TOOLCALL_MATRIX_GUARDS overrides.",
    )
    gate: list[str] = Field(default_factory=list, description="Release gates, e.g. 'product.core.answer >= 12/14'.")
    without: list[str] | None = Field(
        None, description="Ablation runs (orchestrate ablate): one product cell per guard switched off."
    )
    stream: list[bool] = Field([False], min_length=1, description="Send each request streamed (true) or not.")
    tool_choice: list[ToolChoice] = Field(
        ["auto"], min_length=1, description="Native modes: auto | required | named (the suite's first tool) | none."
    )
    parallel_tool_calls: list[ParallelSetting] = Field(
        ["default"], min_length=1, description="Native modes: default (not sent) | false | true."
    )

    @field_validator("name")
    @classmethod
    def _file_safe(cls, value: str) -> str:
        return check_name(value, what="a matrix name")  # it is part of the run directory's name

    @field_validator("modes", "stream", "tool_choice", "parallel_tool_calls")
    @classmethod
    def _distinct(cls, value: list[Any]) -> list[Any]:
        shown = [getattr(v, "value", v) for v in value]
        repeated = next((v for i, v in enumerate(shown) if v in shown[:i]), None)
        if len({repr(v) for v in value}) != len(value):
            raise ValueError(f"{repeated!r} is listed twice (a cell id would repeat)")
        return value

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, value: list[ModelEntry]) -> list[ModelEntry]:
        names = [model.name for model in value]
        repeated = next((name for i, name in enumerate(names) if name in names[:i]), None)
        if repeated is not None:
            raise ValueError(f"model {repeated!r} is listed twice (its cell ids would repeat)")
        return value

    def request_axes(self, mode: ToolsMode) -> list[tuple[bool, str, bool | None]]:
        """(stream, tool_choice, parallel_tool_calls) of each cell of a mode: tool_choice and
        parallel_tool_calls only where the mode sends tools (elsewhere they would constrain nothing)."""
        native = mode_of(mode).sends_tools
        choices = self.tool_choice if native else ["auto"]
        parallel = [None if p == "default" else p for p in self.parallel_tool_calls] if native else [None]
        return [(stream, choice, p) for stream in self.stream for choice in choices for p in parallel]

    @property
    def sample_count(self) -> int:
        return self.samples or (PRODUCT_SAMPLES if self.channels else 1)

    @field_validator("gate", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("gate")
    @classmethod
    def _parsable_gates(cls, value: list[str]) -> list[str]:
        for gate in value:
            try:
                parse_gate(gate)
            except GateError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("guards")
    @classmethod
    def _known_guards(cls, value: dict[str, bool]) -> dict[str, bool]:
        unknown = sorted(set(value) - set(GUARDS))
        if unknown:
            raise ValueError(f"unknown guards {unknown} (known: {', '.join(GUARDS)})")
        return value

    @field_validator("without")
    @classmethod
    def _known_ablations(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or []) - set(GUARDS))
        if unknown:
            raise ValueError(f"unknown guards {unknown} (known: {', '.join(GUARDS)})")
        if value and len(set(value)) != len(value):
            raise ValueError(f"a guard is named twice in {value}")
        return value

    def turn_cap_for(self, model: ModelEntry) -> int:
        """The turn cap a model's cells run under: its own override, else the matrix's. Takes the entry, not a
        name: a served name (an Ollama tag) differs from the entry's label."""
        return model.turn_cap or self.turn_cap

    @classmethod
    def model_validate(cls, obj: Any, *, context: Any | None = None, **options: Any) -> Matrix:
        """Validated against the caller's resolved stacks and suites (runner/config/resolve.py), else the checkout's."""
        return super().model_validate(obj, context=context_or_checkout(context), **options)

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Matrix:
        """Pure over the resolved definitions (each entry carries its own): reads no file, starts no server."""
        labels = [entry.label for entry in self.stacks]
        for index, label in enumerate(labels):
            if label in labels[:index]:
                raise ValueError(f"stacks.{index}: stack label {label!r} is used twice; labels must be unique (set id)")
        checks.check_case_distinct(labels, [model.name for model in self.models])
        for index, entry in enumerate(self.stacks):
            spec = entry.spec
            try:  # a sampler value the stack's API cannot take fails here, not mid-run
                sampler_fields(spec, self.decoding)
            except SamplerNotSupported as exc:
                raise ValueError(f"stacks.{index} ({entry.label}): {exc}") from None
            # `extra` adds body fields; it may not silently replace what the harness sends and records.
            owned = {*spec.sampler.names.values(), *spec.sampler.names, *spec.sampler.not_sent, *spec.request_fields}
            clash = sorted(set(self.decoding.extra) & (owned | RESERVED_BODY_FIELDS))
            if clash:
                raise ValueError(
                    f"decoding.extra sets {clash}, which the harness sends for {entry.label} (sampler, request "
                    "fields or the request itself): set them through decoding's own fields or the stack file"
                )
            raw_models = [m for m in self.models if not self.excluded(entry, m, ToolsMode.RAW_TEMPLATE)]
            if ToolsMode.RAW_TEMPLATE in self.modes and spec.completion_path is None and raw_models:
                raise ValueError(
                    f"stacks.{index} ({entry.label}): mode raw-template needs a raw completion endpoint, and "
                    f"stack {entry.stack!r} declares none (completion_path); exclude the mode for this stack"
                )
        self._check_suites_fit()
        assets = self._assets or assets_in(info)  # validated already (held by another model): keep its resolution
        self._assets = assets
        for index, model in enumerate(self.models):
            for stack in model.sources:
                try:
                    assets.stack(stack)
                except UnknownStackError as exc:
                    raise ValueError(f"models.{index}.sources: {exc}") from None
        stack_names = {name for entry in self.stacks for name in (entry.label, entry.stack)}
        checks.check_excludes(self.exclude, stack_names, {model.name for model in self.models}, self.modes)
        checks.check_cell_ids(self._cell_names(), max_length=MAX_CELL_ID, max_cells=MAX_CELLS)
        return self

    def _cell_names(self) -> Iterator[CellName]:
        for stack in self.stacks:
            for model in (model for model in self.models if stack.stack in model.sources):
                for mode, request, (channel, sample, without) in self.cell_specs(stack, model):
                    for category, _seeds in self.seed_groups():
                        key = cell_key(stack, model, mode, channel, sample, without, request, category)
                        yield key.cell_id, stack.label, model.name

    def seed_groups(self) -> list[tuple[str | None, list[tuple[str, str]]]]:
        """The seeds of a cell, by the cell's category: every suite's seeds in one group (no category), and
        each BFCL category's cases in a group, a cell, of its own."""
        plain: list[tuple[str, str]] = []
        by_category: dict[str, list[tuple[str, str]]] = {}
        for task in self.tasks:
            suite = task.resolved_suite
            for seed_id in task.seed_ids():
                case = suite.seed(seed_id).bfcl if suite.benchmark is not None else None
                if case is None:
                    plain.append((task.suite, seed_id))
                else:
                    by_category.setdefault(case.category, []).append((task.suite, seed_id))
        return ([(None, plain)] if plain else []) + list(by_category.items())

    def _check_suites_fit(self) -> None:
        """One entry per suite; the channels score what each case declares right; the loop ends on a submit call."""
        checks.check_suites_once([task.suite for task in self.tasks])
        checks.check_seed_ids_distinct(
            {task.suite: [seed.id for seed in task.resolved_suite.seeds] for task in self.tasks}
        )
        for task in self.tasks:
            suite = task.resolved_suite
            if suite.benchmark is not None:
                if self.channels:
                    raise ValueError(f"tasks: {task.suite} is scored by its own checker: run it without channels")
                continue
            if self.channels and not suite.scored:
                raise ValueError(
                    f"tasks: suite {task.suite!r} declares no `expect` on its cases: it cannot run in the channels"
                )
            if not self.channels and suite.submit_tool is None:
                raise ValueError(
                    f"tasks: suite {task.suite!r} has no submit tool: run it with `channels: [model, product]`"
                )
        if self.without and self.channels != ["product"]:
            raise ValueError("without (ablation) runs the product channel only: set channels: [product]")

    @property
    def assets(self) -> RunAssets:
        """Where this matrix's stacks and suites were resolved (the checkout, or a recorded run's snapshot)."""
        if self._assets is None:
            raise RuntimeError("the matrix was built without validation: nothing resolved")
        return self._assets

    def suites(self) -> dict[str, Suite]:
        """The matrix's suites by name, as resolved when it was validated (MCP tools not listed yet)."""
        return {task.suite: task.resolved_suite for task in self.tasks}

    def cell_axes(self) -> list[tuple[str, int, str | None]]:
        """(channel, sample, guard switched off) of every cell of a stack, model and mode: one plain agent-loop
        cell without channels; else each channel x sample (an ablation: each guard off x sample)."""
        samples = range(self.sample_count)
        if self.without:
            return [("product", sample, guard) for guard in self.without for sample in samples]
        if not self.channels:
            return [("agent", sample, None) for sample in samples]
        return [(channel, sample, None) for channel in self.channels for sample in samples]

    def cell_specs(
        self, stack: StackEntry, model: ModelEntry
    ) -> Iterator[tuple[ToolsMode, tuple[bool, str, bool | None], tuple[str, int, str | None]]]:
        """(mode, request axes, cell axes) of each cell of a stack and model, in expansion order."""
        for mode in self.modes:
            if not self.excluded(stack, model, mode):
                for request in self.request_axes(mode):
                    for axes in self.cell_axes():
                        yield mode, request, axes

    def excluded(self, stack: StackEntry, model: ModelEntry, mode: ToolsMode) -> bool:
        return any(
            (rule.stack in (None, stack.label, stack.stack))
            and rule.model in (None, model.name)
            and rule.mode in (None, mode)
            for rule in self.exclude
        )


class Cell(CellAxes):
    """One cell of the expansion: its later axes (core/cell.py declares them) and what it runs."""

    model_config = ConfigDict(frozen=True)

    cell_id: str
    order: int = Field(description="Position in the matrix expansion (tables keep run order).")
    stack: StackEntry
    model: ModelEntry
    mode: ToolsMode
    seeds: list[tuple[str, str]]  # (suite, seed id)

    def semantics(self, tools: list[dict[str, Any]]) -> RequestSemantics | None:
        """What the cell's requests ask beyond tools= (None: nothing); `named` names the suite's first tool."""
        return request_semantics(self.tool_choice, self.parallel_tool_calls, tools)

    @property
    def call_format(self) -> str:
        """How this cell's text calls are read (recorded in its config; part of its identity)."""
        return self.model.call_format_for(self.stack.stack)


class ServerPlan(BaseModel):
    """One server start: a stack config and the model(s) it serves; the cells it runs."""

    model_config = ConfigDict(frozen=True)

    server_id: str
    stack: StackEntry
    models: list[ModelEntry]
    cells: list[Cell]


def cell_key(
    stack: StackEntry,
    model: ModelEntry,
    mode: ToolsMode,
    channel: CellChannel = "agent",
    sample: int = 0,
    without: str | None = None,
    request: tuple[bool, str, bool | None] = (False, "auto", None),
    category: str | None = None,
) -> CellKey:
    stream, tool_choice, parallel = request
    return CellKey(
        category=category,
        stack_config=stack.label,
        model=model.name,
        tools_mode=mode,
        channel=channel,
        sample=sample,
        without=without,
        stream=stream,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
    )


def expand(matrix: Matrix) -> list[ServerPlan]:
    """Servers in matrix order. A stack that loads one model per process gets one server per model;
    a stack that serves many (Ollama, hosted) gets one server for all of them."""
    groups_of_seeds = matrix.seed_groups()
    plans: list[ServerPlan] = []
    position = 0
    for stack in matrix.stacks:
        models = [model for model in matrix.models if stack.stack in model.sources]
        per_model = stack.spec.model_source in ("gguf_file", "hf_dir")
        groups = [[model] for model in models] if per_model else ([models] if models else [])
        for group in groups:
            cells = []
            for model in group:
                for mode, request, (channel, sample, without) in matrix.cell_specs(stack, model):
                    for category, seeds in groups_of_seeds:
                        key = cell_key(stack, model, mode, channel, sample, without, request, category)
                        axes = key.model_dump(include=set(LATER_AXES))  # the cell's later axes, as its id names them
                        place = {"order": position, "stack": stack, "model": model, "mode": mode, "seeds": seeds}
                        cells.append(Cell(cell_id=key.cell_id, **place, **axes))
                        position += 1
            if cells:
                server_id = slug(stack.label + ("__" + group[0].name if per_model else ""))
                plans.append(ServerPlan(server_id=server_id, stack=stack, models=group, cells=cells))
    return plans
