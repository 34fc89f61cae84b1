"""Families whose calls sit between special tokens: a call opens with one marker and closes with another,
and the text between holds a name and the arguments. Each family is a `TokenSpec` (data); one reader
walks every spec.

- `deepseek`: V3 / R1 ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
  and V3.1 ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``, inside
  ``<｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>`` (the ``▁`` also written ``_``, `` `` or ``\\_``, as llama.cpp
  accepts from R1 distills).
- `kimi_k2`: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}
  <|tool_call_end|>…<|tool_calls_section_end|>`` (the name is the id without ``functions.`` and ``:N``).

A family's opening marker is an attempt. A call's closing marker may be missing at the end of the answer or
of the section (llama.cpp reads Kimi-K2-Thinking's calls so); a call still open when the next one opens,
with an empty name, or with arguments that do not decode fails the whole answer (`parse:<family>_<reason>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    BadJSON,
    Context,
    TextCallParse,
    bounded,
    failed,
    found,
    is_name,
    loads,
)
from orchestrator.core.callformats.scan import MarkerFinder
from orchestrator.core.types import ParsedCall


class BadCall(Exception):
    """One call block that cannot be read; its message is the failure reason."""


@dataclass(frozen=True)
class TokenSpec:
    """One special-token call format, as data."""

    family: str
    begin: tuple[str, ...]  # opens one call
    end: tuple[str, ...]  # closes one call
    section: tuple[str, ...] = ()  # announces calls (an attempt even when no call opens)
    section_end: tuple[str, ...] = ()  # ends the calls (also ends a call whose own closing marker is missing)
    split: Callable[[str], tuple[str, str]] = lambda block: (block, "")  # block -> (raw name, raw arguments)
    name: Callable[[str], str] = str.strip
    arguments: Callable[[str], Any] = lambda raw: loads(raw) if raw.strip() else {}
    normalise: Callable[[str], str] = lambda text: text

    @property
    def markers(self) -> tuple[str, ...]:
        return self.begin + self.section


def read_blocks(text: str, spec: TokenSpec) -> TextCallParse:
    """Every call block of `spec` in `text` (already normalised), or the first failure."""
    openers = MarkerFinder(text, spec.begin)
    closers = MarkerFinder(text, spec.end + spec.section_end + spec.begin)
    calls: list[ParsedCall] = []
    position = 0
    while (opened := openers.find(position)) is not None:
        start = opened[0] + len(opened[1])
        closed = closers.find(start) or (len(text), "")
        if closed[1] in spec.begin:
            return failed(spec.family, "unclosed")  # the next call opens before this one closes
        try:
            bounded(calls).append(_call(text[start : closed[0]], spec))
        except BadCall as exc:
            return failed(spec.family, str(exc))
        position = closed[0] + len(closed[1])
    return found(spec.family, calls)


def _call(block: str, spec: TokenSpec) -> ParsedCall:
    raw_name, raw_arguments = spec.split(block)
    name = spec.name(raw_name)
    if not is_name(name):
        raise BadCall("no_name")
    try:
        arguments = spec.arguments(raw_arguments)
    except BadJSON:
        raise BadCall("arguments_not_json") from None
    return ParsedCall(name=name, arguments=arguments)


def recogniser(spec: TokenSpec) -> Callable[[str, Context], TextCallParse]:
    def parse(text: str, context: Context) -> TextCallParse:
        text = spec.normalise(text)
        if not any(marker in text for marker in spec.markers):
            return NOT_ATTEMPTED
        return read_blocks(text, spec)

    parse.__doc__ = f"Calls in the {spec.family} format."
    return parse


# --- deepseek ----------------------------------------------------------------------------------------------

_DS_TOKENS = ("tool▁calls▁begin", "tool▁calls▁end", "tool▁call▁begin", "tool▁call▁end", "tool▁sep")
_DS_VARIANTS = tuple(
    (f"<｜{token.replace('▁', sep)}｜>", f"<｜{token}｜>") for token in _DS_TOKENS for sep in ("_", " ", "\\_")
)


def _ds_normalise(text: str) -> str:
    if "｜" not in text:
        return text
    for variant, canonical in _DS_VARIANTS:
        if variant in text:
            text = text.replace(variant, canonical)
    return text


def _ds_split(block: str) -> tuple[str, str]:
    head, sep, tail = block.partition("<｜tool▁sep｜>")
    if not sep:
        raise BadCall("no_separator")
    if head.strip() != "function":
        return head, tail  # V3.1: NAME<｜tool▁sep｜>{...}
    name_line, _, rest = tail.partition("\n")  # V3 / R1: function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    rest = rest.strip()
    if rest.startswith("```"):
        newline = rest.find("\n")
        closing = rest.rfind("```")
        if newline == -1 or closing <= newline:
            raise BadCall("unclosed_fence")
        rest = rest[newline + 1 : closing]
    return name_line, rest


def _json_object(raw: str) -> Any:
    return loads(raw) if raw.strip() else {}


DEEPSEEK = TokenSpec(
    family="deepseek",
    begin=("<｜tool▁call▁begin｜>",),
    end=("<｜tool▁call▁end｜>",),
    section=("<｜tool▁calls▁begin｜>",),
    section_end=("<｜tool▁calls▁end｜>",),
    split=_ds_split,
    arguments=_json_object,
    normalise=_ds_normalise,
)

# --- kimi_k2 -----------------------------------------------------------------------------------------------


def _kimi_split(block: str) -> tuple[str, str]:
    head, sep, tail = block.partition("<|tool_call_argument_begin|>")
    if not sep:
        raise BadCall("no_arguments")
    return head, tail


def _kimi_name(raw: str) -> str:
    name = raw.strip()
    name = name.removeprefix("functions.")
    head, colon, index = name.rpartition(":")
    return head if colon and index.isdigit() else name


KIMI_K2 = TokenSpec(
    family="kimi_k2",
    begin=("<|tool_call_begin|>",),
    end=("<|tool_call_end|>",),
    section=("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"),
    section_end=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
    split=_kimi_split,
    name=_kimi_name,
    arguments=_json_object,
)
