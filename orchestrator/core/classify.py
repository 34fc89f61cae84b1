"""Say what happened on one turn. Pure: (stack signatures, mode, offered tools, status, body, error) -> outcome.

Order of questions, after the triage order of the paper: did the server answer at all? did the stack's own
parser reject what the model generated (a stack's known parser-failure signature: the model's turn, never
retried)? was it rate-limited? did it refuse (any other 4xx, or a stack's known refusal signature under
another status; a context overflow is a refusal of its own kind)? did it return a usable message? only then:
which calls does the active parse path see, and do they validate against the offered schemas?
Calls written as text are read by the recognisers of core/textcalls.py (every known call format, or the one
the cell names); every verdict says which format matched (`call_format`) and what it recovered (`text_calls`),
in native mode too, where a text call is a parse loss and is never executed.
A request may be retried (`retryable`) only when no model output arrived; a 2xx answer is always final.
Every verdict carries the stack's `finish_reason` and `flags` (core/replyfacts.py).
Never raises: every input maps to exactly one outcome. Replies are untrusted: JSON read from them is bounded
(size and depth: core/callformats/base.py), arguments are checked against their schemas in linear time
(RE2 patterns: core/toolschemas.py), and what a verdict records is made writable (core/jsonsafe.py). A tool
schema is configuration: one that is unusable is caught before a run (`tool_schema_problems`); here it
labels a call `schema:invalid_tool_schema`, never a model failure of its own kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from orchestrator.core.callformats.base import MAX_DEPTH, too_deep
from orchestrator.core.jsonsafe import json_safe
from orchestrator.core.modes import JSON_FORMAT, Mode, mode_of
from orchestrator.core.replyfacts import (
    TOOL_CALLS_EMPTY_FLAG,
    content_text,
    finish_reason_of,
    message_of,
    quoted_output,
    reasoning_text,
    reply_flags,
)
from orchestrator.core.textcalls import (
    AUTO,
    FORMATS,
    ArgumentsNotJSON,
    TextCallParse,
    decode_arguments,
    extract_text_calls,
)
from orchestrator.core.toolschemas import arguments_error
from orchestrator.core.types import (
    Classification,
    ErrorInfo,
    Outcome,
    ParsedCall,
    RefusalSignature,
    ToolsMode,
    TransportError,
)

# The detail of a context overflow (a `refusals:` signature in stacks/*.yaml): a refusal, not a tool refusal.
CONTEXT_OVERFLOW_DETAIL = "refused:context_overflow"
RATE_LIMITED_DETAIL = "server:rate_limited"
AUTO_FORMAT = AUTO  # every recogniser, in textcalls.FORMATS order


def known_call_formats() -> tuple[str, ...]:
    """What a cell's `call_format` may be: `auto` or one recogniser of core/textcalls.py."""
    return (AUTO_FORMAT, *FORMATS)


def check_call_format(name: str) -> str:
    """`name` when it is a known call format; else a ValueError naming the known ones."""
    if name not in known_call_formats():
        raise ValueError(f"unknown call format {name!r} (known: {', '.join(known_call_formats())})")
    return name


def read_text_calls(content: str | None, *, tools: Sequence[Any], call_format: str = AUTO_FORMAT) -> TextCallParse:
    """The calls written as text in `content`. `auto` tries every recogniser; a named format tries that one,
    then JSON (what the hint prompts ask for and what every earlier version read), so naming a model's own
    format never turns a JSON call that follows the prompt into prose."""
    parse = extract_text_calls(content, tools=list(tools or ()), call_format=call_format)
    if parse.attempted or call_format in (AUTO_FORMAT, JSON_FORMAT) or JSON_FORMAT not in FORMATS:
        return parse
    return extract_text_calls(content, tools=list(tools or ()), call_format=JSON_FORMAT)


