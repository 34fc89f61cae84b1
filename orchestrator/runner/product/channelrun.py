"""The model channel and the product channel, over the same cases and the same sampling seeds.

- model: the model's first answer to the case, recorded and scored as it is. No loop, no guards, never
  resampled (a retry happens only while no model output arrived, as in every loop).
- product: the agent loop with the guards that are on (runner/turn/guards.py). Each turn's record keeps the
  model's raw calls (`calls`), what the tool server was handed and answered (`executions`) and one event per
  guard that ran; a guard's re-prompt or retry is a turn of its own (`prompted_by`). The record is written
  before its results go back to the model; the dry-run tool server has answered by then (it changes nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.core.chattemplate import TemplateError
from orchestrator.core.classify import tools_by_name
from orchestrator.core.types import UNRAN_SEED_ENDS, Classification, GuardEvent, SeedEnd, ToolExecution, TurnRecord
from orchestrator.runner.suites.tasks import Suite, ToolResult
from orchestrator.runner.suites.toolserver import UNREACHABLE, unreachable
from orchestrator.runner.turn.agent import (
    SeedContext,
    answer_turn,
    finish_seed,
    payload_for,
    template_failure,
)
from orchestrator.runner.turn.guards import (
    DEDUP_NOTE,
    FINAL_JSON_RETRY,
    STALL_REPROMPT,
    call_signature,
    dedup_check,
    fallback_answer,
    final_json_check,
    repair_call,
    short_circuit_check,
    stall_check,
)
from orchestrator.runner.turn.prompts import build_request, continue_messages, initial_messages

Record = Callable[[TurnRecord], None]
Heartbeat = Callable[[str], None]


def run_model_case(ctx: SeedContext, record: Record, heartbeat: Heartbeat = lambda _m: None) -> TurnRecord:
    """One request: the case's first answer is the whole run (its end says whether the stack let it run)."""
    seed = ctx.task.suite.seed(ctx.task.seed_id)
    messages = initial_messages(ctx.task.mode, ctx.task.suite.system_prompt, seed.request, ctx.task.suite.tools)
    with httpx.Client(headers=ctx.server.headers) as client:
        cache = ctx.server.reset_cache(client) if ctx.server.reset_cache else None
        try:
            request = build_request(ctx.task.mode, messages, ctx.task.suite.tools, ctx.task.template)
        except TemplateError as exc:
            return finish_seed(record, template_failure(ctx, 0, exc), SeedEnd.TEMPLATE_ERROR)
        last, _verdict, end = answer_turn(ctx, client, request, payload_for(ctx, request), 0, heartbeat, record, cache)
    return finish_seed(record, last, end if end in UNRAN_SEED_ENDS else SeedEnd.FIRST_ANSWER)


@dataclass
class ProductState:
    """What the product loop knows about its case so far."""

    messages: list[dict[str, Any]]
    executed: set[str] = field(default_factory=set)  # signatures of calls the tool server was handed
    observations: list[Any] = field(default_factory=list)  # results of calls the server answered without error
    last_results: int = 0  # tool answers the previous turn gave the model (the reply to them is a summary)
    last_call_refused: bool = False
    stalls: int = 0
    json_retries: int = 0
    prompted_by: str | None = None


@dataclass(frozen=True)
class Step:
    """What one turn of the product loop decided: the record's additions, and either an end or more messages."""

    executions: list[ToolExecution]
    events: list[GuardEvent]
    messages: list[dict[str, Any]]
    end: SeedEnd | None = None
    final_answer: str | None = None
    prompted_by: str | None = None


def run_product_case(ctx: SeedContext, record: Record, heartbeat: Heartbeat = lambda _m: None) -> TurnRecord:
    """The agent loop with guards, to a final answer, a short-circuit, a second stall, or the turn cap."""
    task = ctx.task
    seed = task.suite.seed(task.seed_id)
    state = ProductState(initial_messages(task.mode, task.suite.system_prompt, seed.request, task.suite.tools))
    with httpx.Client(headers=ctx.server.headers) as client:
        cache = ctx.server.reset_cache(client) if ctx.server.reset_cache else None
        for turn in range(ctx.task.turn_cap):
            try:
                request = build_request(ctx.task.mode, state.messages, ctx.task.suite.tools, ctx.task.template)
            except TemplateError as exc:
                return finish_seed(record, template_failure(ctx, turn, exc), SeedEnd.TEMPLATE_ERROR)
            first = cache if turn == 0 else None
            attempts = _prompted(record, state.prompted_by)  # a retried attempt of a re-prompted turn says so too
            payload = payload_for(ctx, request)
            last, verdict, end = answer_turn(ctx, client, request, payload, turn, heartbeat, attempts, first)
            last = last.model_copy(update={"prompted_by": state.prompted_by})
            if end in UNRAN_SEED_ENDS:  # the stack cut the case short: nothing for a guard to act on
                return finish_seed(record, last, end)
            step = _act_on_calls(ctx, verdict, state, turn) if verdict.calls else _judge_reply(ctx, verdict, state)
            last = last.model_copy(update={"executions": step.executions, "guard_events": step.events})
            if any(unreachable(e) for e in step.executions):  # the tool server's failure, not the model's
                flagged = last.model_copy(update={"flags": [*last.flags, UNREACHABLE]})
                return finish_seed(record, flagged, SeedEnd.TOOL_SERVER_DIED)
            if step.end is not None:
                return finish_seed(record, last, step.end, final_answer=step.final_answer)
            if turn + 1 == ctx.task.turn_cap:
                return finish_seed(record, last, SeedEnd.TURN_CAP)
            record(last)
            state.messages = [*state.messages, *step.messages]
            state.prompted_by = step.prompted_by
    raise AssertionError("unreachable: the turn cap ends every case")


