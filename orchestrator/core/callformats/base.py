"""What every recogniser shares: the result type, the tool schemas, failures, and bounded decoding.

Pure. Nothing here raises on model output: decoding guards catch RecursionError and MemoryError
(deep nesting, huge values) and report them as a failed decode, never as an exception.

Bounds on JSON read from model output: a text longer than `MAX_JSON_CHARS` (16 Mi characters) is not
decoded (`loads` fails at once: a bound on memory, since decoded JSON takes several times its text); the C
decoder itself stops at ~1,000 levels (RecursionError, reported as a failed decode), and calls whose
arguments nest deeper than `MAX_DEPTH` (200) levels fail (`parse:<family>_too_deep`; for the stack's own
calls, `parse:arguments_too_deep`).

JSON has no NaN or Infinity (RFC 8259), though Python's decoder reads `NaN`, `Infinity` and `-Infinity`, and
reads a number too large for a double (`1e999`) as infinity: a verdict would call such arguments valid while
the turn record writes the value as null. Every decoder here refuses them: the text is no JSON, and so no call
(for the stack's own calls, `parse:arguments_not_json`), its raw text recorded as written.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.types import ParsedCall

# A call's name as the stacks accept it: no whitespace, quotes, brackets or tags.
_NAME = re.compile(r"[^\s<>{}()\[\]\"',;=`]+")
# Python accepts 4300-digit integers at most; beyond that int() raises ValueError (caught below).
_WS = re.compile(r"[ \t\r\n]*+")
_DECODE_ERRORS = (ValueError, RecursionError, MemoryError)


@dataclass(frozen=True)
class TextCallParse:
    """What the harness found in a text: calls, whether a call attempt failed to parse, and in which format."""

    calls: list[ParsedCall] = field(default_factory=list)
    attempted: bool = False
    failure: str | None = None  # "parse:<reason>" when an attempt could not be turned into calls
    call_format: str | None = None  # the recogniser that claimed the text; None when nothing was attempted

    @property
    def ok(self) -> bool:
        return self.attempted and self.failure is None and bool(self.calls)


NOT_ATTEMPTED = TextCallParse()

# More calls than this in one answer is degenerate output: the answer fails (`parse:<family>_too_many_calls`)
# rather than the harness validating and executing thousands of calls. Recognisers stop reading there.
MAX_CALLS = 4096


# Deeper arguments than this are degenerate output too (`parse:<family>_too_deep`): a turn record serialises
# at most ~250 levels (pydantic), and Gemma 4's reader nests without limit.
MAX_DEPTH = 200


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests objects or lists more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class TooManyCalls(Exception):
    """An answer holds more than MAX_CALLS calls; caught by `Recogniser`."""


def bounded(calls: list[ParsedCall]) -> list[ParsedCall]:
    """`calls`, or TooManyCalls when there are more than MAX_CALLS."""
    if len(calls) > MAX_CALLS:
        raise TooManyCalls
    return calls


class BadJSON(Exception):
    """A JSON text that does not decode (malformed, too deep, or too large)."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position  # where the decoder gave up, when it says


class ArgumentsNotJSON(Exception):
    """Call-shaped, but its arguments string is not valid JSON."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of a number's range")
    return value


def non_finite(value: Any) -> bool:
    """Whether `value` holds a float that no JSON text can write (NaN, ±infinity), walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


MAX_JSON_CHARS = 16 * 1024 * 1024


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def loads(text: str) -> Any:
    """json.loads that reports every decoding failure, including RecursionError and MemoryError, as BadJSON;
    a text over MAX_JSON_CHARS is not decoded."""
    if len(text) > MAX_JSON_CHARS:
        raise BadJSON(f"longer than {MAX_JSON_CHARS} characters: not decoded")
    try:
        return _DECODER.decode(text)
    except _DECODE_ERRORS as exc:
        raise BadJSON(str(exc)[:200], getattr(exc, "pos", None)) from None


_WINDOW = 4096
_CUT_MARGIN = 16  # an error this close to a window's end may be the window's doing (a cut literal or escape)


