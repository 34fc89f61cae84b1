"""The `mistral` family: calls after the ``[TOOL_CALLS]`` token.

Three generations, as vLLM's and llama.cpp's Mistral parsers read them:

- before tokenizer v11: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (one JSON list);
- v11: ``[TOOL_CALLS]NAME{...}`` repeated, one token per call;
- v13 (Magistral, Devstral, Ministral 3): ``[TOOL_CALLS]NAME[ARGS]{...}``, optionally with
  ``[CALL_ID]id`` before ``[ARGS]``.

Every ``[TOOL_CALLS]`` is an attempt. A segment that has no name, no arguments, or arguments that are not
JSON fails the answer (`parse:mistral_<reason>`). Text after a call's JSON (before the next token) is prose.
"""

from __future__ import annotations

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    ArgumentsNotJSON,
    BadJSON,
    Context,
    TextCallParse,
    bounded,
    decode_at,
    failed,
    found,
    is_name,
)
from orchestrator.core.callformats.jsonshapes import NotACall, calls_from_value
from orchestrator.core.callformats.scan import skip_ws
from orchestrator.core.types import ParsedCall

FAMILY = "mistral"
TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"


class _Bad(Exception):
    """A segment that cannot be read; its message is the failure reason."""


def _json_segment(segment: str) -> list[ParsedCall]:
    """Pre-v11: one JSON list (or object) of ``{"name", "arguments"}``."""
    try:
        value, _ = decode_at(segment, 0)
    except BadJSON:
        raise _Bad("not_json") from None
    try:
        return calls_from_value(value)
    except ArgumentsNotJSON:
        raise _Bad("arguments_not_json") from None
    except NotACall:
        raise _Bad("not_call_shaped") from None


def _named_segment(segment: str) -> ParsedCall:
    """v11 / v13: NAME, optional [CALL_ID]id, optional [ARGS], then a JSON object."""
    args_at = segment.find(ARGS)
    brace = segment.find("{")
    if args_at != -1 and (brace == -1 or args_at < brace):
        head, arguments_start = segment[:args_at], args_at + len(ARGS)
    elif brace != -1:
        head, arguments_start = segment[:brace], brace
    else:
        raise _Bad("no_arguments")
    name, _, call_id = head.partition(CALL_ID)
    name = name.strip()
    if not is_name(name):
        raise _Bad("no_name")
    try:
        arguments, _ = decode_at(segment, arguments_start)
    except BadJSON:
        raise _Bad("arguments_not_json") from None
    return ParsedCall(name=name, arguments=arguments, id=call_id.strip() or None)


def _named_or_listed(segment: str) -> list[ParsedCall]:
    """A named call; failing that, a JSON list of calls found inside the segment (vLLM's pre-v11 fallback
    for ``[TOOL_CALLS] junk [{...}] trail``)."""
    try:
        return [_named_segment(segment)]
    except _Bad:
        listed = segment.find("[{")
        if listed == -1:
            raise
        return _json_segment(segment[listed:])


def parse(text: str, context: Context) -> TextCallParse:
    """Every call after a ``[TOOL_CALLS]`` token, or the first segment's failure."""
    segments = text.split(TOOL_CALLS)[1:]
    if not segments:
        return NOT_ATTEMPTED
    calls: list[ParsedCall] = []
    try:
        for segment in segments:
            start = skip_ws(segment, 0)
            if start < len(segment) and segment[start] in "[{":
                bounded(calls).extend(_json_segment(segment[start:]))
            elif segment.strip():
                bounded(calls).extend(_named_or_listed(segment))
    except _Bad as exc:
        return failed(FAMILY, str(exc))
    return found(FAMILY, calls)
