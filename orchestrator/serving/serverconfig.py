"""A resolved server: which stack, which tool configuration, where it runs, what it serves. Pure.

The full argv and environment are computed here from the stack definition (`launch_command`, once per start),
their bind address checked and their secrets redacted for every record; the argv is part of the recorded stack
config.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.argvflags import WIDEST, OptionSyntax, reads_as
from orchestrator.core.redact import known_secrets, redact_argv, redact_env
from orchestrator.serving.stackspec import Host, StackSpec, render_args

LauncherKind = Literal["docker", "process", "attach"]


class ModelRef(BaseModel):
    """What the server loads: a GGUF file, an HF directory, an Ollama tag, or a hosted model id."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Served model name (what requests ask for).")
    path: str | None = Field(None, description="GGUF file or HF directory on the host.")
    digest: str | None = Field(None, description="sha256 of the file / weights, when known.")
    quantization: str | None = None
    local: bool = Field(True, description="False: `path` is a hub id the server resolves itself (no mount).")
    identity: Literal["verified", "derived", "claimed"] = Field(
        "claimed",
        description="verified: `digest` is the sha256 of the file served, checked here against a pinned value; "
        "derived: computed here from a verified source (`converted_from`); claimed: a tag, hub id, path or "
        "digest taken on trust.",
    )
    converted_from: str | None = Field(
        None, description="What the served weights were converted from, e.g. 'Q4_K_M GGUF sha256:...' (vLLM bf16)."
    )


class ServerConfig(BaseModel):
    """Everything that decides how requests are served, before anything starts."""

    model_config = ConfigDict(frozen=True)

    stack: str
    tool_config: str
    launcher: LauncherKind
    host: Host = "cpu"
    model: ModelRef
    binary: str | None = Field(None, description="Local server binary (process launcher).")
    python: str | None = Field(None, description="Python with the stack installed (process launcher).")
    image: str | None = Field(None, description="Image reference (docker launcher); default from the stack.")
    base_url: str | None = Field(None, description="Existing server (attach launcher).")
    network: Literal["host", "published"] = Field(
        "published", description="Docker: host networking bound to 127.0.0.1, or ports published on 127.0.0.1."
    )
    ctx: int | None = None
    extra_args: list[str] = Field(default_factory=list)
    extra_env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the server.")
    ready_timeout_s: float = 600.0
    gpu_count: int | None = Field(None, ge=1, description="GPUs to request; default: the stack's launch.gpu_count.")
    gpu_ids: list[str] | None = Field(
        None, description="Docker: these GPUs by id (the Ray executor passes the ones Ray gave the group), not any N."
    )
    # The stack's definition as the run resolved it (runner/config/resolve.py): starting and probing the server use it,
    # never a fresh read of stacks/. Not part of a record (the cell config records what it decides).
    spec: StackSpec | None = Field(None, exclude=True, repr=False)

    def stack_spec(self) -> StackSpec:
        if self.spec is None:
            raise ValueError(f"{self.server_id}: built without its stack definition (use serving/build.py)")
        return self.spec

    @property
    def server_id(self) -> str:
        """A readable id of the stack config: stack, tool configuration, launcher, model."""
        return f"{self.stack}-{self.tool_config}-{self.launcher}".replace(":", "_").replace("+", "_")


def in_container_model_path(spec: StackSpec, model: ModelRef) -> str | None:
    if model.path is None or spec.launch is None:
        return None
    if not model.local:
        return model.path
    base = PurePosixPath(spec.launch.container_model_dir)
    return str(base / PurePosixPath(model.path).name) if spec.model_source == "gguf_file" else str(base)


def server_argv(spec: StackSpec, config: ServerConfig, *, bind_host: str, port: int, in_container: bool) -> list[str]:
    """The exact argv: prefix + model + args + host args + prompt-cache policy args + tool-config flags + extras."""
    if spec.launch is None:
        return []
    launch = spec.launch
    model_path = in_container_model_path(spec, config.model) if in_container else config.model.path
    values = {
        "binary": config.binary or "llama-server",
        "python": config.python or "python3",
        "model_path": model_path or config.model.name,
        "served_name": config.model.name,
        "host": bind_host,
        "port": str(port),
        "ctx": str(config.ctx or launch.default_ctx),
    }
    prefix = launch.container_command if in_container else launch.process_command
    host_args = launch.gpu_args if config.host == "gpu" else launch.cpu_args
    template = [*prefix, *launch.model_args, *launch.args, *host_args, *spec.prompt_cache.launch_args]
    flags = spec.tool_config(config.tool_config).flags
    return [*render_args(template, values), *flags, *config.extra_args]


