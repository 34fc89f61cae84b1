"""The agent loop for one seed (ReAct style).

Each turn: build the mode's request, send it, classify the answer, WRITE THE TURN RECORD, and only then
act on it: execute valid calls against the dry-run tools and append their results in the mode's form.
Prose or an unparseable answer ends the seed (there is nothing to execute); a `submit` call ends it; a
refused request ends it; a non-response is retried within a bound, every attempt recorded with its error
type (never turned into an assistant message). A hard turn cap applies to every mode; in `constrained`
mode the same call repeated `loop_repeats` times in a row also ends the seed.
Dry-run tool results are a pure function of the call, so they are computed to decide how the turn ends;
the record is written before the conversation continues with them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from orchestrator.core.classify import classify
from orchestrator.core.modes import mode_of
from orchestrator.core.types import Outcome, SeedEnd, ToolsMode, TurnRecord
from orchestrator.runner.modes import build_request, continue_messages, initial_messages, injects_hint
from orchestrator.runner.tasks import Suite, answer_correct, execute
from orchestrator.serving.chatapi import Decoding, build_payload, post_chat, token_counts
from orchestrator.serving.stackspec import StackSpec


@dataclass(frozen=True)
class SeedContext:
    """Everything one seed run needs; passed whole rather than as a dozen parameters."""

    run_id: str
    cell_id: str
    stack_label: str
    spec: StackSpec
    parser: str | None
    stack_version: str | None
    base_url: str
    model: str
    mode: ToolsMode
    suite: Suite
    seed_id: str
    decoding: Decoding
    turn_cap: int
    loop_repeats: int
    request_timeout_s: float
    max_attempts: int
    backoff_s: float
    headers: dict[str, str]


def run_seed(
    ctx: SeedContext, record: Callable[[TurnRecord], None], heartbeat: Callable[[str], None] = lambda _m: None
) -> TurnRecord:
    """Run one seed to its end; every turn (and retry attempt) goes to `record` before it is acted on."""
    seed = ctx.suite.seed(ctx.seed_id)
    tools = ctx.suite.tools
    messages = initial_messages(ctx.mode, ctx.suite.system_prompt, seed.request, tools)
    recent_calls: list[str] = []
    url = ctx.base_url.rstrip("/") + ctx.spec.chat_path
    last: TurnRecord | None = None
    with httpx.Client(headers=ctx.headers) as client:
        for turn in range(ctx.turn_cap):
            request = build_request(ctx.mode, messages, tools)
            payload = build_payload(
                ctx.spec,
                ctx.model,
                request.messages,
                ctx.decoding,
                tools=request.tools,
                response_schema=request.response_schema,
            )
            for attempt in range(ctx.max_attempts):
                heartbeat(f"{ctx.cell_id} {ctx.seed_id} turn {turn} attempt {attempt}")
                exchange = post_chat(client, url, payload, ctx.request_timeout_s)
                verdict = classify(
                    refusals=ctx.spec.refusals,
                    mode=ctx.mode,
                    tools=tools,
                    http_status=exchange.http_status,
                    body=exchange.body,
                    transport_error=exchange.transport_error,
                )
                last = TurnRecord(
                    run_id=ctx.run_id,
                    cell_id=ctx.cell_id,
                    seed=ctx.seed_id,
                    suite=ctx.suite.suite,
                    turn=turn,
                    attempt=attempt,
                    model=ctx.model,
                    stack=ctx.spec.name,
                    stack_config=ctx.stack_label,
                    stack_version=ctx.stack_version,
                    tools_mode=ctx.mode,
                    hint=injects_hint(ctx.mode),
                    http_status=exchange.http_status,
                    parser=ctx.parser,
                    parse_path=verdict.parse_path,
                    outcome=verdict.outcome,
                    detail=verdict.detail,
                    error=verdict.error,
                    latency_s=round(exchange.latency_s, 4),
                    tokens=token_counts(exchange.body),
                    raw_content=verdict.raw_content,
                    raw_tool_calls=verdict.raw_tool_calls,
                    calls=verdict.calls,
                    text_call_recoverable=verdict.text_call_recoverable,
                    raw_body=exchange.body,
                )
                if verdict.outcome is not Outcome.NON_RESPONSE:
                    break
                if attempt + 1 == ctx.max_attempts:
                    record(last.model_copy(update={"end": SeedEnd.RETRIES_EXHAUSTED}))
                    return last
                record(last)
                time.sleep(ctx.backoff_s * (attempt + 1))
            assert last is not None
            end = _end_without_calls(verdict.outcome)
            if end:
                record(last.model_copy(update={"end": end}))
                return last
            results = [execute(ctx.suite, seed, call) for call in verdict.calls]
            submitted = next((r for r in results if r.submitted), None)
            signature = json.dumps([[c.name, c.arguments] for c in verdict.calls], sort_keys=True, default=str)
            recent_calls = [*recent_calls[-(ctx.loop_repeats - 1) :], signature]
            looping = (
                mode_of(ctx.mode).detects_loops
                and len(recent_calls) == ctx.loop_repeats
                and len(set(recent_calls)) == 1
            )
            if submitted is not None:
                success = answer_correct(seed.expected, submitted.answer)
                final = last.model_copy(update={"end": SeedEnd.SUBMITTED, "task_success": success})
                record(final)
                return final
            if looping or turn + 1 == ctx.turn_cap:
                final = last.model_copy(update={"end": SeedEnd.LOOP if looping else SeedEnd.TURN_CAP})
                record(final)
                return final
            record(last)
            messages = [*messages, *continue_messages(ctx.spec.api, verdict, results, turn)]
    raise AssertionError("unreachable: the turn cap ends every seed")


def _end_without_calls(outcome: Outcome) -> SeedEnd | None:
    return {
        Outcome.NO_CALL_PROSE: SeedEnd.PROSE,
        Outcome.UNPARSEABLE_TEXT: SeedEnd.UNPARSEABLE,
        Outcome.REJECTED_REQUEST: SeedEnd.REJECTED,
    }.get(outcome)
