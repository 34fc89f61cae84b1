"""One attempt of a turn on the wire: send it (streamed or not), keep a stream's raw events in the cell's side
file BEFORE anything is labelled or acted on, and label it with the one labeller (core/labelling.py).

A streamed attempt's record in `streams/<cell_id>.jsonl` holds every event with its arrival offset; the turn
record points at it (`stream_ref`) and carries the timings (`stream_facts`: time to first byte and token,
the longest gap, tokens per second), so `report --reclassify` re-assembles and re-labels it offline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from orchestrator.core.labelling import StreamInput, label_turn
from orchestrator.core.streams import StreamEvent, assemble
from orchestrator.core.types import Classification
from orchestrator.serving.chatapi import ChatExchange, post_chat, post_chat_stream

if TYPE_CHECKING:
    from orchestrator.runner.turn.agent import SeedContext


@dataclass(frozen=True)
class Attempt:
    """What one attempt sent back and how it was labelled."""

    exchange: ChatExchange
    verdict: Classification
    body: Any  # the reply body, or a stream's assembled body (what token counts are read from)
    stream_ref: str | None = None
    stream_facts: dict[str, Any] | None = None


def stream_key(ctx: SeedContext, turn: int, attempt: int) -> dict[str, Any]:
    """Which turn attempt a side-file record belongs to (the turn record's identity, as stored)."""
    return {
        "cell_id": ctx.cell_id,
        "seed": ctx.task.seed_id,
        "seed_attempt": ctx.task.seed_attempt,
        "sample": ctx.task.sample,
        "turn": turn,
        "attempt": attempt,
    }


def _tokens_per_s(completion: Any, facts: dict[str, Any]) -> float | None:
    first, last = facts.get("first_output_s"), facts.get("last_output_s")
    count = completion if isinstance(completion, int) and completion > 0 else facts.get("output_events")
    if first is None or last is None or not count or last <= first:
        return None
    return round((count - 1) / (last - first), 2) if count > 1 else None


def stream_facts(exchange: ChatExchange, verdict: Classification, body: Any) -> dict[str, Any]:
    """Timings and assembly facts of a streamed attempt (what the turn record says of its stream)."""
    capture = exchange.stream
    assert capture is not None
    facts = dict(verdict.stream_facts or {})
    usage = body.get("usage") if isinstance(body, dict) else None
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else body.get("eval_count")
    return {
        "ttfb_s": capture.ttfb_s,
        "ttft_s": facts.get("first_output_s"),
        "max_gap_s": capture.max_gap_s,
        "duration_s": round(capture.duration_s, 4),
        "cut": capture.cut,
        "cut_message": capture.cut_message,
        "tokens_per_s": _tokens_per_s(completion, facts),
        "tokens_counted_by": "usage" if isinstance(completion, int) else "events",
        **facts,
    }


def send(
    ctx: SeedContext,
    client: httpx.Client,
    url: str,
    payload: dict[str, Any],
    turn: int,
    attempt: int,
    heartbeat: Callable[[str], None],
) -> Attempt:
    """Send one attempt and label it; a stream's events are on disk before the label exists."""
    if not ctx.policy.stream:
        exchange = post_chat(client, url, payload, ctx.policy.request_timeout_s)
        return Attempt(exchange, _label(ctx, exchange), exchange.body)
    where = f"{ctx.cell_id} {ctx.task.seed_id} turn {turn} attempt {attempt}"

    def on_event(event: StreamEvent, count: int) -> None:
        heartbeat(f"{where} streaming: {count} events")

    assert ctx.policy.stream_timeouts is not None, "a streamed cell carries its stream timeouts"
    exchange = post_chat_stream(client, url, payload, ctx.server.spec.api, ctx.policy.stream_timeouts, on_event)
    if exchange.stream is None:  # it never became a stream (a refusal, a JSON body, no connection)
        return Attempt(exchange, _label(ctx, exchange), exchange.body)
    ref = ctx.record_stream({"key": stream_key(ctx, turn, attempt), **exchange.stream.record()})
    verdict = _label(ctx, exchange)
    body = assemble(exchange.stream.events, ctx.server.spec.api).body
    return Attempt(exchange, verdict, body, ref, stream_facts(exchange, verdict, body))


def _label(ctx: SeedContext, exchange: ChatExchange) -> Classification:
    stream = None
    if exchange.stream is not None:
        stream = StreamInput(events=exchange.stream.events, api=ctx.server.spec.api, cut=exchange.stream.cut)
    return label_turn(
        **ctx.server.spec.signatures(),
        mode=ctx.task.mode,
        tools=ctx.task.reading_tools,
        http_status=exchange.http_status,
        body=exchange.body,
        transport_error=exchange.transport_error,
        call_format=ctx.task.call_format,
        stream=stream,
        semantics=ctx.task.semantics,
    )
