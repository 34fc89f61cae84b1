"""The entries of a matrix file: stack configs, models and their sources, task suites. Validated on load."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.core.classify import AUTO_FORMAT, check_call_format
from orchestrator.runner.tasks import SuiteError, load_suite
from orchestrator.serving.registry import UnknownStackError, load_stack
from orchestrator.serving.serverconfig import LauncherKind
from orchestrator.serving.stackspec import Host


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StackEntry(_Strict):
    """One stack config: a stack definition, one of its tool configurations, and where it runs."""

    id: str | None = Field(None, description="Label used in cell ids and tables; default stack-toolconfig.")
    stack: str = Field(description="A stack definition in stacks/.")
    tool_config: str | None = Field(None, description="Named tool configuration; default: the stack's default.")
    launcher: LauncherKind = "process"
    host: Host = "cpu"
    network: Literal["host", "published"] = "published"
    image: str | None = Field(None, description="Override the stack's pinned image (docker).")
    binary: str | None = Field(None, description="Override the server binary (process).")
    url: str | None = Field(None, description="Base URL of a running server (attach).")
    ctx: int | None = Field(None, ge=256, description="Context length passed to the server.")
    extra_args: list[str] = Field(default_factory=list)
    gpus: int | None = Field(
        None, ge=1, description="GPUs to request (e.g. with --tensor-parallel-size 2); default: the stack's count."
    )

    @model_validator(mode="after")
    def _known(self) -> StackEntry:
        try:
            spec = load_stack(self.stack)
        except UnknownStackError as exc:
            raise ValueError(str(exc)) from None
        if self.tool_config is not None and self.tool_config not in spec.tool_configs:
            raise ValueError(
                f"stack {self.stack!r} has no tool configuration {self.tool_config!r} "
                f"(known: {', '.join(spec.tool_configs)})"
            )
        if self.launcher == "attach" and not self.url:
            raise ValueError("the attach launcher needs url")
        if self.launcher != "attach" and spec.launch is None:
            raise ValueError(f"stack {self.stack!r} cannot be launched; use launcher: attach with a url")
        return self

    @property
    def label(self) -> str:
        return self.id or f"{self.stack}-{self.resolved_tool_config}"

    @property
    def resolved_tool_config(self) -> str:
        return self.tool_config or load_stack(self.stack).default_tool_config


class ModelSource(_Strict):
    asset: str | None = Field(None, description="A model asset of `orchestrate assets` (GGUF or its HF conversion).")
    path: str | None = Field(None, description="Explicit GGUF file or HF directory.")
    tag: str | None = Field(None, description="Served name / Ollama tag / hosted model id.")
    hub: str | None = Field(None, description="A hub repo id the server downloads itself (GPU hosts), e.g. Qwen/...")
    call_format: str | None = Field(None, description="The model's call format on this stack; wins over the model's.")

    @field_validator("call_format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        return None if value is None else check_call_format(value)

    @model_validator(mode="after")
    def _one(self) -> ModelSource:
        if sum(bool(v) for v in (self.asset, self.path, self.tag, self.hub)) != 1:
            raise ValueError("a model source needs exactly one of asset, path, tag or hub")
        return self


class ModelEntry(_Strict):
    name: str = Field(description="Model label in tables.")
    sources: dict[str, ModelSource] = Field(description="Per stack: where this stack gets the model.")
    quantization: str | None = None
    digest: str | None = Field(None, description="Expected sha256 of the model file, when pinned.")
    turn_cap: int | None = Field(
        None, ge=1, description="This model's turn cap where it must differ from the matrix's (recorded per cell)."
    )
    call_format: str = Field(
        AUTO_FORMAT, description="How its text calls are read: auto (every recogniser) or one of textcalls.FORMATS."
    )

    @field_validator("call_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        return check_call_format(value)

    def call_format_for(self, stack: str) -> str:
        """The call format this model's cells on `stack` are read with: the stack's source's, else its own."""
        source = self.sources.get(stack)
        return (source.call_format if source else None) or self.call_format


class TaskEntry(_Strict):
    suite: str
    seeds: list[str] | None = Field(None, description="Seed ids; default: the first `count` seeds.")
    count: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _exists(self) -> TaskEntry:
        try:
            suite = load_suite(self.suite)
        except SuiteError as exc:
            raise ValueError(str(exc)) from None
        for seed in self.seeds or []:
            suite.seed(seed)
        return self

    def seed_ids(self) -> list[str]:
        suite = load_suite(self.suite)
        if self.seeds:
            return list(self.seeds)
        return [seed.id for seed in suite.seeds][: self.count or len(suite.seeds)]
