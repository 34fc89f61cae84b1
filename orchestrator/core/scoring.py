"""Scoring of the two channels: what a case expects, how one sample's run meets it, and the majority vote over
samples. Pure: functions over turn-record dicts (as read from turns.jsonl).

The model channel scores the model's first answer; the product channel scores what the tool server actually
received (executions that were sent) and the final answer the product gave. Each dimension (tool, args, answer)
is True / False, or None where it does not apply to the case in that channel. A run the stack cut short (an end
in UNRAN_SEED_ENDS, or no end at all) is `unscored`: it is no vote for or against the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Real
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from orchestrator.core.cell import CHANNELS, Channel
from orchestrator.core.replytext import is_question, looks_like_json_answer
from orchestrator.core.types import UNRAN_SEED_ENDS

Dimension = Literal["tool", "args", "answer"]
DIMENSIONS: tuple[Dimension, ...] = ("tool", "args", "answer")
ANY_OF = "any_of"
_UNRAN_ENDS = frozenset(end.value for end in UNRAN_SEED_ENDS)


class ExpectedCall(BaseModel):
    """The right call: the tool's name and, optionally, a subset of its arguments (see `arguments_match`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    arguments: dict[str, Any] | None = None


class Expectation(BaseModel):
    """What a case expects. `answer`: any of these strings, a case-insensitive, whitespace-normalised substring
    of the final answer. `ask_user`: no tool call, the reply asks the user. `chat`: no tool call, a plain
    (non-empty, non-JSON) reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call: ExpectedCall | None = None
    answer: str | list[str] | None = None
    ask_user: bool = False
    chat: bool = False

    @model_validator(mode="after")
    def _coherent(self) -> Expectation:
        if self.call is None and self.answer is None and not self.ask_user and not self.chat:
            raise ValueError("an expectation needs at least one of call, answer, ask_user, chat")
        if self.ask_user and self.chat:
            raise ValueError("ask_user and chat exclude each other")
        if self.call is not None and (self.ask_user or self.chat):
            raise ValueError("ask_user and chat mean no tool call: they exclude call")
        if isinstance(self.answer, list) and not self.answer:
            raise ValueError("answer as a list needs at least one alternative")
        return self

    @property
    def answers(self) -> tuple[str, ...]:
        """The accepted answers (empty when the case expects none)."""
        if self.answer is None:
            return ()
        return (self.answer,) if isinstance(self.answer, str) else tuple(self.answer)

    @property
    def no_call(self) -> bool:
        """Whether the right move is to call nothing."""
        return self.ask_user or self.chat


def applicable_dimensions(expect: Expectation, channel: Channel) -> tuple[Dimension, ...]:
    """The dimensions a case is scored on in a channel. The model channel scores no tool-needing answer: a
    first answer cannot hold a tool's result."""
    found: list[Dimension] = []
    if expect.call is not None or expect.no_call:
        found.append("tool")
    if expect.call is not None and expect.call.arguments is not None:
        found.append("args")
    if expect.no_call or (channel == "product" and expect.answer is not None):
        found.append("answer")
    return tuple(found)


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _is_any_of(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {ANY_OF} and isinstance(value[ANY_OF], list)


def arguments_match(expected: Any, actual: Any) -> bool:
    """Recursive subset match: every expected key is present and matches (extra actual keys are allowed);
    strings compare casefolded and stripped; numbers numerically (1 == 1.0, but "600" != 600); lists by
    length and element-wise; {"any_of": [a, b]} matches any alternative."""
    if _is_any_of(expected):
        return any(arguments_match(alternative, actual) for alternative in expected[ANY_OF])
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return False
        return all(key in actual and arguments_match(value, actual[key]) for key, value in expected.items())
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return False
        return all(arguments_match(e, a) for e, a in zip(expected, actual, strict=True))
    if isinstance(expected, str):
        return isinstance(actual, str) and expected.strip().casefold() == actual.strip().casefold()
    if isinstance(expected, bool) or expected is None:
        return actual is expected  # True is not 1, and None is not "null"
    if _is_number(expected):
        return _is_number(actual) and expected == actual
    return bool(expected == actual)


def normalise_text(text: str | None) -> str:
    """Casefolded, with every run of whitespace one space: the form answers are compared in."""
    return " ".join((text or "").split()).casefold()


def answer_contains(final: str | None, answers: Iterable[str]) -> bool:
    """Whether any expected answer is a substring of the final answer (casefold, whitespace-normalised)."""
    normalised = normalise_text(final)
    return bool(normalised) and any(normalise_text(answer) in normalised for answer in answers)


class RunScore(BaseModel):
    """One sample's run of a case, scored. `scores[d]` is None where d does not apply (or the run is unscored)."""

    model_config = ConfigDict(frozen=True)

    scores: dict[str, bool | None]
    unscored: bool = False

    def vote(self, dimension: str) -> bool | None:
        """This sample's vote on a dimension; None: no vote (not applicable, or the stack cut the run short)."""
        return None if self.unscored else self.scores.get(dimension)


def counted_run(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records that count (not superseded), in (turn, attempt) order."""
    counted = [r for r in records if not r.get("superseded", False)]
    return sorted(counted, key=lambda r: (int(r.get("turn", 0)), int(r.get("attempt", 0))))


def run_end(run: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The record on which the run ended (the last with an `end`), if any."""
    ends = [r for r in run if r.get("end")]
    return ends[-1] if ends else None


def is_unscored(run: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the stack, not the model, decided how the run ended: no end at all, or an end it imposed."""
    end = run_end(run)
    return end is None or str(end["end"]) in _UNRAN_ENDS


def _call_name(call: Any) -> str | None:
    return call.get("name") if isinstance(call, Mapping) else None


def _unscored() -> RunScore:
    return RunScore(scores=dict.fromkeys(DIMENSIONS), unscored=True)


def _first_answer(run: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The last attempt of the first turn: the model's first answer."""
    first = [r for r in run if int(r.get("turn", 0)) == 0]
    return first[-1] if first else None


def score_model_run(records: Iterable[Mapping[str, Any]], expect: Expectation) -> RunScore:
    """Score the model channel: the model's first answer alone."""
    run = counted_run(records)
    answer = _first_answer(run)
    if is_unscored(run) or answer is None:
        return _unscored()
    calls = list(answer.get("calls") or [])
    first_call = calls[0] if calls else None
    text = answer.get("raw_content")
    scores: dict[str, bool | None] = dict.fromkeys(DIMENSIONS)
    if expect.call is not None:
        scores["tool"] = _call_name(first_call) == expect.call.tool
        if expect.call.arguments is not None:
            scores["args"] = bool(scores["tool"]) and arguments_match(
                expect.call.arguments, first_call.get("arguments") if first_call else None
            )
    elif expect.no_call:
        scores["tool"] = not calls
        scores["answer"] = _plain_answer_right(expect, text, called=bool(calls))
    return RunScore(scores=scores)


def _plain_answer_right(expect: Expectation, text: str | None, *, called: bool) -> bool:
    """The answer dimension of an ask_user / chat case: nothing called, the reply asks (ask_user) or is a plain
    reply (chat), and holds an expected answer when the case names one."""
    if called:
        return False
    if expect.ask_user and not is_question(text):
        return False
    if expect.chat and (not (text or "").strip() or looks_like_json_answer(text)):
        return False
    return not expect.answers or answer_contains(text, expect.answers)


def executed_calls(run: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The calls the tool server received: every execution marked sent, across the run."""
    found: list[Mapping[str, Any]] = []
    for record in run:
        for execution in record.get("executions") or []:
            if execution.get("sent", True) and isinstance(execution.get("call"), Mapping):
                found.append(execution["call"])
    return found


def score_product_run(records: Iterable[Mapping[str, Any]], expect: Expectation) -> RunScore:
    """Score the product channel: what the tool server received, and the final answer."""
    run = counted_run(records)
    end = run_end(run)
    if is_unscored(run) or end is None:
        return _unscored()
    executed = executed_calls(run)
    final = end.get("final_answer")
    scores: dict[str, bool | None] = dict.fromkeys(DIMENSIONS)
    if expect.call is not None:
        to_tool = [call for call in executed if call.get("name") == expect.call.tool]
        scores["tool"] = bool(to_tool)
        if expect.call.arguments is not None:
            scores["args"] = any(arguments_match(expect.call.arguments, call.get("arguments")) for call in to_tool)
        if expect.answers:
            scores["answer"] = answer_contains(final, expect.answers)
    elif expect.no_call:
        scores["tool"] = not executed
        scores["answer"] = _plain_answer_right(expect, final, called=bool(executed))
    else:
        scores["answer"] = answer_contains(final, expect.answers)
    return RunScore(scores=scores)


def score_run(records: Iterable[Mapping[str, Any]], expect: Expectation, channel: Channel) -> RunScore:
    """Score one sample's run in its channel."""
    if channel == "model":
        return score_model_run(records, expect)
    if channel == "product":
        return score_product_run(records, expect)
    raise ValueError(f"unknown channel {channel!r}: expected one of {', '.join(CHANNELS)}")


class Vote(BaseModel):
    """A majority vote over the scored samples of a case. A tie fails, and is reported as a tie."""

    model_config = ConfigDict(frozen=True)

    passed: bool
    tie: bool
    n_pass: int
    n_votes: int

    @property
    def unscored(self) -> bool:
        """No sample could vote: the case has no verdict (it fails wherever one is needed)."""
        return self.n_votes == 0


def majority(votes: Sequence[bool]) -> Vote:
    """passed iff more than half the votes pass; a tie (exactly half, at least one vote) fails."""
    n_pass = sum(1 for vote in votes if vote)
    n_votes = len(votes)
    return Vote(passed=n_pass * 2 > n_votes, tie=n_votes > 0 and n_pass * 2 == n_votes, n_pass=n_pass, n_votes=n_votes)


def vote_case(samples: Iterable[RunScore], dimension: str) -> Vote:
    """The majority over the samples that voted on `dimension` (unscored samples are not votes)."""
    votes = [vote for vote in (sample.vote(dimension) for sample in samples) if vote is not None]
    return majority(votes)
