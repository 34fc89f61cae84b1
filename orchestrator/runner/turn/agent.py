"""The agent loop for one seed (ReAct style).

Each turn: build the mode's request, send it, classify the answer, WRITE THE TURN RECORD, and only then
act on it: execute valid calls against the dry-run tools and append their results in the mode's form.

- A retry happens only when no model output arrived (the classifier's `retryable`: transport errors, 5xx
  without model output, 429, 503 loading). Any 2xx answer, however empty, is the model's answer and final.
  Every attempt is its own record; a 429's Retry-After is honoured up to a bound.
- After any non-response the server's liveness is checked: a dead server ends the seed as `server_died`
  (not a finished seed: the sweep restarts the server and reruns it).
- Prose, an unparseable answer, an empty answer, a refusal or a context overflow end the seed (nothing to
  execute); a `submit` call ends it. A hard turn cap applies to every mode; a mode that detects loops also
  ends after `loop_repeats` identical calls in a row.
- A cancelled seed (Ctrl-C) stops before its next request and writes nothing more: `--resume` reruns it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.core.chattemplate import ChatTemplate, TemplateError
from orchestrator.core.classify import is_context_overflow
from orchestrator.core.constraints import RequestSemantics
from orchestrator.core.modes import mode_of
from orchestrator.core.replyfacts import (
    CACHE_NOT_CLEARED_FLAG,
    CACHE_SHARED_FLAG,
    PROMPT_COUNT_UNAVAILABLE_FLAG,
    PROMPT_TRUNCATED_FLAG,
    TEMPLATE_FAILURE_DETAIL,
    prompt_truncated,
)
from orchestrator.core.sampling import sampling_seed
from orchestrator.core.types import (
    Classification,
    ErrorInfo,
    Outcome,
    ParsedCall,
    SeedEnd,
    ToolExecution,
    ToolsMode,
    TurnRecord,
)
from orchestrator.runner.suites.tasks import Suite, answer_correct, execute
from orchestrator.runner.turn import tracing
from orchestrator.runner.turn.exchange import Attempt, send
from orchestrator.runner.turn.prompts import Request, build_request, continue_messages, initial_messages
from orchestrator.serving.chatapi import (
    ChatExchange,
    Decoding,
    build_completion_payload,
    build_payload,
    token_counts,
)
from orchestrator.serving.render import PromptCounter
from orchestrator.serving.stackspec import StackSpec
from orchestrator.serving.streaming import StreamTimeouts

LIVENESS_GRACE_S = 1.0


class SeedCancelled(Exception):
    """The run was interrupted: this seed stops without another record (resume reruns it)."""


@dataclass(frozen=True, kw_only=True)
class SeedTask:
    """What the seed asks and how it is posed: the case, the mode, the turn budget and how calls are read."""

    suite: Suite
    seed_id: str
    mode: ToolsMode
    turn_cap: int
    loop_repeats: int
    sample: int = 0  # index of a repeated sample of this case: its own sampling seeds
    seed_attempt: int = 0
    call_format: str = "auto"  # how text calls are read (the cell's `call_format`: auto or one recogniser)
    template: ChatTemplate | None = None  # raw-template: the model's own chat template, rendered by the harness
    semantics: RequestSemantics | None = None  # tool_choice / parallel_tool_calls (native modes only)
    # A case with tools of its own (a BFCL case): what is offered, and what its calls are read against (the
    # offered tools under every spelling the case accepts). None: the suite's tools, for both.
    tools: list[dict[str, Any]] | None = None
    read_tools: list[dict[str, Any]] | None = None

    @property
    def offered_tools(self) -> list[dict[str, Any]]:
        return self.suite.tools if self.tools is None else self.tools

    @property
    def reading_tools(self) -> list[dict[str, Any]]:
        return self.read_tools if self.read_tools is not None else self.offered_tools


@dataclass(frozen=True, kw_only=True)
class ServedBy:
    """The server as this seed reaches it: which stack config, where, and what it can tell about itself."""

    stack_label: str
    spec: StackSpec
    parser: str | None
    stack_version: str | None
    base_url: str
    model: str
    headers: dict[str, str]
    shared_server: bool = False  # other seeds run concurrently on this server (each turn is flagged)
    server_alive: Callable[[], bool] = lambda: True
    # Clears the server's prompt cache at the seed's start; its result goes on the seed's first record.
    reset_cache: Callable[[httpx.Client], dict[str, Any]] | None = None
    count_prompt: PromptCounter | None = None  # the server's own count of each turn's prompt (truncation check)


@dataclass(frozen=True, kw_only=True)
class RequestPolicy:
    """How every request of the seed is sent, read and retried."""

    decoding: Decoding
    request_timeout_s: float
    max_attempts: int
    backoff_s: float
    max_retry_after_s: float = 60.0
    stream: bool = False  # the cell's stream axis: every request is sent with stream: true and read as it arrives
    stream_timeouts: StreamTimeouts | None = None  # first byte, longest gap, whole request


@dataclass(frozen=True, kw_only=True)
class ProductSetup:
    """The channel axis: which loop runs the case, and for the product channel its guards and tool server."""

    channel: str | None = None  # model | product; None: this loop (no channel axis)
    without: str | None = None  # ablation: the guard switched off in this cell
    guards: frozenset[str] = frozenset()  # product channel: the guards that are on
    # Product channel: hands one call to the tool server (dry run) and returns what it answered.
    execute_call: Callable[[ParsedCall], ToolExecution] | None = None


@dataclass(frozen=True, kw_only=True)
class SeedContext:
    """Everything one seed run needs, in four parts by what each says (the task, the server, the request
    policy, the channel), plus where it belongs and the run's shared signals."""

    run_id: str
    cell_id: str
    task: SeedTask
    server: ServedBy
    policy: RequestPolicy
    product: ProductSetup = field(default_factory=ProductSetup)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Writes one streamed attempt's raw events to the cell's side file; returns the reference the turn keeps.
    record_stream: Callable[[dict[str, Any]], str] = lambda _record: ""


