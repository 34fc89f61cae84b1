"""Compose files for GPU hosts, rendered from the stack definitions so the two cannot drift.

One file per launchable stack, one service per tool configuration (selected with a compose profile),
pinned image (digest when known), the exact argv, a reservation of the GPUs the stack needs (launch.gpu_count),
a healthcheck and a read-only model volume. Ports are published on 127.0.0.1 only.
"""

from __future__ import annotations

from typing import Any

import yaml

from orchestrator.serving.registry import REPO_ROOT, load_stack, stack_names
from orchestrator.serving.serverconfig import ModelRef, ServerConfig, server_argv, server_env
from orchestrator.serving.stackspec import StackSpec

COMPOSE_DIR = REPO_ROOT / "compose"
HEADER = "# Rendered from stacks/{name}.yaml by `orchestrate compose --write`: do not edit by hand.\n"


def render(spec: StackSpec) -> dict[str, Any]:
    assert spec.launch is not None and "gpu" in spec.images
    launch = spec.launch
    image = spec.images["gpu"]
    services: dict[str, Any] = {}
    for tool_config in spec.tool_configs:
        placeholder = "/models/${MODEL_FILE}" if spec.model_source == "gguf_file" else "/models"
        config = ServerConfig(
            stack=spec.name,
            tool_config=tool_config,
            launcher="docker",
            host="gpu",
            model=ModelRef(name="${SERVED_NAME:-model}", path=placeholder),
        )
        argv = server_argv(spec, config, bind_host="0.0.0.0", port=launch.container_port, in_container=True)
        service: dict[str, Any] = {
            "image": image.reference,
            "profiles": [tool_config],
            "command": argv,
            "environment": server_env(spec, config, bind_host="0.0.0.0", port=launch.container_port),
            "ports": [f"127.0.0.1:${{PORT:-{launch.container_port}}}:{launch.container_port}"],
            # Ollama's model store must be writable (it pulls into it); weights elsewhere are read-only.
            "volumes": [
                f"${{MODEL_DIR:?set MODEL_DIR}}:{launch.container_model_dir}"
                + ("" if spec.model_source == "ollama_tag" else ":ro")
            ],
            "labels": {
                "toolcall-matrix.managed": "true",
                "toolcall-matrix.stack": spec.name,
                "toolcall-matrix.tool-config": tool_config,
            },
            "deploy": {
                "resources": {
                    "reservations": {
                        "devices": [{"driver": "nvidia", "count": launch.gpu_count, "capabilities": ["gpu"]}]
                    }
                }
            },
        }
        if launch.shm_size:
            service["shm_size"] = launch.shm_size
        if launch.ipc_host:
            service["ipc"] = "host"
        if launch.healthcheck:
            service["healthcheck"] = {
                "test": launch.healthcheck,
                "interval": "10s",
                "timeout": "5s",
                "retries": 60,
                "start_period": "30s",
            }
        services[f"{spec.name}-{tool_config}".replace(":", "-")] = service
    return {"services": services}


def rendered_text(spec: StackSpec) -> str:
    return HEADER.format(name=spec.name) + yaml.safe_dump(render(spec), sort_keys=False, width=200)


def launchable_stacks() -> list[StackSpec]:
    return [spec for spec in map(load_stack, stack_names()) if spec.launch is not None and "gpu" in spec.images]


def write_all() -> list[str]:
    COMPOSE_DIR.mkdir(exist_ok=True)
    written = []
    for spec in launchable_stacks():
        path = COMPOSE_DIR / f"{spec.name}.yaml"
        path.write_text(rendered_text(spec))
        written.append(str(path))
    return written