def _text_facts(parse: TextCallParse) -> dict[str, Any]:
    """What a verdict says about the text, in every mode: the format that matched and the calls it recovered."""
    return {
        "call_format": parse.call_format,
        "text_calls": list(parse.calls) if parse.ok else [],
        "text_call_recoverable": parse.ok,
    }


def is_context_overflow(detail: str | None) -> bool:
    """The conversation outgrew the server's context: refused, but not for lack of tool support."""
    return detail == CONTEXT_OVERFLOW_DETAIL


# Which jsonschema rule failed -> detail reason.
_SCHEMA_REASONS = {
    "required": "missing_required",
    "type": "wrong_type",
    "additionalProperties": "unexpected_property",
    "enum": "not_in_enum",
    "const": "not_const",
}


def _dumps(value: Any) -> str:
    """An error object as text for signature matching; a body too deep to write matches nothing."""
    try:
        return json.dumps(value, default=str)
    except (RecursionError, ValueError):
        return ""


def error_message(body: Any) -> str:
    """The human text of an error body in any envelope the stacks use (see reference/stacks.md)."""
    if isinstance(body, str):
        return body
    if not isinstance(body, Mapping):
        return ""
    error = body.get("error")
    if isinstance(error, str):  # Ollama /api/chat
        return error
    if isinstance(error, Mapping):  # vLLM >= 0.10.1, llama.cpp, Ollama /v1
        message = error.get("message")
        return message if isinstance(message, str) else _dumps(error)
    message = body.get("message")  # flat {"object": "error", ...}: vLLM < 0.10.1, SGLang
    if isinstance(message, str) and body.get("object") == "error":
        return message
    detail = body.get("detail")  # FastAPI validation errors
    if detail is not None:
        return detail if isinstance(detail, str) else _dumps(detail)
    return ""


def _signature_text(body: Any) -> str:
    """What signatures are matched against: the error's message, then its `type` and `code` when they are
    strings (llama.cpp `exceed_context_size_error`, OpenAI `context_length_exceeded`)."""
    text = error_message(body)
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        text = " ".join([text, *(v for v in (error.get("type"), error.get("code")) if isinstance(v, str))])
    return text


def match_refusal(status: int | None, body: Any, refusals: Sequence[RefusalSignature]) -> str | None:
    """The detail of the first signature (refusal or parser failure) this reply matches, or None."""
    text = _signature_text(body)
    if not text.strip():
        return None
    for signature in refusals:
        if signature.status is not None and signature.status != status:
            continue
        if signature.contains in text:
            return signature.detail
    return None


def tools_by_name(tools: Sequence[Any]) -> dict[str, Mapping[str, Any]]:
    """OpenAI tool list -> {name: parameters schema}. Malformed entries are ignored."""
    table: dict[str, Mapping[str, Any]] = {}
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            table[function["name"]] = parameters if isinstance(parameters, Mapping) else {"type": "object"}
    return table


def validate_call(call: ParsedCall, offered: Mapping[str, Mapping[str, Any]]) -> str | None:
    """None when the call names an offered tool and its arguments validate; else a family:reason."""
    schema = offered.get(call.name)
    if schema is None:
        return "call:unknown_tool"
    if not isinstance(call.arguments, dict):
        return "schema:arguments_not_object"
    try:
        error = arguments_error(schema, call.arguments)
    except RecursionError:  # arguments past the validator's depth (recognisers cap at MAX_DEPTH first)
        return "schema:arguments_too_deep"
    except Exception:  # a schema jsonschema cannot apply (e.g. an unresolvable $ref)
        return "schema:unvalidatable"
    if error is None:
        return None
    if isinstance(error, str):  # the schema itself is unusable: configuration, caught up front by the loaders
        return "schema:invalid_tool_schema"
    return f"schema:{_SCHEMA_REASONS.get(str(error.validator), str(error.validator))}"


def _judge_calls(calls: list[ParsedCall], offered: Mapping[str, Mapping[str, Any]]) -> tuple[Outcome, str | None]:
    for call in calls:
        problem = validate_call(call, offered)
        if problem:
            return Outcome.HALLUCINATED_CALL, problem
    return Outcome.VALID_CALL, None