def run_seed(
    ctx: SeedContext, record: Callable[[TurnRecord], None], heartbeat: Callable[[str], None] = lambda _m: None
) -> TurnRecord:
    """Run one seed to its end; every turn (and retry attempt) goes to `record` before it is acted on.
    Raises SeedCancelled when `ctx.cancelled` is set."""
    seed = ctx.task.suite.seed(ctx.task.seed_id)
    tools = ctx.task.suite.tools
    rules = mode_of(ctx.task.mode)
    messages = initial_messages(ctx.task.mode, ctx.task.suite.system_prompt, seed.request, tools)
    recent_calls: list[str] = []
    with httpx.Client(headers=ctx.server.headers) as client:
        cache = ctx.server.reset_cache(client) if ctx.server.reset_cache else None
        for turn in range(ctx.task.turn_cap):
            try:
                request = build_request(ctx.task.mode, messages, tools, ctx.task.template)
            except TemplateError as exc:  # the harness cannot build the prompt: no request, nothing the model did
                return finish_seed(record, template_failure(ctx, turn, exc), SeedEnd.TEMPLATE_ERROR)
            last, verdict, end = answer_turn(
                ctx, client, request, payload_for(ctx, request), turn, heartbeat, record, cache if turn == 0 else None
            )
            if end is not None:
                return finish_seed(record, last, end)
            results = [execute(ctx.task.suite, seed, call) for call in verdict.calls]
            submitted = next((r for r in results if r.submitted), None)
            if submitted is not None:
                success = answer_correct(seed.expected, submitted.answer)
                return finish_seed(record, last, SeedEnd.SUBMITTED, task_success=success)
            signature = json.dumps([[c.name, c.arguments] for c in verdict.calls], sort_keys=True, default=str)
            recent_calls = [*recent_calls[-(ctx.task.loop_repeats - 1) :], signature]
            looping = rules.detects_loops and len(recent_calls) == ctx.task.loop_repeats and len(set(recent_calls)) == 1
            if looping or turn + 1 == ctx.task.turn_cap:
                return finish_seed(record, last, SeedEnd.LOOP if looping else SeedEnd.TURN_CAP)
            record(last)
            messages = [*messages, *continue_messages(ctx.server.spec.api, verdict, results, turn, mode=ctx.task.mode)]
    raise AssertionError("unreachable: the turn cap ends every seed")


