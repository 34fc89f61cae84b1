"""XML-style families with one tag per parameter: `qwen3_xml`, `seed_oss` and `glm_xml`. Values are typed by
the offered tool's schema (see values.py).

- `qwen3_xml` (Qwen3-Coder, Qwen3.5; vLLM ``qwen3_coder`` / ``qwen3_xml``, llama.cpp, SGLang):
  ``<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``; the
  ``<tool_call>`` wrapper may be missing; the newline around a value is dropped. A ``<function=NAME>`` is
  this family's when a parameter, ``</function>`` or the end of the answer follows it; followed by JSON it
  is functionary's, followed by prose it is a mention.
- `seed_oss` (ByteDance Seed-OSS): the same elements inside ``<seed:tool_call>…</seed:tool_call>``; values are
  kept exactly as written (llama.cpp keeps a value's trailing newline).
- `glm_xml` (GLM-4.5 / 4.6 / 4.7, Ling 3): ``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>
  \\n</tool_call>``. A ``<tool_call>`` block is GLM's when its head is a bare name followed by ``<arg_key>``, or
  (no arguments) a name then a newline, or exactly an offered tool's name; a JSON body is the `json` family's.

Parameters are walked in order, so a value may quote any tag. A ``</parameter>`` ends a value only when the
next thing is another ``<parameter=``, ``</function>``, ``</tool_call>`` or the end (vLLM's rule); a missing
``</parameter>`` is tolerated where the next line opens a parameter of the tool not yet given, or the
function closes (vLLM's recovery). An unclosed function, argument tag or GLM block fails the answer
(`parse:<family>_<reason>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.core.callformats.base import NOT_ATTEMPTED, Context, TextCallParse, bounded, failed, found, is_name
from orchestrator.core.callformats.scan import MarkerFinder, skip_ws
from orchestrator.core.callformats.values import trim_newlines, typed_value
from orchestrator.core.types import ParsedCall

FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
ARG_KEY, ARG_KEY_END, ARG_VALUE, ARG_VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
GLM = "glm_xml"


@dataclass(frozen=True)
class FunctionSpec:
    """A ``<function=NAME><parameter=P>V</parameter></function>`` family, as data."""

    family: str
    requires: str | None  # a wrapper marker that must occur for the family to claim the text
    trim: Callable[[str], str]
    wrapper_end: str = TOOL_CALL_END


QWEN3_XML = FunctionSpec("qwen3_xml", None, trim_newlines)
SEED_OSS = FunctionSpec("seed_oss", "<seed:tool_call>", str, wrapper_end="</seed:tool_call>")


class _Bad(Exception):
    """A block that cannot be read; its message is the failure reason."""


class _Walker:
    """One function's parameters, walked in order; remembers the last structural ``</parameter>`` it found
    so that a run of values missing their closing tag is still read in linear time."""

    def __init__(self, text: str, spec: FunctionSpec, context: Context) -> None:
        self.text, self.spec, self.context = text, spec, context
        self.followers = (PARAMETER, FUNCTION_END, spec.wrapper_end)
        self.close_at = -2  # the first structural </parameter> at or after the last search start
        self.gt_at = -2  # the first ">" at or after the last implicit-end candidate

    def structural_close(self, start: int) -> int:
        if self.close_at == -1 or self.close_at >= start:
            return self.close_at
        position = start
        while (close := self.text.find(PARAMETER_END, position)) != -1:
            after = skip_ws(self.text, close + len(PARAMETER_END))
            if after >= len(self.text) or self.text.startswith(self.followers, after):
                break
            position = close + len(PARAMETER_END)
        self.close_at = close
        return close

    def implicit_end(self, start: int, stop: int, name: str, seen: set[str]) -> int:
        """Where a value missing its ``</parameter>`` ends: the next line opening a parameter not yet given
        (of the tool, when its schema is known), or a closing ``</function>``; -1 when there is none."""
        known = self.context.properties.get(name)
        position = start
        while (at := self.text.find("\n<", position, stop)) != -1:
            if self.text.startswith(FUNCTION_END, at + 1):
                return at
            if self.text.startswith(PARAMETER, at + 1):
                tag_end = self.tag_end(at)
                parameter = self.text[at + 1 + len(PARAMETER) : tag_end].strip() if -1 < tag_end < stop else ""
                if parameter and parameter not in seen and (not known or parameter in known):
                    return at
            position = at + 2
        return -1

    def tag_end(self, at: int) -> int:
        if self.gt_at != -1 and self.gt_at < at:
            self.gt_at = self.text.find(">", at)
        return self.gt_at

    def function(self, name: str, body_start: int) -> tuple[ParsedCall, int]:
        text, arguments, seen = self.text, {}, set()
        position = skip_ws(text, body_start)
        while not text.startswith(FUNCTION_END, position):
            if position >= len(text):
                raise _Bad("unclosed_function")
            if not text.startswith(PARAMETER, position):
                raise _Bad("unexpected_text")
            name_end = text.find(">", position + len(PARAMETER))
            if name_end == -1:
                raise _Bad("unclosed_parameter")
            parameter = text[position + len(PARAMETER) : name_end].strip()
            seen.add(parameter)
            close = self.structural_close(name_end + 1)
            implicit = self.implicit_end(name_end + 1, close if close != -1 else len(text), name, seen)
            if implicit != -1:
                value_end, position = implicit, implicit + 1
            elif close != -1:
                value_end, position = close, close + len(PARAMETER_END)
            else:
                raise _Bad("unclosed_parameter")
            value = self.spec.trim(text[name_end + 1 : value_end])
            arguments[parameter] = typed_value(value, self.context.param_schema(name, parameter))
            position = skip_ws(text, position)
        return ParsedCall(name=name, arguments=arguments), position + len(FUNCTION_END)


def read_functions(text: str, spec: FunctionSpec, context: Context) -> TextCallParse:
    """Every ``<function=NAME>`` block with XML parameters; functionary's JSON bodies are left alone."""
    if spec.requires is not None and spec.requires not in text:
        return NOT_ATTEMPTED
    walker = _Walker(text, spec, context)
    calls: list[ParsedCall] = []
    attempted = False
    position = 0
    while (opened := text.find(FUNCTION, position)) != -1:
        name_end = text.find(">", opened + len(FUNCTION))
        if name_end == -1:
            if is_name(text[opened + len(FUNCTION) :].strip()):
                return failed(spec.family, "unclosed_function")  # cut inside the tag
            break
        body = skip_ws(text, name_end + 1)
        if not (body >= len(text) or text.startswith((PARAMETER, FUNCTION_END), body)):
            position = name_end + 1  # functionary's JSON body, or prose naming the tag
            continue
        attempted = True
        name = text[opened + len(FUNCTION) : name_end].strip()
        if not is_name(name):
            return failed(spec.family, "no_name")
        try:
            call, position = walker.function(name, name_end + 1)
        except _Bad as exc:
            return failed(spec.family, str(exc))
        bounded(calls).append(call)
    return found(spec.family, calls) if attempted else NOT_ATTEMPTED


