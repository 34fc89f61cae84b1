"""The parts of a seed's context that are the same for every seed of a cell: the server as the seeds reach it
and how their requests are sent (runner/turn/agent.py's ServedBy and RequestPolicy), built once per cell."""

from __future__ import annotations

from typing import Any

from orchestrator.runner.config.matrix import Cell, Matrix
from orchestrator.runner.turn.agent import RequestPolicy, ServedBy
from orchestrator.serving.cache import reset_prompt_cache
from orchestrator.serving.handle import ServerHandle
from orchestrator.serving.launchers import auth_headers
from orchestrator.serving.render import prompt_counter
from orchestrator.serving.serverconfig import ServerConfig


def served_by(
    cell: Cell, handle: ServerHandle, base: dict[str, Any], config: ServerConfig, concurrency: int
) -> ServedBy:
    """The server as every seed of the cell reaches it (the same for all of them)."""
    spec = cell.stack.spec
    return ServedBy(
        stack_label=cell.stack.label,
        spec=spec,
        parser=base["parser"],
        stack_version=base["stack_version"],
        base_url=handle.base_url,
        model=config.model.name,
        headers=auth_headers(spec),
        shared_server=concurrency > 1,
        server_alive=handle.alive,
        reset_cache=lambda client: reset_prompt_cache(client, handle.base_url, spec, served_name=config.model.name),
        count_prompt=prompt_counter(spec, handle.base_url, config.model.name),
    )


def request_policy(matrix: Matrix, cell: Cell) -> RequestPolicy:
    """How the cell's requests are sent and retried: the matrix's decoding, timeouts and retries, its stream axis."""
    return RequestPolicy(
        decoding=matrix.decoding,
        request_timeout_s=matrix.timeouts.request_s,
        max_attempts=matrix.retries.max_attempts,
        backoff_s=matrix.retries.backoff_s,
        max_retry_after_s=matrix.retries.max_retry_after_s,
        stream=cell.stream,
        stream_timeouts=matrix.timeouts.stream_limits(),
    )
