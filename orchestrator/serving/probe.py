"""Probe one (stack config, model) with a single-turn tools= request before any sweep.

The verdict comes from the core classifier's outcome, so the probe and the sweep cannot disagree.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from orchestrator.core.classify import classify
from orchestrator.core.types import Classification, Outcome, ToolsMode
from orchestrator.serving.chatapi import Decoding, build_payload, post_chat
from orchestrator.serving.handle import ServerHandle
from orchestrator.serving.launchers import auth_headers
from orchestrator.serving.readiness import server_facts
from orchestrator.serving.render import canary, sampling_defaults
from orchestrator.serving.serverconfig import ServerConfig

# parser_rejected: the stack's tool-call parser is wired and failed on what the model generated (a 5xx that
# quotes or names the model's output) - not `text_only`, which means no parser turned a text call into a call.
Verdict = Literal["rejected", "text_only", "parser_rejected", "native_ok", "prose", "no_response"]

PROBE_QUESTION = "What is the status of pod api-1?"
PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "pod_status",
            "description": "Get the status of a Kubernetes pod by name.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "Pod name"}},
                "required": ["name"],
            },
        },
    }
]
# Deterministic where the stack allows; each stack's `deterministic_extra` is added (e.g. llama.cpp cache_prompt).
PROBE_DECODING = Decoding(temperature=0.0, top_p=1.0, max_tokens=96, seed=0)


class ProbeResult(BaseModel):
    server_id: str
    stack: str
    tool_config: str
    parser: str | None
    model: str
    http_status: int | None
    error_body: Any = None
    n_native_calls: int
    text_call: bool
    call_format: str | None = None  # the call format the answer's text was written in (core/textcalls.py)
    outcome: Outcome
    detail: str | None
    verdict: Verdict
    latency_s: float
    stack_version: str | None
    capabilities: dict[str, Any]
    server: dict[str, Any]
    raw_content: str | None = None
    canary: dict[str, Any] | None = Field(None, description="The canary conversation as the server rendered it.")
    sampling_defaults: dict[str, Any] | None = Field(None, description="The sampler for fields a request omits.")


def verdict_for(result: Classification) -> Verdict:
    if result.outcome is Outcome.REJECTED_REQUEST:
        return "rejected"
    if result.outcome is Outcome.NON_RESPONSE:
        return "no_response"
    if result.raw_tool_calls:
        return "native_ok"
    if result.outcome is Outcome.UNPARSEABLE_TEXT and result.error is not None:  # an HTTP error, not an answer
        return "parser_rejected"
    if result.outcome is Outcome.UNPARSEABLE_TEXT:
        return "text_only"
    return "prose"


def probe(handle: ServerHandle, config: ServerConfig, decoding: Decoding = PROBE_DECODING) -> ProbeResult:
    spec = config.stack_spec()
    headers = auth_headers(spec)
    facts = server_facts(handle.base_url, spec, config.model.name, headers)
    decoding = decoding.model_copy(update={"extra": {**spec.deterministic_extra, **decoding.extra}})
    payload = build_payload(
        spec, config.model.name, [{"role": "user", "content": PROBE_QUESTION}], decoding, tools=PROBE_TOOLS
    )
    with httpx.Client(headers=headers) as client:
        exchange = post_chat(client, handle.base_url + spec.chat_path, payload, timeout_s=300)
    verdict = classify(
        **spec.signatures(),
        mode=ToolsMode.NATIVE,
        tools=PROBE_TOOLS,
        http_status=exchange.http_status,
        body=exchange.body,
        transport_error=exchange.transport_error,
    )
    return ProbeResult(
        server_id=config.server_id,
        stack=config.stack,
        tool_config=config.tool_config,
        parser=spec.tool_config(config.tool_config).parser,
        model=config.model.name,
        http_status=exchange.http_status,
        error_body=verdict.error.body if verdict.error else None,
        n_native_calls=len(verdict.raw_tool_calls) if isinstance(verdict.raw_tool_calls, list) else 0,
        text_call=verdict.call_format is not None,  # a recogniser saw a call attempt in the text
        call_format=verdict.call_format,
        outcome=verdict.outcome,
        detail=verdict.detail,
        verdict=verdict_for(verdict),
        latency_s=exchange.latency_s,
        stack_version=facts["stack_version"],
        capabilities=facts["capabilities"],
        server=handle.describe(),
        raw_content=verdict.raw_content,
        canary=canary(handle.base_url, spec, config.model.name, headers),
        sampling_defaults=sampling_defaults(spec, facts["capabilities"]),
    )