def payload_for(ctx: SeedContext, request: Request) -> Callable[[int], dict[str, Any]]:
    """The request body for each attempt of a turn (each attempt carries its own sampling seed)."""

    def payload(attempt: int) -> dict[str, Any]:
        decoding = ctx.policy.decoding.model_copy(update={"seed": _sampling_seed(ctx, attempt)})
        if request.prompt is not None:
            stream = ctx.policy.stream
            return build_completion_payload(ctx.server.spec, ctx.server.model, request.prompt, decoding, stream=stream)
        return build_payload(
            ctx.server.spec,
            ctx.server.model,
            request.messages,
            decoding,
            tools=request.tools,
            response_schema=request.response_schema,
            stream=ctx.policy.stream,
            semantics=ctx.task.semantics,
        )

    return payload


def answer_turn(
    ctx: SeedContext,
    client: httpx.Client,
    request: Request,
    payload: Callable[[int], dict[str, Any]],
    turn: int,
    heartbeat: Callable[[str], None],
    record: Callable[[TurnRecord], None],
    cache: dict[str, Any] | None,
) -> tuple[TurnRecord, Classification, SeedEnd | None]:
    """One turn's answer, retried only while no model output arrived. Returns the turn's record (not yet
    written unless it was a retried attempt), its verdict, and the seed end it forces, if any."""
    path = ctx.server.spec.completion_path if request.prompt is not None else ctx.server.spec.chat_path
    url = ctx.server.base_url.rstrip("/") + (path or ctx.server.spec.chat_path)
    for attempt in range(ctx.policy.max_attempts):
        if ctx.cancelled.is_set():
            raise SeedCancelled(ctx.task.seed_id)
        heartbeat(f"{ctx.cell_id} {ctx.task.seed_id} turn {turn} attempt {attempt}")
        tracing.request_started()  # this attempt's turn span starts here (tracing on)
        sent = send(ctx, client, url, payload(attempt), turn, attempt, heartbeat)
        if ctx.cancelled.is_set():  # the server is being torn down: this answer is not the model's
            raise SeedCancelled(ctx.task.seed_id)
        exchange, verdict = sent.exchange, sent.verdict
        rendered = _rendered_prompt_tokens(ctx, client, request, exchange)
        last = turn_record(ctx, turn, attempt, sent, cache if attempt == 0 else None, rendered)
        if verdict.outcome is Outcome.NON_RESPONSE and not ctx.server.server_alive():
            return last, verdict, SeedEnd.SERVER_DIED
        if not verdict.retryable:
            return last, verdict, end_without_calls(verdict)
        if attempt + 1 == ctx.policy.max_attempts:
            # A dying server can still look alive the instant its socket closes: a short grace before blaming
            # the retries (the server's own Retry-After is moot: there is no next attempt).
            if ctx.cancelled.wait(min(LIVENESS_GRACE_S, _retry_delay(ctx, attempt, exchange))):
                raise SeedCancelled(ctx.task.seed_id)
            return last, verdict, SeedEnd.RETRIES_EXHAUSTED if ctx.server.server_alive() else SeedEnd.SERVER_DIED
        record(last)  # the failed attempt is on disk before the wait
        if ctx.cancelled.wait(_retry_delay(ctx, attempt, exchange)):
            raise SeedCancelled(ctx.task.seed_id)
    raise AssertionError("unreachable: max_attempts >= 1")


def _rendered_prompt_tokens(
    ctx: SeedContext, client: httpx.Client, request: Request, exchange: ChatExchange
) -> int | None:
    """The server's own count of the prompt it answered (only for answers: a refusal used no prompt)."""
    if ctx.server.count_prompt is None or exchange.http_status is None or not 200 <= exchange.http_status < 300:
        return None
    return ctx.server.count_prompt(client, request.messages, request.tools, request.prompt)


def template_failure(ctx: SeedContext, turn: int, exc: TemplateError) -> TurnRecord:
    """The turn the model's template could not render: recorded (never hidden), no request sent, out of the
    fidelity denominator like any turn without model output."""
    verdict = Classification(
        outcome=Outcome.NON_RESPONSE,
        detail=TEMPLATE_FAILURE_DETAIL,
        parse_path=mode_of(ctx.task.mode).parse_path,
        error=ErrorInfo(type="template_error", body=str(exc)),
    )
    return turn_record(ctx, turn, 0, Attempt(ChatExchange(None, None, None, 0.0), verdict, None), None)