def _server_calls(raw_tool_calls: Any) -> list[ParsedCall] | str:
    """The stack's tool_calls as ParsedCalls, or a failure detail. Absent, null and [] are alike."""
    if not isinstance(raw_tool_calls, list):
        return "parse:tool_calls_not_list"
    calls: list[ParsedCall] = []
    for raw in raw_tool_calls:
        function = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            return "parse:tool_call_without_name"
        try:
            arguments = decode_arguments(function.get("arguments"))
        except ArgumentsNotJSON:
            return "parse:arguments_not_json"
        if too_deep(arguments, MAX_DEPTH):
            return "parse:arguments_too_deep"
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else None
        calls.append(ParsedCall(name=function["name"], arguments=arguments, id=call_id))
    return calls


def _recordable(extra: dict[str, Any]) -> dict[str, Any]:
    """A verdict's copies of model output, made writable as UTF-8 JSON (core/jsonsafe.py)."""
    for key in ("raw_content", "raw_tool_calls"):
        if key in extra:
            extra[key] = json_safe(extra[key])
    for key in ("calls", "text_calls"):
        if key in extra:
            extra[key] = [_safe_call(call) for call in extra[key]]
    error = extra.get("error")
    if isinstance(error, ErrorInfo):
        extra["error"] = ErrorInfo(type=error.type, body=json_safe(error.body))
    return extra


def _safe_call(call: ParsedCall) -> ParsedCall:
    return ParsedCall(**json_safe({"name": call.name, "arguments": call.arguments, "id": call.id}))


Verdict = Callable[..., Classification]
Reader = Callable[[str | None], TextCallParse]


def _parser_failure(verdict: Verdict, read: Reader, detail: str, status: int, body: Any) -> Classification:
    """The stack's own parser rejected what the model generated: the model's turn, final. What the error
    quotes of the model's output is its raw content (llama.cpp b11312 and Ollama's XML parsers quote none),
    read by the same recognisers as an answer's content."""
    quoted = quoted_output(error_message(body))
    return verdict(
        Outcome.UNPARSEABLE_TEXT,
        detail,
        parse_path="server",
        raw_content=quoted,
        **_text_facts(read(quoted)),
        error=ErrorInfo(type=f"http_{status}", body=body),
    )


def _http_failure(
    verdict: Verdict,
    read: Reader,
    status: int,
    body: Any,
    refusals: Sequence[RefusalSignature],
    parser_failures: Sequence[RefusalSignature],
) -> Classification | None:
    """The verdict for a reply that is not a model's message (None: a 2xx that no signature claims).
    A 2xx is always the model's answer: no signature can make it a refusal (its text may quote anything).
    Parser failures first: their messages quote model output, which may contain any other signature's text."""
    if 200 <= status < 300:
        return None
    parser_failure = match_refusal(status, body, parser_failures)
    if parser_failure:
        return _parser_failure(verdict, read, parser_failure, status, body)
    error = ErrorInfo(type=f"http_{status}", body=body)
    if status == 429:
        return verdict(Outcome.NON_RESPONSE, RATE_LIMITED_DETAIL, error=error, retryable=True)
    refusal = match_refusal(status, body, refusals)
    if 400 <= status < 500 or refusal:
        return verdict(Outcome.REJECTED_REQUEST, refusal or f"refused:http_{status}", error=error)
    loading = status == 503 and "loading" in error_message(body).lower()
    detail = "server:loading" if loading else f"server:http_{status}"
    return verdict(Outcome.NON_RESPONSE, detail, error=error, retryable=True)  # no model output arrived


