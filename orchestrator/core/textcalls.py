"""Find tool calls written as text in a model's content. Pure.

Accepted shapes (bare, inside a fenced code block, or inside ``<tool_call>...</tool_call>`` tags,
one or several, alone or in a list):
``{"name", "arguments"|"parameters"|"args"}``, ``{"function": {"name", "arguments"}}``,
``{"function": "NAME", "arguments"}``, ``{"tool", "args"|"arguments"}``, ``{"tool_call": {...}}``,
``{"tool_calls": [...]}``. ``arguments`` may be an object or a JSON string.

A call *attempt* needs structure, not vocabulary: prose that merely says "function" or "tool_call"
is not an attempt (the paper's regex counted it as one). Malformed or truncated JSON that opens
with a call key, or any ``<tool_call>`` block, is an attempt that failed to parse.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.types import ParsedCall

_TAG_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
# A JSON object that opens with a key only a call would use: structure, not a word in prose.
_CALL_KEY = re.compile(r'[\{\[]\s*\{?\s*"(?:name|function|tool|tool_call|tool_calls)"\s*:')
_JSON_START = re.compile(r'\{\s*"|\[\s*\{')
# Fence languages whose body may hold a JSON call; code in other languages is not a call attempt.
_CALL_FENCE_LANGS = frozenset({"", "json", "jsonc", "json5", "tool_call", "tool_code", "javascript", "js"})

_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
_CALL_SHAPE_KEYS = frozenset({"name", "id", "type", "index", *_ARGUMENT_KEYS})
_TOOL_SHAPE_KEYS = frozenset({"tool", "id", "type", *_ARGUMENT_KEYS})


@dataclass(frozen=True)
class TextCallParse:
    """What the harness found in a text: calls, and whether a call attempt failed to parse."""

    calls: list[ParsedCall] = field(default_factory=list)
    attempted: bool = False
    failure: str | None = None  # "parse:<reason>" when an attempt could not be turned into calls

    @property
    def ok(self) -> bool:
        return self.attempted and self.failure is None and bool(self.calls)


class _NotACall(Exception):
    """The JSON value is not call-shaped."""


class ArgumentsNotJSON(Exception):
    """Call-shaped, but its arguments string is not valid JSON."""


def decode_arguments(raw: Any) -> Any:
    """Arguments as sent: an object, a JSON string holding one, or absent (= no arguments)."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        if raw.strip() == "":
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ArgumentsNotJSON(str(exc)) from exc
    return raw


def _arguments_of(obj: dict[str, Any]) -> Any:
    for key in _ARGUMENT_KEYS:
        if key in obj:
            return decode_arguments(obj[key])
    return {}


def _calls_from_value(value: Any) -> list[ParsedCall]:
    """Normalise one decoded JSON value into calls, or raise _NotACall / ArgumentsNotJSON."""
    if isinstance(value, list):
        if not value:
            raise _NotACall
        calls: list[ParsedCall] = []
        for item in value:
            calls.extend(_calls_from_value(item))
        return calls
    if not isinstance(value, dict):
        raise _NotACall
    if isinstance(value.get("tool_calls"), list):
        return _calls_from_value(value["tool_calls"]) if value["tool_calls"] else []
    if isinstance(value.get("tool_call"), dict | list):
        return _calls_from_value(value["tool_call"])
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
    raise _NotACall


def _parse_segment(segment: str, *, tagged: bool) -> TextCallParse:
    """Parse one candidate region (a tag body, a fence body, or the whole text)."""
    text = segment.strip()
    try:
        value = json.loads(text)
    except ValueError:
        return _scan_embedded(text, tagged=tagged)
    try:
        calls = _calls_from_value(value)
    except ArgumentsNotJSON:
        return TextCallParse(attempted=True, failure="parse:arguments_not_json")
    except _NotACall:
        if tagged:
            return TextCallParse(attempted=True, failure="parse:not_call_shaped")
        return TextCallParse()
    return TextCallParse(calls=calls, attempted=True, failure=None if calls else "parse:empty_call_list")


def _scan_embedded(text: str, *, tagged: bool) -> TextCallParse:
    """Find JSON calls embedded in surrounding text; a call-looking fragment that never decodes fails."""
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    broken_attempt = False
    position = 0
    while match := _JSON_START.search(text, position):
        try:
            value, end = decoder.raw_decode(text, match.start())
        except ValueError:
            broken_attempt = broken_attempt or bool(_CALL_KEY.match(text, match.start()))
            position = match.start() + 1
            continue
        try:
            calls.extend(_calls_from_value(value))
        except ArgumentsNotJSON:
            return TextCallParse(attempted=True, failure="parse:arguments_not_json")
        except _NotACall:
            pass
        position = end  # skip the decoded value: its inner objects are not separate calls
    if broken_attempt or (tagged and not calls):
        return TextCallParse(attempted=True, failure="parse:tag_body" if tagged else "parse:malformed_json")
    if calls:
        return TextCallParse(calls=calls, attempted=True)
    return TextCallParse()


def _merge(parts: list[TextCallParse]) -> TextCallParse:
    attempted = [p for p in parts if p.attempted]
    if not attempted:
        return TextCallParse()
    failure = next((p.failure for p in attempted if p.failure), None)
    calls = [call for p in attempted for call in p.calls]
    return TextCallParse(calls=calls, attempted=True, failure=failure)


def extract_text_calls(content: str | None) -> TextCallParse:
    """Every call written in `content`, whether a call attempt failed, or nothing (prose)."""
    if not content or not content.strip():
        return TextCallParse()
    tag_bodies = _TAG_BLOCK.findall(content)
    if tag_bodies:
        # Inside tags the body may itself be fenced.
        return _merge([_parse_segment(_unfence(body), tagged=True) for body in tag_bodies])
    fences = [(lang.lower(), body) for lang, body in _FENCE_BLOCK.findall(content)]
    fence_parts = [_parse_segment(body, tagged=False) for lang, body in fences if lang in _CALL_FENCE_LANGS]
    merged = _merge(fence_parts)
    if merged.attempted:
        return merged
    outside = _FENCE_BLOCK.sub(" ", content) if fences else content
    return _parse_segment(outside, tagged=False)


def _unfence(body: str) -> str:
    match = _FENCE_BLOCK.search(body)
    return match.group(2) if match else body
