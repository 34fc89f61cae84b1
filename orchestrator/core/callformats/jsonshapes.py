"""The `json` family: calls written as JSON objects.

Accepted shapes (bare, inside a fenced code block, or inside ``<tool_call>...</tool_call>`` tags, one or
several, alone or in a list, optionally after Llama 3's ``<|python_tag|>``):
``{"name", "arguments"|"parameters"|"args"}``, ``{"function": {"name", "arguments"}}``,
``{"function": "NAME", "arguments"}``, ``{"tool", "args"|"arguments"}``, ``{"tool_call": {...}}``,
``{"tool_calls": [...]}``, and a list of one-key objects ``[{"NAME": {...arguments}}]`` when every key names an
offered tool or, with no tools known, when it is the whole answer (or the body of a tag, or of a fence that is
the whole answer): such a list is also how JSON data is written. ``arguments`` may be an object or a JSON
string.

A call *attempt* needs structure, not vocabulary: prose that merely says "function" or "tool_call" is not
an attempt. Malformed or truncated JSON that opens with a call key, or any ``<tool_call>`` block, is an
attempt that failed to parse.

Bounds: the scan for JSON embedded in prose decodes each candidate with the C decoder and charges the
characters it examined to a budget of 8 x the text's length (+64k), and stops after 4096 candidates that
fail to decode; past either bound it judges the text on what it found so far. Deep nesting
(RecursionError) counts as a failed candidate.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    ArgumentsNotJSON,
    BadJSON,
    Context,
    TextCallParse,
    bounded,
    decode_arguments,
    decode_at,
    loads,
)
from orchestrator.core.callformats.scan import fences, mask_fences
from orchestrator.core.types import ParsedCall

FAMILY = "json"
_TAG_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
# A JSON object that opens with a key only a call would use: structure, not a word in prose.
_CALL_KEY = re.compile(r'[\{\[]\s*+\{?+\s*+"(?:name|function|tool|tool_call|tool_calls)"\s*+:')
_JSON_START = re.compile(r'\{\s*+"|\[\s*+\{')
# Fence languages whose body may hold a JSON call; code in other languages is not a call attempt.
_CALL_FENCE_LANGS = frozenset({"", "json", "jsonc", "json5", "tool_call", "tool_code", "javascript", "js"})

_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
_CALL_SHAPE_KEYS = frozenset({"name", "id", "type", "index", *_ARGUMENT_KEYS})
_TOOL_SHAPE_KEYS = frozenset({"tool", "id", "type", *_ARGUMENT_KEYS})
_MAX_FAILED_CANDIDATES = 4096


class NotACall(Exception):
    """The JSON value is not call-shaped."""


def _arguments_of(obj: dict[str, Any]) -> Any:
    for key in _ARGUMENT_KEYS:
        if key in obj:
            return decode_arguments(obj[key])
    return {}


def calls_from_value(value: Any) -> list[ParsedCall]:
    """Normalise one decoded JSON value into calls, or raise NotACall / ArgumentsNotJSON."""
    if isinstance(value, list):
        if not value:
            raise NotACall
        calls: list[ParsedCall] = []
        for item in value:
            calls.extend(calls_from_value(item))
        return calls
    if not isinstance(value, dict):
        raise NotACall
    if isinstance(value.get("tool_calls"), list):
        return calls_from_value(value["tool_calls"]) if value["tool_calls"] else []
    if isinstance(value.get("tool_call"), dict | list):
        return calls_from_value(value["tool_call"])
    function = value.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        call_id = value.get("id") if isinstance(value.get("id"), str) else None
        return [ParsedCall(name=function["name"], arguments=_arguments_of(function), id=call_id)]
    if isinstance(function, str) and set(value) <= {"function", "id", "type", *_ARGUMENT_KEYS}:
        return [ParsedCall(name=function, arguments=_arguments_of(value))]
    if isinstance(value.get("name"), str) and set(value) <= _CALL_SHAPE_KEYS:
        call_id = value.get("id") if isinstance(value.get("id"), str) else None
        return [ParsedCall(name=value["name"], arguments=_arguments_of(value), id=call_id)]
    if isinstance(value.get("tool"), str) and set(value) <= _TOOL_SHAPE_KEYS:
        return [ParsedCall(name=value["tool"], arguments=_arguments_of(value))]
    raise NotACall


def _keyed_calls(value: Any, context: Context, *, whole: bool) -> list[ParsedCall]:
    """``[{"NAME": {...}}, ...]``: calls when the list names only offered tools, or (no tools known) when it
    is the whole answer (`whole`); otherwise it is data, e.g. ``[{"api-1": {"status": "running"}}]``."""
    if not isinstance(value, list) or not value:
        raise NotACall
    calls: list[ParsedCall] = []
    for item in value:
        if not (isinstance(item, dict) and len(item) == 1):
            raise NotACall
        ((name, arguments),) = item.items()
        if not isinstance(arguments, dict) or not (context.offers(name) if context.properties else whole):
            raise NotACall
        calls.append(ParsedCall(name=name, arguments=arguments))
    return calls


def _any_calls(value: Any, context: Context, *, whole: bool) -> list[ParsedCall]:
    try:
        return calls_from_value(value)
    except NotACall:
        return _keyed_calls(value, context, whole=whole)


def _parse_segment(segment: str, context: Context, *, tagged: bool, whole: bool = True) -> TextCallParse:
    """Parse one candidate region (a tag body, a fence body, or the whole text; `whole`: nothing else is
    written around it)."""
    text = segment.strip()
    if not tagged and not _JSON_START.search(text):
        return NOT_ATTEMPTED  # every call shape holds an object with a key: `{"` (or `[{`)
    try:
        value = loads(text)
    except BadJSON:
        return _scan_embedded(text, context, tagged=tagged)
    try:
        calls = _any_calls(value, context, whole=whole)
    except ArgumentsNotJSON:
        return TextCallParse(attempted=True, failure="parse:arguments_not_json")
    except NotACall:
        if tagged:
            return TextCallParse(attempted=True, failure="parse:not_call_shaped")
        return NOT_ATTEMPTED
    return TextCallParse(calls=calls, attempted=True, failure=None if calls else "parse:empty_call_list")


def _scan_embedded(text: str, context: Context, *, tagged: bool) -> TextCallParse:
    """Find JSON calls embedded in surrounding text; a call-looking fragment that never decodes fails."""
    calls: list[ParsedCall] = []
    broken_attempt = False
    position, budget, failures = 0, 8 * len(text) + 65536, 0
    while (match := _JSON_START.search(text, position)) and budget > 0 and failures < _MAX_FAILED_CANDIDATES:
        start = match.start()
        try:
            value, end = decode_at(text, start)
        except BadJSON as exc:
            failures += 1
            budget -= _examined(exc, start, len(text))
            broken_attempt = broken_attempt or bool(_CALL_KEY.match(text, start))
            position = start + 1
            continue
        budget -= end - start
        try:
            bounded(calls).extend(_any_calls(value, context, whole=False))
        except ArgumentsNotJSON:
            return TextCallParse(attempted=True, failure="parse:arguments_not_json")
        except NotACall:
            pass
        position = end  # skip the decoded value: its inner objects are not separate calls
    if broken_attempt or (tagged and not calls):
        return TextCallParse(attempted=True, failure="parse:tag_body" if tagged else "parse:malformed_json")
    if calls:
        return TextCallParse(calls=calls, attempted=True)
    return NOT_ATTEMPTED


def _examined(exc: BadJSON, start: int, length: int) -> int:
    """How far the decoder read before failing (the whole rest when it does not say, e.g. RecursionError)."""
    return max(1, exc.position - start) if exc.position is not None else length - start


def _merge(parts: list[TextCallParse]) -> TextCallParse:
    attempted = [p for p in parts if p.attempted]
    if not attempted:
        return NOT_ATTEMPTED
    failure = next((p.failure for p in attempted if p.failure), None)
    calls = [call for p in attempted for call in p.calls]
    return TextCallParse(calls=calls, attempted=True, failure=failure)


def _tag_parts(text: str, context: Context) -> list[TextCallParse]:
    """Each ``<tool_call>`` body (itself possibly fenced), stopping at the first that fails."""
    parts: list[TextCallParse] = []
    for match in _TAG_BLOCK.finditer(text):
        parts.append(_parse_segment(_unfence(match.group(1)), context, tagged=True))
        if parts[-1].failure:
            break
    return parts


def is_one_value(content: str) -> bool:
    """Whether the whole text is one JSON object or list: then every marker in it sits inside a string (a call
    whose arguments quote ``<tool_call>``, ``[TOOL_CALLS]`` or ``<invoke …>`` is still this family's)."""
    text = content.strip()
    if not text.startswith(("{", "[")):
        return False
    try:
        loads(text)
    except BadJSON:
        return False
    return True


def parse(content: str, context: Context) -> TextCallParse:
    """Every JSON call written in `content`, whether a call attempt failed, or nothing (prose)."""
    if not content.strip():
        return NOT_ATTEMPTED
    if is_one_value(content):
        return _parse_segment(content, context, tagged=False)
    if "<tool_call>" in content:
        return _merge(_tag_parts(content, context))
    parts: list[TextCallParse] = []
    found = list(fences(content))
    lone = len(found) == 1 and not (content[: found[0].start] + content[found[0].end :]).strip()
    for fence in found:
        if fence.lang in _CALL_FENCE_LANGS:
            parts.append(_parse_segment(fence.body, context, tagged=False, whole=lone))
            if parts[-1].failure:
                break
    merged = _merge(parts)
    if merged.attempted:
        return merged
    return _parse_segment(mask_fences(content, frozenset(), found=found), context, tagged=False)


def _unfence(body: str) -> str:
    fence = next(fences(body), None)
    return fence.body if fence else body