def server_env(spec: StackSpec, config: ServerConfig, *, bind_host: str, port: int) -> dict[str, str]:
    """The server's environment: the stack's env, the prompt-cache policy's env, the env for a local model
    (only when the model is a local file or directory: a hub id must stay free to download), then extras."""
    if spec.launch is None:
        return {}
    launch = spec.launch
    values = {"host": bind_host, "port": str(port), "ctx": str(config.ctx or launch.default_ctx)}
    local = launch.local_model_env if config.model.local and config.model.path else {}
    merged = {**launch.env, **spec.prompt_cache.env, **local}
    env = {key: render_args([value], values)[0] for key, value in merged.items()}
    return {**env, **config.extra_env}


def reproduce_command(argv: list[str], env: dict[str, str]) -> str:
    """A shell line that reproduces the launch by hand."""
    prefix = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(env.items()))
    return (prefix + " " if prefix else "") + shlex.join(argv)


BIND_FLAGS = ("--host", "--bind", "--listen", "--hostname")


def check_bind(argv: list[str], bind_host: str = "127.0.0.1", syntax: OptionSyntax = WIDEST) -> list[str]:
    """A server listens where the launcher says (127.0.0.1; 0.0.0.0 only inside a container whose port is
    published on the host's 127.0.0.1): an extra `--host 0.0.0.0` that would override it is refused, read as the
    stack's parser reads it (`syntax`: argparse takes `--hos` and `--host=` too), and so is an option that reads
    more options from a file (vLLM's and SGLang's `--config`: a host set there could not be checked). A matrix has
    no bind-address setting: a server reachable beyond this machine is never a side effect of extra_args."""
    for index, arg in enumerate(argv):
        config = reads_as(arg, syntax.config_options, syntax)
        if config is not None:
            raise ValueError(
                f"{arg[:40]!r} in the server's argv is read as {config}, which takes more options from a file whose "
                "bind address cannot be checked: give the options in extra_args instead"
            )
        flag = reads_as(arg, BIND_FLAGS, syntax)
        if flag is None:
            continue
        name, equals, inline = arg.partition("=")
        value = inline if equals else (argv[index + 1] if index + 1 < len(argv) else "")
        if value != bind_host:
            read = "" if name == flag else f", read as {flag}"
            raise ValueError(
                f"the server would listen on {value[:80]!r} ({name[:40]} in its argv{read}), not {bind_host}: "
                "a matrix cannot bind a server beyond loopback (remove it from extra_args)"
            )
    return argv


@dataclass(frozen=True)
class LaunchCommand:
    """What a launcher runs, decided once: the argv and environment as given to the server, the secret values
    they hold, and what is recorded or shown of them (redacted: a record, the reproduce line or a log never
    holds a secret)."""

    argv: list[str]
    env: dict[str, str]
    secrets: set[str]
    shown_argv: list[str]
    shown_env: dict[str, str]

    def reproduce(self) -> str:
        """A shell line that reproduces the launch by hand (secrets redacted)."""
        return reproduce_command(self.shown_argv, self.shown_env)


def launch_command(
    spec: StackSpec, config: ServerConfig, *, bind_host: str, port: int, in_container: bool
) -> LaunchCommand:
    """The server's argv (its bind address checked) and environment, with their redacted forms."""
    syntax = spec.launch.options if spec.launch is not None else WIDEST
    argv = server_argv(spec, config, bind_host=bind_host, port=port, in_container=in_container)
    argv = check_bind(argv, bind_host, syntax)
    env = server_env(spec, config, bind_host=bind_host, port=port)
    return LaunchCommand(
        argv=argv,
        env=env,
        secrets=known_secrets(argv, env, secret_options=syntax.secret_options),
        shown_argv=redact_argv(argv, syntax.secret_options) or [],
        shown_env=redact_env(env) or {},
    )
