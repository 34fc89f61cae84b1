"""The `command_r` family (Cohere): a JSON list of ``{"tool_call_id", "tool_name", "parameters"}`` either
between ``<|START_ACTION|>`` and ``<|END_ACTION|>`` (Command R7B, Command A, llama.cpp's COMMAND_R7B) or in a
fenced block after a line ``Action:`` (Command R / R+: ``Action: ```json [...] ````).

The marker makes an attempt; a body that is not JSON, not a list of such objects, or an action block that
never closes fails the answer (`parse:command_r_<reason>`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    BadJSON,
    Context,
    TextCallParse,
    bounded,
    failed,
    found,
    loads,
)
from orchestrator.core.callformats.scan import fences
from orchestrator.core.types import ParsedCall

FAMILY = "command_r"
START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"
_ACTION_LINE = re.compile(r"(?m)^[ \t]*+Action:\s*+(?=```)")


class _Bad(Exception):
    """An action body that cannot be read; its message is the failure reason."""


def _calls(body: str) -> list[ParsedCall]:
    try:
        value: Any = loads(body)
    except BadJSON:
        raise _Bad("not_json") from None
    items = value if isinstance(value, list) else [value]
    calls: list[ParsedCall] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("tool_name"), str):
            raise _Bad("not_call_shaped")
        arguments = item.get("parameters", {})
        call_id = item.get("tool_call_id")
        calls.append(ParsedCall(name=item["tool_name"], arguments=arguments, id=str(call_id) if call_id else None))
        bounded(calls)
    return calls


def _action_bodies(text: str) -> Iterator[str]:
    """Bodies of ``<|START_ACTION|>`` blocks, then of ``Action:`` fences; raises _Bad on an unclosed block."""
    position = 0
    while (start := text.find(START_ACTION, position)) != -1:
        end = text.find(END_ACTION, start)
        if end == -1:
            raise _Bad("unclosed")
        yield text[start + len(START_ACTION) : end]
        position = end + len(END_ACTION)
    for match in _ACTION_LINE.finditer(text):
        fence = next(fences(text, match.end()), None)
        if fence is not None and fence.start == match.end():
            yield fence.body


def parse(text: str, context: Context) -> TextCallParse:
    """Calls in Cohere's action blocks, or the first failure; not attempted without an action marker."""
    calls: list[ParsedCall] = []
    attempted = False
    try:
        for body in _action_bodies(text):
            attempted = True
            bounded(calls).extend(_calls(body))
    except _Bad as exc:
        return failed(FAMILY, str(exc))
    return found(FAMILY, calls) if attempted else NOT_ATTEMPTED
