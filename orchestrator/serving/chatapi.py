"""Chat requests on the wire: payloads for the OpenAI and Ollama APIs, and one HTTP exchange.

The payload builders are pure; `post_chat` is the only I/O. A transport failure is returned as data
(never raised and never turned into an assistant message).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.constraints import RequestSemantics
from orchestrator.core.streams import StreamApi, StreamEvent
from orchestrator.core.types import TokenCounts, TransportError
from orchestrator.serving.stackspec import SAMPLER_PARAMS, StackSpec
from orchestrator.serving.streaming import StreamCapture, StreamTimeouts, read_stream


class Decoding(BaseModel):
    """The full sampler, explicit and recorded, in canonical names (`stackspec.SAMPLER_PARAMS`). The paper used
    temperature 1.0, top_p 1.0. Every request sends every field in the stack's own names (its `sampler:`
    section), so no stack falls back to its own defaults or to the model's generation_config.json; the
    defaults below are the neutral values (each sampler stage off)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1, description="1.0 = off.")
    top_k: int = Field(0, ge=0, description="0 = off (sent as the stack's own 'off' value: 0 or -1).")
    min_p: float = Field(0.0, ge=0, le=1, description="0.0 = off.")
    repetition_penalty: float = Field(1.0, gt=0, description="Multiplicative repeat penalty; 1.0 = off.")
    presence_penalty: float = Field(0.0, ge=-2, le=2, description="0.0 = off.")
    frequency_penalty: float = Field(0.0, ge=-2, le=2, description="0.0 = off.")
    max_tokens: int = Field(512, ge=1)
    seed: int | None = Field(None, description="Sampling seed; None = not sent (the stack draws one).")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Stack-specific body fields; they override `request_fields` and the sampler."
    )


# The value of each canonical parameter at which its sampler stage does nothing.
NEUTRAL_SAMPLER: dict[str, float | int] = {
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


class SamplerNotSupported(ValueError):
    """The decoding asks for a non-neutral value of a parameter this stack's API does not accept."""


def sampler_fields(spec: StackSpec, decoding: Decoding) -> dict[str, Any]:
    """The sampler in the stack's own names and values (top_k 0 -> the stack's 'off' value); no I/O.

    Parameters the stack does not accept (`sampler.not_sent`) are left out; asking for a non-neutral value
    of one raises `SamplerNotSupported` instead of silently sampling differently."""
    sampler = spec.sampler
    fields: dict[str, Any] = {}
    for param in SAMPLER_PARAMS:
        value = getattr(decoding, param)
        if param in sampler.not_sent:
            if param in NEUTRAL_SAMPLER and value != NEUTRAL_SAMPLER[param]:
                raise SamplerNotSupported(
                    f"stack {spec.name!r} cannot send {param}={value!r}: {sampler.not_sent[param]}"
                )
            continue
        if param == "seed" and value is None:
            continue
        if param == "top_k" and value == 0:
            value = sampler.top_k_disabled
        fields[sampler.names[param]] = value
    return fields


def sampler_record(spec: StackSpec, decoding: Decoding) -> dict[str, Any]:
    """What a request carries, for the record: the sampler as sent, the fixed request fields, what is not sent."""
    return {
        "location": spec.sampler.location,
        # The seed each request carries is derived per request (core/sampling.py) from this run seed.
        "sent": {
            **sampler_fields(spec, decoding),
            **({"seed": f"per request, from run seed {decoding.seed}"} if decoding.seed is not None else {}),
        },
        "request_fields": dict(spec.request_fields),
        "not_sent": dict(spec.sampler.not_sent),
        "extra": dict(decoding.extra),
    }


def build_payload(
    spec: StackSpec,
    model: str,
    messages: list[dict[str, Any]],
    decoding: Decoding,
    *,
    tools: list[dict[str, Any]] | None = None,
    response_schema: dict[str, Any] | None = None,
    stream: bool = False,
    semantics: RequestSemantics | None = None,
) -> dict[str, Any]:
    """The request body for this stack's chat API. `tools=None` sends no tools at all; `semantics`
    (tool_choice, parallel_tool_calls) go only with tools. A streamed request carries `stream: true` and the
    stack's `stream_fields`; a non-streamed one to Ollama says `stream: false` (its default is true).

    Order of precedence: the stack's `request_fields`, then the sampler (in the stack's names, at the
    stack's location), then `decoding.extra`."""
    sampler = sampler_fields(spec, decoding)
    payload: dict[str, Any] = {"model": model, "messages": messages, **spec.request_fields}
    if stream:
        payload.update({"stream": True, **spec.stream_fields})
    elif spec.api == "ollama":
        payload["stream"] = False
    if spec.sampler.location == "options":
        payload["options"] = sampler
    else:
        payload.update(sampler)
    if tools is not None:
        payload["tools"] = tools
        payload.update(semantics.body_fields() if semantics else {})
    if response_schema is not None:
        if spec.constrained.knob == "ollama_format":
            payload["format"] = response_schema
        else:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "tool_call", "schema": response_schema, "strict": True},
            }
    return {**payload, **decoding.extra}