def _answer(verdict: Verdict, read: Reader, rules: Mode, tools: Sequence[Any], body: Any) -> Classification:
    """A 2xx reply: the model's answer, final however empty."""
    if not isinstance(body, Mapping):
        return verdict(Outcome.NON_RESPONSE, "body:not_json", error=ErrorInfo(type="bad_body", body=body))
    message = message_of(body)
    if message is None:
        kind = "body:error_in_200" if "error" in body else "body:no_message"
        return verdict(Outcome.NON_RESPONSE, kind, error=ErrorInfo(type="bad_body", body=dict(body)))

    content = content_text(message.get("content"))
    raw_tool_calls = message.get("tool_calls") or None
    text = read(content)
    base = {"raw_content": content, "raw_tool_calls": raw_tool_calls, **_text_facts(text)}

    # Server-parsed calls count in native modes; in text modes only when the text itself is empty.
    use_server_calls = raw_tool_calls is not None and (rules.parse_path == "server" or not (content or "").strip())
    if use_server_calls:
        parsed = _server_calls(raw_tool_calls)
        if isinstance(parsed, str):
            return verdict(Outcome.UNPARSEABLE_TEXT, parsed, parse_path="server", **base)
        outcome, detail = _judge_calls(parsed, tools_by_name(tools))
        return verdict(outcome, detail, parse_path="server", calls=parsed, **base)

    if not rules.reads_text_calls:
        if text.attempted:  # a call the stack's parser left in the text (recovered calls: `text_calls`)
            detail = "parse:call_in_text" if text.ok else (text.failure or "parse:call_in_text")
            return verdict(Outcome.UNPARSEABLE_TEXT, detail, **base)
    elif text.attempted:
        if not text.ok:
            return verdict(Outcome.UNPARSEABLE_TEXT, text.failure or "parse:no_calls", parse_path="harness", **base)
        outcome, detail = _judge_calls(text.calls, tools_by_name(tools))
        return verdict(outcome, detail, parse_path="harness", calls=text.calls, **base)

    if not (content or "").strip():
        empty = "empty:reasoning_only" if reasoning_text(message) else "empty:no_content"
        if finish_reason_of(body) == "tool_calls" and empty == "empty:no_content":
            empty = TOOL_CALLS_EMPTY_FLAG  # the stack said it stopped for calls and sent none
        return verdict(Outcome.NON_RESPONSE, empty, **base)
    return verdict(Outcome.NO_CALL_PROSE, "prose:no_call", **base)


def classify(
    *,
    refusals: Sequence[RefusalSignature],
    mode: ToolsMode | str,
    tools: Sequence[Any],
    http_status: int | None,
    body: Any,
    transport_error: TransportError | None = None,
    parser_failures: Sequence[RefusalSignature] = (),
    call_format: str = AUTO_FORMAT,
) -> Classification:
    """One exchange -> exactly one outcome with a family:reason detail, `retryable`, `finish_reason`, `flags`,
    and the call format its text was written in (`call_format`, read with the cell's `call_format`)."""
    rules = mode_of(mode)  # configuration, validated upstream; only replies are untrusted here
    read: Reader = partial(read_text_calls, tools=tools, call_format=check_call_format(call_format))
    finish_reason = finish_reason_of(body)
    flags = reply_flags(
        finish_reason=finish_reason, constrained=rules.constrained, tools=tools, status=http_status, body=body
    )

    def verdict(outcome: Outcome, detail: str | None, **extra: Any) -> Classification:
        extra.setdefault("parse_path", rules.parse_path)
        extra = _recordable(extra)
        return Classification(outcome=outcome, detail=detail, finish_reason=finish_reason, flags=flags, **extra)

    if transport_error is not None:
        error = ErrorInfo(type=transport_error.kind, body=transport_error.message)
        return verdict(Outcome.NON_RESPONSE, f"transport:{transport_error.kind}", error=error, retryable=True)
    if http_status is None:
        error = ErrorInfo(type="no_reply", body=body)
        return verdict(Outcome.NON_RESPONSE, "transport:no_reply", error=error, retryable=True)
    failure = _http_failure(verdict, read, http_status, body, refusals, parser_failures)
    return failure if failure is not None else _answer(verdict, read, rules, tools, body)
