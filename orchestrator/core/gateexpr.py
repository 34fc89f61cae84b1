"""Gate expressions, `<channel>.<set>.<dimension> <op> <threshold>` (e.g. `product.core.answer >= 12/14`):
parsed here, in the pure core, so a matrix file's gates are checked when it is loaded; evaluated in
analysis/product/gate.py."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from orchestrator.core.scoring import CHANNELS, DIMENSIONS

CASE_SETS = ("all", "core")
OPERATORS: dict[str, Callable[[Fraction, Fraction], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}
_OPERATOR_CHARS = frozenset("<>=!")
_FRACTION = re.compile(r"^(\d+)/(\d+)$")
_DECIMAL = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)%$")
MAX_THRESHOLD_CHARS = 32  # a pass rate needs few digits; thousands would pass Python's int-string limit
SHAPE_HELP = "expected '<channel>.<set>.<dimension> <op> <threshold>', e.g. 'product.core.answer >= 12/14'"


class GateError(ValueError):
    """A gate expression that cannot be read; the message names the expression and what is wrong."""


class Gate(BaseModel):
    """A parsed gate expression."""

    model_config = ConfigDict(frozen=True)

    expression: str
    channel: str
    case_set: str
    dimension: str
    op: str
    threshold: Fraction
    threshold_text: str

    @property
    def metric(self) -> str:
        return f"{self.channel}.{self.case_set}.{self.dimension}"


def _fail(text: str, problem: str) -> GateError:
    return GateError(f"gate {text.strip()!r}: {problem}")


def _choice(text: str, what: str, value: str, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise _fail(text, f"unknown {what} {value!r} (expected one of {', '.join(allowed)})")
    return value


def parse_threshold(text: str, threshold: str) -> Fraction:
    """`N/M`, a decimal in [0, 1], or a percentage `85%`, as an exact fraction in [0, 1]."""
    if len(threshold) > MAX_THRESHOLD_CHARS:
        too_long = f"threshold of {len(threshold)} characters: a pass rate takes at most {MAX_THRESHOLD_CHARS}"
        raise _fail(text[:80] + "...", too_long)
    if fraction := _FRACTION.match(threshold):
        numerator, denominator = int(fraction.group(1)), int(fraction.group(2))
        if denominator == 0:
            raise _fail(text, f"threshold {threshold} has a zero denominator")
        value = Fraction(numerator, denominator)
    elif decimal := _DECIMAL.match(threshold):
        value = Fraction(decimal.group(1))
    elif percent := _PERCENT.match(threshold):
        value = Fraction(percent.group(1)) / 100
    else:
        raise _fail(text, f"threshold {threshold!r} is not a fraction N/M, a decimal in [0, 1] or a percentage N%")
    if not 0 <= value <= 1:
        raise _fail(text, f"threshold {threshold} is outside [0, 1] (a pass rate)")
    return value


def _run_end(text: str, start: int, member: Callable[[str], bool]) -> int:
    """The index after the run of characters from `start` for which `member` holds."""
    end = start
    while end < len(text) and member(text[end]):
        end += 1
    return end


def _not_metric(char: str) -> bool:
    return char.isspace() or char in _OPERATOR_CHARS


def split_shape(text: str) -> tuple[str, str, str] | None:
    """(metric, operator, threshold) of `<metric> <op> <threshold>`, or None when the text has another shape.
    One forward pass, each character looked at once: a backtracking regex took quadratic time here (40k `=`
    characters, 21.6 s; a 256 KiB matrix file, minutes). The operator is the whole run of `<>=!` characters,
    so a run too long for an operator is named as an unknown operator rather than re-split."""
    body = text.strip()
    metric_end = _run_end(body, 0, lambda char: not _not_metric(char))
    op_start = _run_end(body, metric_end, str.isspace)
    op_end = _run_end(body, op_start, _OPERATOR_CHARS.__contains__)
    threshold = body[_run_end(body, op_end, str.isspace) :]
    if metric_end == 0 or op_end == op_start or not threshold or any(map(str.isspace, threshold)):
        return None
    return body[:metric_end], body[op_start:op_end], threshold


def parse_gate(text: str) -> Gate:
    """Read one gate expression; raise GateError naming the expression and the problem."""
    shape = split_shape(text)
    if shape is None:
        raise _fail(text, SHAPE_HELP)
    metric, op_text, threshold_text = shape
    parts = metric.split(".")
    if len(parts) != 3:
        raise _fail(text, f"{metric!r} is not <channel>.<set>.<dimension>; {SHAPE_HELP}")
    channel = _choice(text, "channel", parts[0], CHANNELS)
    case_set = _choice(text, "set", parts[1], CASE_SETS)
    dimension = _choice(text, "dimension", parts[2], DIMENSIONS)
    op = _choice(text, "operator", op_text, OPERATORS)
    threshold = parse_threshold(text, threshold_text)
    return Gate(
        expression=text.strip(),
        channel=channel,
        case_set=case_set,
        dimension=dimension,
        op=op,
        threshold=threshold,
        threshold_text=threshold_text,
    )
