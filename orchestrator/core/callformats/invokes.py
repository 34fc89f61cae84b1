"""Families that write each call as an ``<invoke name=…>`` element holding one element per parameter. Each is
an `InvokeSpec` (data); one reader walks every spec. Values are typed by the offered tool's schema (values.py).

- `minimax` (MiniMax-M2): ``<minimax:tool_call><invoke name="NAME"><parameter name="P">V</parameter></invoke>
  </minimax:tool_call>``, also bare ``<invoke name=…>`` blocks; values are stripped of surrounding whitespace,
  as vLLM's minimax_m2 parser does.
- `deepseek_dsml` (DeepSeek V3.2 / V4): ``<｜DSML｜function_calls>`` (or ``tool_calls``) then
  ``<｜DSML｜invoke name="NAME"><｜DSML｜parameter name="P" string="true|false">V</｜DSML｜parameter>…``; a
  ``string="true"`` value is text as written, any other is typed.
- `step3` (Step-3, "steptml"): ``<steptml:invoke name="NAME"><steptml:parameter name="P">V</steptml:parameter>
  </steptml:invoke>`` inside Step's ``<｜tool_call_begin｜>function<｜tool_sep｜>NAME`` wrapper; values keep
  their whitespace (typed values are read without it).

Names may be quoted with ``"`` or ``'`` or bare. An invoke or parameter that never closes, or text other than
parameters inside an invoke, fails the answer (`parse:<family>_<reason>`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.core.callformats.base import NOT_ATTEMPTED, Context, TextCallParse, bounded, failed, found, is_name
from orchestrator.core.callformats.scan import MarkerFinder, skip_ws
from orchestrator.core.callformats.values import trim_newlines, typed_value
from orchestrator.core.types import ParsedCall

# An attribute name starts where no name character precedes it: a long run of name characters without `=`
# is then tried once, not once per character (which made a 100k-character header take half a minute).
_ATTRIBUTE = re.compile(r"""(?<![\w:-])([\w:-]++)\s*+=\s*+(?:"([^"]*+)"|'([^']*+)'|([^\s"'>]++))""")


@dataclass(frozen=True)
class InvokeSpec:
    """An ``<invoke name=…><parameter name=…>…</parameter></invoke>`` format, as data."""

    family: str
    section: tuple[str, ...]  # wrapper markers: an attempt even when no invoke follows
    invoke: str  # the opening tag's start, without attributes
    invoke_end: str
    parameter: str
    parameter_end: str
    trim: Callable[[str], str] = str.strip


MINIMAX = InvokeSpec("minimax", ("<minimax:tool_call>",), "<invoke", "</invoke>", "<parameter", "</parameter>")
DSML = InvokeSpec(
    "deepseek_dsml",
    ("<｜DSML｜function_calls>", "<｜DSML｜tool_calls>"),
    "<｜DSML｜invoke",
    "</｜DSML｜invoke>",
    "<｜DSML｜parameter",
    "</｜DSML｜parameter>",
    trim=trim_newlines,
)
STEP3 = InvokeSpec(
    "step3", (), "<steptml:invoke", "</steptml:invoke>", "<steptml:parameter", "</steptml:parameter>", trim=str
)


class _Bad(Exception):
    """An invoke that cannot be read; its message is the failure reason."""


def _attributes(header: str) -> dict[str, str]:
    return {m.group(1): next(g for g in m.groups()[1:] if g is not None) for m in _ATTRIBUTE.finditer(header)}


def _opening(text: str, position: int, tag: str) -> tuple[dict[str, str], int] | None:
    """The attributes of the tag opening at `position` and where its content starts; None if it is not one."""
    after = position + len(tag)
    if not text.startswith(tag, position) or after >= len(text) or text[after] not in " \t\r\n":
        return None
    close = text.find(">", after)
    if close == -1:
        raise _Bad("unclosed_tag")
    return _attributes(text[after:close]), close + 1


def _value(raw: str, attributes: dict[str, str], schema: Any, spec: InvokeSpec) -> Any:
    if attributes.get("string") == "true":
        return trim_newlines(raw)
    return typed_value(spec.trim(raw), schema)


def _parameters(body: str, name: str, spec: InvokeSpec, context: Context) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    position = skip_ws(body, 0)
    while position < len(body):
        opened = _opening(body, position, spec.parameter)
        if opened is None:
            raise _Bad("unexpected_text")
        attributes, value_start = opened
        value_end = body.find(spec.parameter_end, value_start)
        parameter = attributes.get("name", "")
        if value_end == -1:
            raise _Bad("unclosed_parameter")
        raw = body[value_start:value_end]
        arguments[parameter] = _value(raw, attributes, context.param_schema(name, parameter), spec)
        position = skip_ws(body, value_end + len(spec.parameter_end))
    return arguments


def _invoke(
    text: str, opened_at: int, spec: InvokeSpec, ends: MarkerFinder, context: Context
) -> tuple[ParsedCall, int]:
    opened = _opening(text, opened_at, spec.invoke)
    if opened is None:
        raise _Bad("unexpected_text")
    attributes, body_start = opened
    closed = ends.find(body_start)
    if closed is None or closed[1] != spec.invoke_end:
        raise _Bad("unclosed_invoke")
    name = attributes.get("name", "").strip()
    if not is_name(name):
        raise _Bad("no_name")
    arguments = _parameters(text[body_start : closed[0]], name, spec, context)
    return ParsedCall(name=name, arguments=arguments), closed[0] + len(spec.invoke_end)


def read_invokes(text: str, spec: InvokeSpec, context: Context) -> TextCallParse:
    """Every invoke of `spec` in `text`, or the first failure; not attempted when no marker occurs."""
    ends = MarkerFinder(text, (spec.invoke_end, spec.invoke))
    calls: list[ParsedCall] = []
    attempted = any(marker in text for marker in spec.section)
    position = 0
    while (opened_at := text.find(spec.invoke, position)) != -1:
        if _opening_char(text, opened_at + len(spec.invoke)):
            position = opened_at + len(spec.invoke)  # e.g. <invoker>: not this tag
            continue
        attempted = True
        try:
            call, position = _invoke(text, opened_at, spec, ends, context)
        except _Bad as exc:
            return failed(spec.family, str(exc))
        bounded(calls).append(call)
    return found(spec.family, calls) if attempted else NOT_ATTEMPTED


def _opening_char(text: str, position: int) -> bool:
    """True when the character after a tag name shows it is another tag (not whitespace before attributes)."""
    return position < len(text) and text[position] not in " \t\r\n"


def recogniser(spec: InvokeSpec) -> Callable[[str, Context], TextCallParse]:
    def parse(text: str, context: Context) -> TextCallParse:
        return read_invokes(text, spec, context)

    parse.__doc__ = f"Calls in the {spec.family} format."
    return parse
