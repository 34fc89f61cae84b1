"""Say what happened on one streamed turn, by the same rules as a non-streamed one. Pure.

The events are assembled (core/streams.py) into the body the stack would have sent without streaming, and
that body goes through `classify`. Before it, what only a stream has:
- an error event mid-stream is the stack's error reply, labelled as that reply would be (a parser failure
  quoting model output is the model's turn: `unparseable_text`; a refusal is `rejected_request`; any other is
  `non_response` `stream:error_event`; a refusal after model output is that too), never retried once model
  output had arrived;
- a stream that ended without its terminator, was cut by the peer (`truncated`), went silent past its gap
  timeout (`stalled`) or ran past the request's deadline (`deadline`) is `non_response`
  `transport:stream_truncated` / `transport:stream_stalled` / `transport:stream_deadline`; its partial
  content is kept; it is retried only if no model output had arrived.
After it: `stream:index_collision` names a turn whose calls the stream merged (two ids under one index).
Every input maps to exactly one outcome; nothing raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from orchestrator.core.classify import classify
from orchestrator.core.streams import INDEX_COLLISION_FLAG, StreamApi, StreamAssembly, StreamEvent, assemble
from orchestrator.core.types import Classification, ErrorInfo, Outcome, RefusalSignature, ToolsMode

StreamCut = Literal["truncated", "stalled", "deadline"]
STREAM_ERROR_DETAIL = "stream:error_event"
CUT_DETAILS: dict[str, str] = {
    "truncated": "transport:stream_truncated",
    "stalled": "transport:stream_stalled",
    "deadline": "transport:stream_deadline",
}
ERROR_EVENT_FLAG = STREAM_ERROR_DETAIL  # the flag marks every error event; the detail only the non-responses


def _partial(assembly: StreamAssembly) -> dict[str, Any]:
    """What the stream carried before it failed, kept on the verdict (never executed)."""
    choices = assembly.body.get("choices")
    if isinstance(choices, list) and choices:  # a chat chunk's message, or a raw completion's text
        message = choices[0].get("message") or {"content": choices[0].get("text")}
    else:
        message = assembly.body.get("message") or {}
    return {"raw_content": message.get("content") or None, "raw_tool_calls": message.get("tool_calls") or None}


def _with_stream_facts(verdict: Classification, assembly: StreamAssembly, **update: Any) -> Classification:
    flags = [*verdict.flags, *(f for f in assembly.flags if f not in verdict.flags)]
    return verdict.model_copy(update={"flags": flags, "stream_facts": assembly.facts(), **update})


def _error_event(
    assembly: StreamAssembly, labelled: dict[str, Any], refusals: Sequence[RefusalSignature]
) -> Classification:
    """An error event: the stack's error reply, under the status it names (500 when it names none)."""
    status = assembly.error_status or 500
    verdict = classify(refusals=refusals, http_status=status, body=assembly.error, **labelled)
    update: dict[str, Any] = {"flags": [*verdict.flags, ERROR_EVENT_FLAG]}
    # A refusal is the stack's answer before any model work; once output arrived, it is an answer cut short.
    refused_late = verdict.outcome is Outcome.REJECTED_REQUEST and assembly.output_seen
    if verdict.outcome is Outcome.NON_RESPONSE or refused_late:
        update.update(outcome=Outcome.NON_RESPONSE, detail=STREAM_ERROR_DETAIL)
    if assembly.output_seen:  # the model had produced output: this answer is final
        update["retryable"] = False
    if verdict.raw_content is None:
        update.update(_partial(assembly))
    return _with_stream_facts(verdict.model_copy(update=update), assembly)


def classify_stream(
    *,
    refusals: Sequence[RefusalSignature],
    mode: ToolsMode | str,
    tools: Sequence[Any],
    events: Sequence[StreamEvent],
    api: StreamApi,
    cut: StreamCut | None = None,
    parser_failures: Sequence[RefusalSignature] = (),
    call_format: str = "auto",
) -> Classification:
    """One streamed exchange (its HTTP status was 2xx and a stream began) -> exactly one outcome."""
    assembly = assemble(events, api)
    labelled: dict[str, Any] = {
        "mode": mode, "tools": tools, "parser_failures": parser_failures, "call_format": call_format
    }  # fmt: skip
    if assembly.error is not None:
        return _error_event(assembly, labelled, refusals)
    if not assembly.terminated:  # a terminator that arrived wins over a stall or deadline after it
        reason = cut or "truncated"
        base = classify(refusals=refusals, http_status=200, body=assembly.body, **labelled)
        verdict = Classification(
            outcome=Outcome.NON_RESPONSE,
            detail=CUT_DETAILS[reason],
            parse_path=base.parse_path,
            error=ErrorInfo(type=f"stream_{reason}", body=None),
            retryable=not assembly.output_seen,
            finish_reason=base.finish_reason,
            flags=base.flags,
            call_format=base.call_format,
            text_calls=base.text_calls,
            text_call_recoverable=base.text_call_recoverable,
            **_partial(assembly),
        )
        return _with_stream_facts(verdict, assembly)
    verdict = classify(refusals=refusals, http_status=200, body=assembly.body, **labelled)
    update: dict[str, Any] = {}
    if INDEX_COLLISION_FLAG in assembly.flags and verdict.outcome in (
        Outcome.UNPARSEABLE_TEXT,
        Outcome.HALLUCINATED_CALL,
    ):
        update["detail"] = INDEX_COLLISION_FLAG
    return _with_stream_facts(verdict, assembly, **update)
