"""The full stack config of a cell, as recorded in `cells/<cell_id>.json`: what ran, what the server said,
what was sent. Built from the matrix cell, the server's handle and its probe."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.core.chattemplate import ChatTemplate
from orchestrator.core.constraints import RequestSemantics
from orchestrator.core.modes import mode_of
from orchestrator.core.types import SCHEMA_VERSION
from orchestrator.runner.config.matrix import Cell, Matrix
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.turn.bfclturn import bfcl_cell_record
from orchestrator.runner.turn.prompts import template_sha256
from orchestrator.serving.chatapi import sampler_record
from orchestrator.serving.defaults import model_generation_config
from orchestrator.serving.handle import ServerHandle
from orchestrator.serving.probe import ProbeResult
from orchestrator.serving.serverconfig import ModelRef, ServerConfig
from orchestrator.serving.stackspec import StackSpec
from orchestrator.serving.templates import NoTemplate, model_template


def effective_template(
    spec: StackSpec, probe_result: ProbeResult | None, model: ModelRef, argv: list[str] | None
) -> tuple[str | None, str | None]:
    """(sha256, source) of the chat template the server uses: what the server says when it says (llama.cpp
    /props), else what it loads: a `--chat-template` in its argv, else the model files (chat_template.jinja,
    tokenizer_config.json, GGUF metadata)."""
    said = probe_result.capabilities.get(spec.template_capability or "") if probe_result is not None else None
    if isinstance(said, str) and said:
        return hashlib.sha256(said.encode()).hexdigest(), f"server:{spec.template_capability}"
    if not model.local:
        return None, None
    try:
        template = model_template(model.path, argv, spec.template_flags)
    except NoTemplate:
        return None, None
    return template.sha256, template.source


def _without_template(spec: StackSpec, capabilities: dict[str, Any]) -> dict[str, Any]:
    """The capabilities, less the template text (its hash is recorded; the canary shows its effect)."""
    return {k: v for k, v in capabilities.items() if k != spec.template_capability}


_NO_SEMANTICS = RequestSemantics()


def cell_config(
    matrix: Matrix,
    cell: Cell,
    handle: ServerHandle | None,
    config: ServerConfig | None,
    probe_result: ProbeResult | None,
    *,
    raw_template: ChatTemplate | None = None,
    guards: frozenset[str] = frozenset(),
    tool_server: dict[str, Any] | None = None,
    resolved: Mapping[str, Suite],
) -> dict[str, Any]:
    """The full stack config of a cell: what ran, what the server said, what was sent. `resolved`: the run's
    suites as offered to the model (an MCP suite's tools listed: runner/config/resolve.py `listed_suites`); given
    always, since the matrix's own suites hold no MCP tools and a cell would record none."""
    model = config.model if config else None
    described = handle.describe() if handle else {}
    record = {
        **_stack_fields(cell, described),
        **_served_fields(cell.stack.spec, described, probe_result, model, raw_template),
        **_model_fields(cell, model),
        **_task_fields(matrix, cell, model, resolved),
        **_axis_fields(matrix, cell, resolved, guards, tool_server, probe_result),
    }
    return {**record, "config_sha256": config_sha256(record)}


def _stack_fields(cell: Cell, described: dict[str, Any]) -> dict[str, Any]:
    """Which stack config ran, and how it was started."""
    spec = cell.stack.spec
    tool_config = spec.tool_config(cell.stack.resolved_tool_config)
    image = described.get("image") or (
        spec.images.get(cell.stack.host).tagged if cell.stack.launcher == "docker" else None
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": cell.cell_id,
        "order": cell.order,
        "stack_label": cell.stack.label,
        "stack": cell.stack.stack,
        "tool_config": cell.stack.resolved_tool_config,
        "tool_flags": tool_config.flags,
        "parser": tool_config.parser,
        "launcher": cell.stack.launcher,
        "host": cell.stack.host,
        "image": image,
        "image_id": described.get("image_id"),
        "image_repo_digests": described.get("repo_digests"),
        "binary": described.get("binary") or described.get("python"),
        "binary_version": described.get("binary_version"),
        "argv": described.get("argv"),
        "env": described.get("env"),
        "base_url": described.get("base_url"),
    }


def _served_fields(
    spec: StackSpec,
    described: dict[str, Any],
    probe_result: ProbeResult | None,
    model: ModelRef | None,
    raw_template: ChatTemplate | None,
) -> dict[str, Any]:
    """What the server said of itself (its probe) and the chat template it, or the harness, renders with."""
    template_sha, template_source = (
        effective_template(spec, probe_result, model, described.get("argv")) if model else (None, None)
    )
    return {
        "stack_version": probe_result.stack_version if probe_result else None,
        "capabilities": _without_template(spec, probe_result.capabilities) if probe_result else None,
        "chat_template_sha256": template_sha,
        "chat_template_source": template_source,
        # The canary conversation rendered by the server itself (render.py): diff two cells' prompts with it.
        "canary": probe_result.canary if probe_result else None,
        # What the server applies to a sampler field a request leaves out (every canonical field is sent).
        "sampling_defaults": probe_result.sampling_defaults if probe_result else None,
        # raw-template: the model's own template the harness rendered (not the stack's).
        "raw_template": {"source": raw_template.source, "adds_bos": raw_template.adds_bos} if raw_template else None,
        "raw_template_sha256": raw_template.sha256 if raw_template else None,
    }


def _model_fields(cell: Cell, model: ModelRef | None) -> dict[str, Any]:
    return {
        "model": cell.model.name,
        "model_path": model.path if model else None,
        "model_digest": model.digest if model else cell.model.digest,
        "model_identity": model.identity if model else "claimed",
        "model_converted_from": model.converted_from if model else None,
        "quantization": (model.quantization if model else None) or cell.model.quantization,
    }


def _task_fields(matrix: Matrix, cell: Cell, model: ModelRef | None, resolved: Mapping[str, Suite]) -> dict[str, Any]:
    """What was sent: the mode, the tools as offered, the sampler, the turn cap and the seeds."""
    spec = cell.stack.spec
    suites = sorted({suite for suite, _ in cell.seeds})
    tools = {suite: resolved[suite].tools for suite in suites}
    return {
        "tools_mode": cell.mode.value,
        "hint": mode_of(cell.mode).hint,
        "call_format": cell.call_format,  # how text calls are read: auto or one recogniser (core/textcalls.py)
        "template_sha256": template_sha256(cell.mode),
        "suites": suites,
        "tool_count": {suite: len(t) for suite, t in tools.items()},
        "tools_sha256": {suite: resolved[suite].tools_sha256 for suite in suites},
        "tools": tools,
        "decoding": matrix.decoding.model_dump(),
        "sampler": sampler_record(spec, matrix.decoding),
        "prompt_cache_policy": spec.prompt_cache.model_dump(mode="json"),
        "server_defaults": {
            "generation_config": model_generation_config(model) if model else None,
            "generation_config_use": spec.sampler.model_generation_config,
        },
        "turn_cap": matrix.turn_cap_for(cell.model),
        "seeds": [seed for _, seed in cell.seeds],
    }


def _axis_fields(
    matrix: Matrix,
    cell: Cell,
    resolved: Mapping[str, Suite],
    guards: frozenset[str],
    tool_server: dict[str, Any] | None,
    probe_result: ProbeResult | None,
) -> dict[str, Any]:
    """The channel and request-semantics axes, the product's guards and tool server, and the probe's verdict."""
    suites = sorted({suite for suite, _ in cell.seeds})
    semantics = (cell.semantics(resolved[suites[0]].tools) or _NO_SEMANTICS) if suites else None
    probe = (
        probe_result.model_dump(mode="json", exclude={"server", "capabilities", "canary", "sampling_defaults"})
        if probe_result
        else None
    )
    return {
        # The channel axis: agent (the plain loop), model (first answer) or product (loop with guards).
        "channel": cell.channel,
        "sample": cell.sample,
        "without": cell.without,
        # Request semantics (axes): streamed or not; tool_choice and parallel_tool_calls (native modes only).
        "stream": cell.stream,
        "tool_choice": cell.tool_choice,
        "named_tool": semantics.named_tool if semantics else None,
        "parallel_tool_calls": cell.parallel_tool_calls,
        "stream_fields": cell.stack.spec.stream_fields if cell.stream else None,
        "stream_timeouts": dataclasses.asdict(matrix.timeouts.stream_limits()) if cell.stream else None,
        "guards": sorted(guards) if cell.channel == "product" else None,
        "tool_server": tool_server,
        "probe": probe,
        # A BFCL cell (absent on others, whose configs stay as they were): its category and how names were offered.
        **({"category": cell.category, "bfcl": bfcl_cell_record(cell.mode, resolved)} if cell.category else {}),
    }


# What makes two cells' stack configs the same: everything that decides how requests are served, and nothing
# that only says where this one ran (port, base URL, PIDs, container ids, cache paths).
IDENTITY_FIELDS: tuple[str, ...] = (
    "stack",
    "tool_config",
    "tool_flags",
    "parser",
    "launcher",
    "host",
    "image_id",
    "binary_version",
    "argv",
    "env",
    "stack_version",
    "chat_template_sha256",
    "raw_template_sha256",
    "model_digest",
    "quantization",
    "tools_mode",
    "call_format",
    "template_sha256",
    "tools_sha256",
    "decoding",
    "sampler",
    "prompt_cache_policy",
    "turn_cap",
    "channel",
    "guards",
    "stream",
    "tool_choice",
    "parallel_tool_calls",
)


PORT_FLAGS = frozenset({"--port", "-p"})
# Identity fields added after cells were first recorded: at their default (or absent) they are left out of the
# digest, so a cell recorded before the field existed keeps its config_sha256.
# The canary is evidence, not identity: it follows from the template, version and argv already here, and a
# template that prints today's date (strftime_now) would change it every day.
IDENTITY_DEFAULTS: dict[str, Any] = {
    "call_format": "auto",
    "raw_template_sha256": None,
    "channel": "agent",
    "guards": None,
    "stream": False,
    "tool_choice": "auto",
    "parallel_tool_calls": None,
}


def _portable(value: Any, exact: dict[str, str], port: str | None) -> Any:
    """`value` with this machine's particulars replaced: exact strings (paths) and the port."""
    if isinstance(value, str):
        if value in exact:
            return exact[value]
        return value.replace(f":{port}", ":{port}") if port else value
    if isinstance(value, list):  # an argv: the port is the value after --port, never any equal number
        return [
            "{port}"
            if port and item == port and index and value[index - 1] in PORT_FLAGS
            else _portable(item, exact, port)
            for index, item in enumerate(value)
        ]
    if isinstance(value, dict):
        return {key: _portable(item, exact, port) for key, item in value.items()}
    return value


def config_sha256(record: dict[str, Any]) -> str:
    """A digest of the cell's stack config identity (IDENTITY_FIELDS). The port it happened to get, the base
    URL, and where this machine keeps the binary and the model files are no part of it."""
    base_url = record.get("base_url") or ""
    port = base_url.rsplit(":", 1)[-1] if base_url.count(":") >= 2 else None
    exact: dict[str, str] = {}
    for key in ("model_path", "binary"):
        if isinstance(record.get(key), str):
            exact[record[key]] = "{" + key + "}/" + Path(record[key]).name
    identity = {
        key: _portable(record.get(key), exact, port)
        for key in IDENTITY_FIELDS
        if not (key in IDENTITY_DEFAULTS and record.get(key, IDENTITY_DEFAULTS[key]) == IDENTITY_DEFAULTS[key])
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