def build_completion_payload(
    spec: StackSpec, model: str, prompt: str, decoding: Decoding, *, stream: bool = False
) -> dict[str, Any]:
    """A raw text completion (OpenAI /v1/completions) body: the prompt as rendered by the harness, the same
    request fields and full sampler as a chat request, no tools and no template applied by the stack."""
    streamed = {"stream": True, **spec.stream_fields} if stream else {}
    fields = {**spec.request_fields, **streamed, **sampler_fields(spec, decoding)}
    return {"model": model, "prompt": prompt, **fields, **decoding.extra}


def token_counts(body: Any) -> TokenCounts:
    if not isinstance(body, dict):
        return TokenCounts()
    usage = body.get("usage")
    if isinstance(usage, dict):
        return TokenCounts(prompt=_int(usage.get("prompt_tokens")), completion=_int(usage.get("completion_tokens")))
    return TokenCounts(prompt=_int(body.get("prompt_eval_count")), completion=_int(body.get("eval_count")))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ChatExchange:
    http_status: int | None
    body: Any
    transport_error: TransportError | None
    latency_s: float
    retry_after_s: float | None = None  # the server's Retry-After header, in seconds, when it sent one
    stream: StreamCapture | None = None  # a streamed answer: its events (body is None; assembled when labelled)


def post_chat_stream(
    client: httpx.Client,
    url: str,
    payload: dict[str, Any],
    api: StreamApi,
    timeouts: StreamTimeouts,
    on_event: Callable[[StreamEvent, int], None] | None = None,
) -> ChatExchange:
    """One streamed POST. A reply that never became a stream (an error status, a JSON body) is a plain
    exchange; a stream that began is its capture, however it ended."""
    start = time.monotonic()
    result = read_stream(client, url, payload, api, timeouts, on_event)
    latency = time.monotonic() - start
    if result.capture is None:
        headers = result.reply_headers or {}
        retry = retry_after(headers.get("retry-after")) if result.http_status is not None else None
        return ChatExchange(result.http_status, result.reply_body, result.transport_error, latency, retry)
    # Headers but not one byte of the answer in time: a transport timeout (no status, as a plain request's).
    status = None if result.transport_error is not None else result.http_status
    return ChatExchange(status, None, result.transport_error, latency, stream=result.capture)


def post_chat(client: httpx.Client, url: str, payload: dict[str, Any], timeout_s: float) -> ChatExchange:
    """One POST. JSON bodies are decoded; anything else is kept as text."""
    start = time.monotonic()
    try:
        reply = client.post(url, json=payload, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        message = f"{type(exc).__name__}: {exc}"
        return ChatExchange(None, None, TransportError(kind="timeout", message=message), time.monotonic() - start)
    except httpx.HTTPError as exc:  # every other transport failure (WriteError, ProxyError, ...) is data too
        kind = "connection" if isinstance(exc, httpx.ConnectError) else "protocol"
        message = f"{type(exc).__name__}: {exc}"
        return ChatExchange(None, None, TransportError(kind=kind, message=message), time.monotonic() - start)
    latency = time.monotonic() - start
    try:
        body: Any = reply.json()
    except ValueError:
        body = reply.text
    return ChatExchange(reply.status_code, body, None, latency, retry_after(reply.headers.get("retry-after")))


def retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