def _prompted(record: Record, prompted_by: str | None) -> Record:
    return lambda turn_record: record(turn_record.model_copy(update={"prompted_by": prompted_by}))


def _on(ctx: SeedContext, guard: str) -> bool:
    return guard in ctx.product.guards


def _act_on_calls(ctx: SeedContext, verdict: Classification, state: ProductState, turn: int) -> Step:
    """Repair, de-duplicate and execute the turn's calls; then the short-circuit and a submit end the case."""
    assert ctx.product.execute_call is not None, "the product channel needs a tool server"
    schemas = tools_by_name(ctx.task.suite.tools)
    executions: list[ToolExecution] = []
    events: list[GuardEvent] = []
    for raw in verdict.calls:
        call = raw
        if _on(ctx, "repair"):
            call, event = repair_call(raw, schemas)
            events.append(event)
        if _on(ctx, "dedup"):
            event = dedup_check(call, state.executed)
            events.append(event)
            if event.fired:  # not handed to the server again: the model is told its result is above
                executions.append(ToolExecution(call=call, result={"note": DEDUP_NOTE}, sent=False))
                continue
        execution = ctx.product.execute_call(call)
        if execution.sent:
            state.executed.add(call_signature(call))
        executions.append(execution)
    observations_before = len(state.observations)
    state.observations += [e.result for e in executions if e.sent and not e.error]
    state.last_results = len(executions)
    state.last_call_refused = all(e.error for e in executions)
    if _on(ctx, "short_circuit"):
        event = short_circuit_check(executions, frozenset(ctx.task.suite.deterministic), observations_before)
        events.append(event)
        if event.fired:
            return Step(executions, events, [], SeedEnd.SHORT_CIRCUIT, final_answer=str(event.after))
    submitted = _submitted_answer(ctx.task.suite, executions)
    if submitted is not None:
        return Step(executions, events, [], SeedEnd.SUBMITTED, final_answer=submitted)
    results = [ToolResult(call=e.call, result=e.result, error=e.error) for e in executions]
    messages = continue_messages(ctx.server.spec.api, verdict, results, turn, mode=ctx.task.mode)
    return Step(executions, events, messages)


def _submitted_answer(suite: Suite, executions: list[ToolExecution]) -> str | None:
    """An inline suite's submit call that went through ends the case with its answer."""
    submit = suite.submit_tool
    for execution in executions:
        if submit and execution.call.name == submit and execution.sent and not execution.error:
            key = suite.dry_run[submit].key or "answer"
            arguments = execution.call.arguments if isinstance(execution.call.arguments, dict) else {}
            return str(arguments.get(key, ""))
    return None


def _judge_reply(ctx: SeedContext, verdict: Classification, state: ProductState) -> Step:
    """A reply without calls: JSON written as a final answer is retried once, then replaced by an answer built
    from the results; a stall is re-prompted once and ends the case the second time; else it is the answer."""
    text = verdict.raw_content or ""
    events: list[GuardEvent] = []
    follows_results, state.last_results = state.last_results, 0  # only the reply right after results summarises
    if _on(ctx, "final_json"):
        event = final_json_check(text)
        if event.fired and state.json_retries == 0:
            state.json_retries += 1
            state.last_results = follows_results  # the retried answer still summarises those results
            return _reprompt(text, [event.model_copy(update={"after": "retry"})], "final_json", FINAL_JSON_RETRY)
        if event.fired:
            answer = fallback_answer(state.observations)
            events.append(event.model_copy(update={"after": answer}))
            return Step([], events, [], SeedEnd.ANSWERED, final_answer=answer)
        events.append(event)
    if _on(ctx, "stall"):
        request = ctx.task.suite.seed(ctx.task.seed_id).request
        event = stall_check(
            text, user_request=request, tool_results_seen=follows_results, last_call_refused=state.last_call_refused
        )
        events.append(event)
        if event.fired:
            state.stalls += 1
            if state.stalls == 1:
                return _reprompt(text, events, "stall", STALL_REPROMPT)
            return Step([], events, [], SeedEnd.STALLED, final_answer=text)
    return Step([], events, [], SeedEnd.ANSWERED, final_answer=text)


def _reprompt(text: str, events: list[GuardEvent], guard: str, message: str) -> Step:
    messages = [{"role": "assistant", "content": text}, {"role": "user", "content": message}]
    return Step([], events, messages, prompted_by=guard)