def decode_at(text: str, position: int) -> tuple[Any, int]:
    """One JSON value starting at `position` (after optional whitespace) and the index just past it.

    Decodes growing windows of the text (4k, 16k, ...) rather than the text itself: a decoding error
    computes its line number by counting newlines from the start of the string it was given, so decoding
    in place would cost O(position) per failure and make a scan over many candidates quadratic. A window
    is grown only while its end could be the cause (the value or the error reaches it), so the result is
    the same as decoding in place, at a cost proportional to what the decoder reads."""
    position = _WS.match(text, position).end()  # type: ignore[union-attr]  # _WS matches anywhere (maybe empty)
    window = _WINDOW
    while True:
        chunk = text[position : position + window]
        if len(chunk) > MAX_JSON_CHARS:  # the value runs past the size cap: not decoded
            raise BadJSON(f"longer than {MAX_JSON_CHARS} characters: not decoded", position + MAX_JSON_CHARS)
        whole = position + window >= len(text)
        try:
            value, end = _DECODER.raw_decode(chunk)
        except json.JSONDecodeError as exc:
            cut = exc.msg.startswith("Unterminated string") or exc.pos >= len(chunk) - _CUT_MARGIN
            if whole or not cut:
                raise BadJSON(exc.msg, position + exc.pos) from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise BadJSON(str(exc)[:200]) from None
        else:
            if whole or end < len(chunk) - _CUT_MARGIN:
                return value, position + end
        window *= 4


def decode_arguments(raw: Any) -> Any:
    """Arguments as sent: an object, a JSON string holding one, or absent (= no arguments)."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        if raw.strip() == "":
            return {}
        try:
            return loads(raw)
        except BadJSON as exc:
            raise ArgumentsNotJSON(str(exc)) from exc
    if non_finite(raw):  # an object the reply's own decoding read NaN or Infinity into
        raise ArgumentsNotJSON("NaN or Infinity is not JSON")
    return raw


def is_name(text: str) -> bool:
    """A plausible function name (what the stacks would pass on), not prose."""
    return bool(_NAME.fullmatch(text))


def failed(family: str, reason: str) -> TextCallParse:
    """A call attempt in `family`'s format that could not be turned into calls."""
    return TextCallParse(attempted=True, failure=f"parse:{family}_{reason}", call_format=family)


def found(family: str, calls: list[ParsedCall]) -> TextCallParse:
    """Calls read in `family`'s format (an attempt with no call is an empty call list)."""
    if not calls:
        return failed(family, "no_calls")
    return TextCallParse(calls=calls, attempted=True, call_format=family)


@dataclass(frozen=True)
class Context:
    """What a recogniser may know besides the text: the offered tools' parameter schemas."""

    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # tool -> {param: schema}

    def param_schema(self, tool: str, param: str) -> Mapping[str, Any] | None:
        schema = self.properties.get(tool, {}).get(param)
        return schema if isinstance(schema, Mapping) else None

    def offers(self, tool: str) -> bool:
        return tool in self.properties


def context_of(tools: Sequence[Mapping[str, Any]] | None) -> Context:
    """OpenAI tool specs -> the properties of each tool's parameters (malformed entries ignored)."""
    table: dict[str, Mapping[str, Any]] = {}
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        table[function["name"]] = properties if isinstance(properties, Mapping) else {}
    return Context(properties=table)


Recognise = Callable[[str, Context], TextCallParse]


@dataclass(frozen=True)
class Recogniser:
    """One call format: its name (as recorded in `call_format`) and the function that reads it."""

    name: str
    parse: Recognise
    markers: tuple[str, ...] = ()  # cheap pre-check: at least one must occur (empty: always run)

    def __call__(self, text: str, context: Context) -> TextCallParse:
        if self.markers and not any(marker in text for marker in self.markers):
            return NOT_ATTEMPTED
        try:
            result = self.parse(text, context)
            bounded(result.calls)
        except TooManyCalls:
            return failed(self.name, "too_many_calls")
        if any(too_deep(call.arguments) for call in result.calls):
            return failed(self.name, "too_deep")
        return result