def parse_qwen(text: str, context: Context) -> TextCallParse:
    return read_functions(text, QWEN3_XML, context)


def parse_seed(text: str, context: Context) -> TextCallParse:
    return read_functions(text, SEED_OSS, context)


def _glm_pairs(text: str, position: int, name: str, context: Context) -> tuple[dict[str, Any], int]:
    """The ``<arg_key>``/``<arg_value>`` pairs from `position` up to ``</tool_call>``, and where it ends."""
    arguments: dict[str, Any] = {}
    position = skip_ws(text, position)
    while not text.startswith(TOOL_CALL_END, position):
        if position >= len(text):
            raise _Bad("unclosed")
        if not text.startswith(ARG_KEY, position):
            raise _Bad("unexpected_text")
        key_end = text.find(ARG_KEY_END, position)
        if key_end == -1:
            raise _Bad("unclosed_arg_key")
        key = text[position + len(ARG_KEY) : key_end].strip()
        value_start = skip_ws(text, key_end + len(ARG_KEY_END))
        if not text.startswith(ARG_VALUE, value_start):
            raise _Bad("key_without_value")
        value_end = text.find(ARG_VALUE_END, value_start)
        if value_end == -1:
            raise _Bad("unclosed_arg_value")
        value = trim_newlines(text[value_start + len(ARG_VALUE) : value_end])
        arguments[key] = typed_value(value, context.param_schema(name, key))
        position = skip_ws(text, value_end + len(ARG_VALUE_END))
    return arguments, position + len(TOOL_CALL_END)


def _glm_head(text: str, start: int, heads: MarkerFinder, context: Context) -> tuple[str, int] | None:
    """(name, where the pairs start) when the block opening at `start` is GLM's; None when it is not."""
    at, marker = heads.find(start) or (len(text), "")
    head = text[start:at]
    name = head.strip()
    if not is_name(name):
        return None
    if marker == ARG_KEY:
        return name, at
    if marker == TOOL_CALL_END and ("\n" in head.lstrip() or context.offers(name)):
        return name, at
    return None


def parse_glm(text: str, context: Context) -> TextCallParse:
    """Every ``<tool_call>`` block written GLM's way; other blocks are not this family's."""
    if ARG_KEY not in text and TOOL_CALL_END not in text:
        return NOT_ATTEMPTED  # a GLM head ends at <arg_key> or </tool_call>
    heads = MarkerFinder(text, (ARG_KEY, TOOL_CALL_END, TOOL_CALL))
    calls: list[ParsedCall] = []
    attempted = False
    position = 0
    while (opened := text.find(TOOL_CALL, position)) != -1:
        start = opened + len(TOOL_CALL)
        head = _glm_head(text, start, heads, context)
        if head is None:
            position = start
            continue
        attempted = True
        try:
            arguments, position = _glm_pairs(text, head[1], head[0], context)
        except _Bad as exc:
            return failed(GLM, str(exc))
        bounded(calls).append(ParsedCall(name=head[0], arguments=arguments))
    return found(GLM, calls) if attempted else NOT_ATTEMPTED
