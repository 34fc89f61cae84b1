"""Families that write a JSON list of ``{"name", "arguments"}`` calls after a marker:

- `granite` (IBM Granite 3.x): ``<|tool_call|>[{...}, ...]``, or Granite 3.0's text prefix
  ``<tool_call> [{...}]`` opening the answer with no closing ``</tool_call>`` (vLLM's granite parser);
- `functools` (Phi-4-mini, FireFunction v2): ``functools[{...}, ...]``, anywhere in the answer.

The marker makes an attempt; what follows it must be one JSON list (or object) of calls, else the answer
fails (`parse:<family>_not_json`, `_not_call_shaped`, `_arguments_not_json`). Text after the list is prose.
"""

from __future__ import annotations

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    ArgumentsNotJSON,
    BadJSON,
    Context,
    TextCallParse,
    decode_at,
    failed,
    found,
)
from orchestrator.core.callformats.jsonshapes import NotACall, calls_from_value
from orchestrator.core.callformats.scan import skip_ws
from orchestrator.core.types import ParsedCall

GRANITE_TOKEN = "<|tool_call|>"
GRANITE_TEXT = "<tool_call>"
FUNCTOOLS = "functools["


class _Bad(Exception):
    """A list that cannot be read; its message is the failure reason."""


def _calls_at(text: str, position: int) -> list[ParsedCall]:
    try:
        value, _ = decode_at(text, position)
    except BadJSON:
        raise _Bad("not_json") from None
    try:
        return calls_from_value(value)
    except ArgumentsNotJSON:
        raise _Bad("arguments_not_json") from None
    except NotACall:
        raise _Bad("not_call_shaped") from None


def _read(text: str, family: str, starts: list[int]) -> TextCallParse:
    if not starts:
        return NOT_ATTEMPTED
    try:
        return found(family, [call for start in starts for call in _calls_at(text, start)])
    except _Bad as exc:
        return failed(family, str(exc))


def _positions(text: str, marker: str, offset: int) -> list[int]:
    """Where the JSON after each occurrence of `marker` starts (`offset` from the marker's start)."""
    positions: list[int] = []
    position = 0
    while (at := text.find(marker, position)) != -1:
        positions.append(at + offset)
        position = at + len(marker)
    return positions


def parse_granite(text: str, context: Context) -> TextCallParse:
    """Granite's ``<|tool_call|>`` lists, or a ``<tool_call> [`` list opening an answer that never closes it."""
    starts = _positions(text, GRANITE_TOKEN, len(GRANITE_TOKEN))
    if not starts:
        opening = skip_ws(text, 0)
        after = skip_ws(text, opening + len(GRANITE_TEXT))
        unclosed_text_prefix = "</tool_call>" not in text and text.startswith(GRANITE_TEXT, opening)
        if unclosed_text_prefix and text.startswith("[", after):
            starts = [after]
    return _read(text, "granite", starts)


def parse_functools(text: str, context: Context) -> TextCallParse:
    """Every ``functools[...]`` list."""
    return _read(text, "functools", _positions(text, FUNCTOOLS, len(FUNCTOOLS) - 1))
