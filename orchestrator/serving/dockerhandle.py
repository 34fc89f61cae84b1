"""A server in a labelled container, started through the Docker SDK; the image digest is read back from the engine.
Docker is imported here only when a container starts: the pure layers and `report` never need it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from orchestrator.core.redact import scrub
from orchestrator.serving.handle import (
    LABEL_MANAGED,
    LABEL_RUN,
    LABEL_SERVER,
    ContainerFilters,
    ServerHandle,
    free_port,
)
from orchestrator.serving.serverconfig import ServerConfig, launch_command
from orchestrator.serving.stackspec import Launch, StackSpec


class DockerHandle(ServerHandle):
    """A labelled container started through the Docker SDK; the image digest is read back from the engine."""

    def __init__(self, spec: StackSpec, config: ServerConfig, run_id: str) -> None:
        import docker
        from docker.types import DeviceRequest

        if spec.launch is None:
            raise ValueError(f"stack {spec.name} cannot be launched")
        self.client = docker.from_env()
        image_ref = config.image or spec.images[config.host].reference
        image = self.client.images.get(image_ref)
        self.image_ref = image_ref
        self.image_id = image.id
        self.repo_digests = list(image.attrs.get("RepoDigests") or [])
        if config.network == "host":
            port = free_port()
            bind_host, ports, network_mode = "127.0.0.1", None, "host"
        else:
            port = spec.launch.container_port
            host_port = free_port()
            bind_host, ports, network_mode = "0.0.0.0", {f"{port}/tcp": ("127.0.0.1", host_port)}, None
            self.host_port = host_port
        self.base_url = f"http://127.0.0.1:{port if network_mode == 'host' else host_port}"
        self.launch = launch_command(spec, config, bind_host=bind_host, port=port, in_container=True)
        self.argv, self.env, self.secrets = self.launch.argv, self.launch.env, self.launch.secrets
        volumes = {}
        if config.model.path and config.model.local:
            source = Path(config.model.path)
            volumes[str(source.parent if spec.model_source == "gguf_file" else source)] = {
                "bind": spec.launch.container_model_dir,
                "mode": "ro",
            }
        self.labels = {LABEL_MANAGED: "true", LABEL_RUN: run_id, LABEL_SERVER: config.server_id}
        publish = f" -p 127.0.0.1:{self.base_url.rsplit(':', 1)[1]}:{port}" if ports else " --network host"
        mounts = "".join(f" -v {src}:{dst['bind']}:ro" for src, dst in volumes.items())
        envs = "".join(f" -e {k}={v}" for k, v in self.launch.shown_env.items())
        self.command = f"docker run --rm{publish}{mounts}{envs} {image_ref} " + " ".join(self.launch.shown_argv)
        gpus = config.gpu_count or spec.launch.gpu_count  # what this server needs (matrix or stack), not every GPU
        # Ray's GPUs for the group, by id: a count alone gives every container on the host GPUs 0..N-1.
        device = {"device_ids": config.gpu_ids} if config.gpu_ids else {"count": gpus}
        gpu_request = [DeviceRequest(**device, capabilities=[["gpu"]])] if config.host == "gpu" else None
        try:
            self.container = self._run_container(
                image_ref, network_mode, ports, volumes, spec.launch, config, gpu_request
            )
        except BaseException:
            # SIGTERM, Ctrl-C or an engine error between create and start: the container may exist with no
            # handle to stop it, so remove it by this server's labels before going on.
            self._remove_labelled()
            raise

    def _run_container(
        self,
        image_ref: str,
        network_mode: str | None,
        ports: dict[str, Any] | None,
        volumes: dict[str, Any],
        launch: Launch,
        config: ServerConfig,
        gpu_request: list[Any] | None,
    ) -> Any:
        return self.client.containers.run(
            image_ref,
            command=self.argv,
            detach=True,
            labels=self.labels,
            environment=self.env,
            network_mode=network_mode,
            ports=ports,
            volumes=volumes,
            shm_size=launch.shm_size,
            ipc_mode="host" if launch.ipc_host and config.host == "gpu" else None,
            device_requests=gpu_request,
        )

    def _remove_labelled(self) -> None:
        filters: ContainerFilters = {"label": [f"{key}={value}" for key, value in self.labels.items()]}
        try:
            for container in self.client.containers.list(all=True, filters=filters):
                container.remove(force=True)
        except Exception:  # the engine itself failing: `orchestrate cleanup` removes it later by label
            pass

    def alive(self) -> bool:
        try:
            self.container.reload()
        except Exception:
            return False
        return self.container.status in ("created", "running")

    def logs(self, tail: int = 40) -> str:
        try:
            return scrub(self.container.logs(tail=tail).decode(errors="replace"), self.secrets)
        except Exception as exc:
            return f"(logs unavailable: {exc})"

    def describe(self) -> dict[str, Any]:
        return {
            "launcher": "docker",
            "base_url": self.base_url,
            "argv": self.launch.shown_argv,
            "env": self.launch.shown_env,
            "image": self.image_ref,
            "image_id": self.image_id,
            "repo_digests": self.repo_digests,
            "container_id": self.container.id,
            "labels": self.labels,
        }

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True)
