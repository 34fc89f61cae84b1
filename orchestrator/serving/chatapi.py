"""Chat requests on the wire: payloads for the OpenAI and Ollama APIs, and one HTTP exchange.

The payload builders are pure; `post_chat` is the only I/O. A transport failure is returned as data
(never raised and never turned into an assistant message).
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.types import TokenCounts, TransportError
from orchestrator.serving.stackspec import StackSpec


class Decoding(BaseModel):
    """Decoding parameters, explicit and recorded. The paper used temperature 1.0, top_p 1.0."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(512, ge=1)
    seed: int | None = Field(None, description="Sampling seed, where the stack honours it.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Stack-specific body fields, e.g. cache_prompt.")


def build_payload(
    spec: StackSpec,
    model: str,
    messages: list[dict[str, Any]],
    decoding: Decoding,
    *,
    tools: list[dict[str, Any]] | None = None,
    response_schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The request body for this stack's chat API. `tools=None` sends no tools at all."""
    if spec.api == "ollama":
        options: dict[str, Any] = {
            "temperature": decoding.temperature,
            "top_p": decoding.top_p,
            "num_predict": decoding.max_tokens,
        }
        if decoding.seed is not None:
            options["seed"] = decoding.seed
        payload: dict[str, Any] = {"model": model, "messages": messages, "stream": False, "options": options}
        if tools is not None:
            payload["tools"] = tools
        if response_schema is not None:
            payload["format"] = response_schema
        return {**payload, **decoding.extra}
    payload = {
        "model": model,
        "messages": messages,
        "temperature": decoding.temperature,
        "top_p": decoding.top_p,
        "max_tokens": decoding.max_tokens,
    }
    if decoding.seed is not None:
        payload["seed"] = decoding.seed
    if tools is not None:
        payload["tools"] = tools
    if response_schema is not None:
        payload["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "tool_call", "schema": response_schema, "strict": True},
        }
    return {**payload, **decoding.extra}


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


def post_chat(client: httpx.Client, url: str, payload: dict[str, Any], timeout_s: float) -> ChatExchange:
    """One POST. JSON bodies are decoded; anything else is kept as text."""
    start = time.monotonic()
    try:
        reply = client.post(url, json=payload, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        return ChatExchange(None, None, TransportError(kind="timeout", message=str(exc)), time.monotonic() - start)
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
