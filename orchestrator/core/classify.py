"""Say what happened on one turn. Pure: (stack refusals, mode, offered tools, status, body, error) -> outcome.

Order of questions, after the triage order of the paper: did the server answer at all? did it refuse
(any 4xx, or a stack's known refusal signature under another status)? did it return a usable message?
only then: which calls does the active parse path see, and do they validate against the offered schemas?
Never raises: every input maps to exactly one outcome.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from orchestrator.core.modes import mode_of
from orchestrator.core.textcalls import ArgumentsNotJSON, decode_arguments, extract_text_calls
from orchestrator.core.types import (
    Classification,
    ErrorInfo,
    Outcome,
    ParsedCall,
    RefusalSignature,
    ToolsMode,
    TransportError,
)

# Which jsonschema rule failed -> detail reason.
_SCHEMA_REASONS = {
    "required": "missing_required",
    "type": "wrong_type",
    "additionalProperties": "unexpected_property",
    "enum": "not_in_enum",
    "const": "not_const",
}


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
        return message if isinstance(message, str) else json.dumps(error, default=str)
    message = body.get("message")  # flat {"object": "error", ...}: vLLM < 0.10.1, SGLang
    if isinstance(message, str) and body.get("object") == "error":
        return message
    detail = body.get("detail")  # FastAPI validation errors
    if detail is not None:
        return detail if isinstance(detail, str) else json.dumps(detail, default=str)
    return ""


def match_refusal(status: int | None, body: Any, refusals: Sequence[RefusalSignature]) -> str | None:
    """The detail of the first refusal signature this reply matches, or None."""
    text = error_message(body)
    if not text:
        return None
    for signature in refusals:
        if signature.status is not None and signature.status != status:
            continue
        if signature.contains in text:
            return signature.detail
    return None


def tools_by_name(tools: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """OpenAI tool list -> {name: parameters schema}. Malformed entries are ignored."""
    table: dict[str, dict[str, Any]] = {}
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
        validator = Draft202012Validator(dict(schema))
        error = next(iter(sorted(validator.iter_errors(call.arguments), key=lambda e: e.path)), None)
    except SchemaError:
        return "schema:invalid_tool_schema"
    except Exception:  # a pathological schema (e.g. a regex the engine cannot compile)
        return "schema:unvalidatable"
    if error is None:
        return None
    return f"schema:{_SCHEMA_REASONS.get(str(error.validator), str(error.validator))}"


def _judge_calls(calls: list[ParsedCall], offered: Mapping[str, Mapping[str, Any]]) -> tuple[Outcome, str | None]:
    for call in calls:
        problem = validate_call(call, offered)
        if problem:
            return Outcome.HALLUCINATED_CALL, problem
    return Outcome.VALID_CALL, None


def _content_text(content: Any) -> str | None:
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(parts)
    return json.dumps(content, default=str)


def _message_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        return message if isinstance(message, Mapping) else None
    message = body.get("message")  # Ollama /api/chat
    return message if isinstance(message, Mapping) else None


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
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else None
        calls.append(ParsedCall(name=function["name"], arguments=arguments, id=call_id))
    return calls


def classify(
    *,
    refusals: Sequence[RefusalSignature],
    mode: ToolsMode | str,
    tools: Sequence[Any],
    http_status: int | None,
    body: Any,
    transport_error: TransportError | None = None,
) -> Classification:
    """One exchange -> exactly one outcome with a family:reason detail."""
    rules = mode_of(mode)  # configuration, validated upstream; only replies are untrusted here
    server_path = rules.parse_path == "server"
    path = rules.parse_path

    def verdict(outcome: Outcome, detail: str | None, **extra: Any) -> Classification:
        return Classification(outcome=outcome, detail=detail, parse_path=extra.pop("parse_path", path), **extra)

    if transport_error is not None:
        error = ErrorInfo(type=transport_error.kind, body=transport_error.message)
        return verdict(Outcome.NON_RESPONSE, f"transport:{transport_error.kind}", error=error)
    if http_status is None:
        return verdict(Outcome.NON_RESPONSE, "transport:no_reply", error=ErrorInfo(type="no_reply", body=body))

    refusal = match_refusal(http_status, body, refusals)
    if 400 <= http_status < 500 or refusal:
        error = ErrorInfo(type=f"http_{http_status}", body=body)
        return verdict(Outcome.REJECTED_REQUEST, refusal or f"refused:http_{http_status}", error=error)
    if not 200 <= http_status < 300:
        error = ErrorInfo(type=f"http_{http_status}", body=body)
        loading = http_status == 503 and "loading" in error_message(body).lower()
        return verdict(Outcome.NON_RESPONSE, "server:loading" if loading else f"server:http_{http_status}", error=error)

    if not isinstance(body, Mapping):
        return verdict(Outcome.NON_RESPONSE, "body:not_json", error=ErrorInfo(type="bad_body", body=body))
    message = _message_of(body)
    if message is None:
        kind = "body:error_in_200" if "error" in body else "body:no_message"
        return verdict(Outcome.NON_RESPONSE, kind, error=ErrorInfo(type="bad_body", body=dict(body)))

    content = _content_text(message.get("content"))
    raw_tool_calls = message.get("tool_calls") or None
    base = {"raw_content": content, "raw_tool_calls": raw_tool_calls}
    text = extract_text_calls(content)

    # Server-parsed calls count in native modes; in text modes only when the text itself is empty.
    use_server_calls = raw_tool_calls is not None and (server_path or not (content or "").strip())
    if use_server_calls:
        parsed = _server_calls(raw_tool_calls)
        if isinstance(parsed, str):
            return verdict(Outcome.UNPARSEABLE_TEXT, parsed, parse_path="server", **base)
        outcome, detail = _judge_calls(parsed, tools_by_name(tools))
        return verdict(outcome, detail, parse_path="server", calls=parsed, **base)

    if not rules.reads_text_calls:
        if text.attempted:
            return verdict(Outcome.UNPARSEABLE_TEXT, "parse:call_in_text", text_call_recoverable=text.ok, **base)
    elif text.attempted:
        if text.failure:
            return verdict(Outcome.UNPARSEABLE_TEXT, text.failure, parse_path="harness", **base)
        outcome, detail = _judge_calls(text.calls, tools_by_name(tools))
        return verdict(outcome, detail, parse_path="harness", calls=text.calls, **base)

    if not (content or "").strip():
        return verdict(Outcome.NON_RESPONSE, "empty:no_content", **base)
    return verdict(Outcome.NO_CALL_PROSE, "prose:no_call", **base)