def _sampling_seed(ctx: SeedContext, attempt: int) -> int | None:
    return sampling_seed(ctx.policy.decoding.seed, ctx.task.seed_id, ctx.task.sample, attempt)


def _retry_delay(ctx: SeedContext, attempt: int, exchange: ChatExchange) -> float:
    if exchange.retry_after_s is not None:  # the server said when: honour it, within a bound
        return min(exchange.retry_after_s, ctx.policy.max_retry_after_s)
    return ctx.policy.backoff_s * (attempt + 1)


def turn_record(
    ctx: SeedContext,
    turn: int,
    attempt: int,
    sent: Attempt,
    cache: dict[str, Any] | None,
    rendered: int | None = None,
) -> TurnRecord:
    exchange, verdict = sent.exchange, sent.verdict
    flags = list(verdict.flags)
    tokens = token_counts(sent.body)
    if prompt_truncated(tokens.prompt, rendered):
        flags.append(PROMPT_TRUNCATED_FLAG)
    answered = exchange.http_status is not None and 200 <= exchange.http_status < 300
    if ctx.server.count_prompt is not None and answered and rendered is None:
        flags.append(PROMPT_COUNT_UNAVAILABLE_FLAG)
    if cache is not None and not cache.get("cleared", False):  # this seed may see an earlier seed's cache
        flags.append(CACHE_NOT_CLEARED_FLAG)
    if ctx.server.shared_server:
        flags.append(CACHE_SHARED_FLAG)
    return TurnRecord(
        run_id=ctx.run_id,
        cell_id=ctx.cell_id,
        seed=ctx.task.seed_id,
        seed_attempt=ctx.task.seed_attempt,
        sample=ctx.task.sample,
        sampling_seed=_sampling_seed(ctx, attempt),
        suite=ctx.task.suite.suite,
        turn=turn,
        attempt=attempt,
        model=ctx.server.model,
        stack=ctx.server.spec.name,
        stack_config=ctx.server.stack_label,
        stack_version=ctx.server.stack_version,
        tools_mode=ctx.task.mode,
        hint=mode_of(ctx.task.mode).hint,
        http_status=exchange.http_status,
        parser=ctx.server.parser,
        parse_path=verdict.parse_path,
        outcome=verdict.outcome,
        detail=verdict.detail,
        error=verdict.error,
        latency_s=round(exchange.latency_s, 4),
        tokens=tokens,
        prompt_tokens_rendered=rendered,
        raw_content=verdict.raw_content,
        raw_tool_calls=verdict.raw_tool_calls,
        calls=verdict.calls,
        text_call_recoverable=verdict.text_call_recoverable,
        call_format=verdict.call_format,
        text_calls=verdict.text_calls,
        raw_body=exchange.body,  # a stream's body is its events, in the side file (`stream_ref`)
        stream=ctx.policy.stream,
        stream_ref=sent.stream_ref,
        stream_facts=sent.stream_facts,
        tool_choice=ctx.task.semantics.tool_choice if ctx.task.semantics else None,
        parallel_tool_calls=ctx.task.semantics.parallel_tool_calls if ctx.task.semantics else None,
        constraint_honoured=verdict.constraint_honoured,
        finish_reason=verdict.finish_reason,
        flags=flags,
        prompt_cache=cache,
        channel=ctx.product.channel,
        without=ctx.product.without,
    )


def finish_seed(record: Callable[[TurnRecord], None], last: TurnRecord, end: SeedEnd, **extra: Any) -> TurnRecord:
    final = last.model_copy(update={"end": end, **extra})
    record(final)
    return final


def end_without_calls(verdict: Classification) -> SeedEnd | None:
    """The seed end an answer forces when there is no call to execute; None when the loop goes on."""
    if verdict.outcome is Outcome.REJECTED_REQUEST:
        return SeedEnd.CONTEXT_OVERFLOW if is_context_overflow(verdict.detail) else SeedEnd.REJECTED
    return {
        Outcome.NO_CALL_PROSE: SeedEnd.PROSE,
        Outcome.UNPARSEABLE_TEXT: SeedEnd.UNPARSEABLE,
        Outcome.NON_RESPONSE: SeedEnd.EMPTY,  # a final answer with nothing in it: never resampled
    }.get(verdict.outcome)
