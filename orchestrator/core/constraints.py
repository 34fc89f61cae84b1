"""Request semantics as measured axes: `tool_choice` and `parallel_tool_calls`, and whether an answer kept to
them. Pure.

Only native modes send them (the stack's own tool path is what they constrain). The check reads the calls
the *stack* returned (`tool_calls`), not calls the harness recovered from text: a stack that was asked to
force a call and let the model write prose (or JSON in the content) did not honour the request.
- `required`: at least one call; `named`: every call names that tool and there is one; `none`: no call;
- `parallel_tool_calls: false`: at most one call.
A turn the stack refused or never answered says nothing about compliance (None); an empty 2xx answer does.
An answer cut at `max_tokens` before any call reached `tool_calls` leaves `required` / `named` unjudged
(None, flag `constraint:unjudged_truncated`): a stack that forces the call may only parse it at the end.
The outcome stays what the answer is; a broken constraint is a flag (`constraint:required_ignored`, ...) and
`constraint_honoured`. (Not the turn's `detail`: that stays the answer's own reason, which triage and
`--reclassify` read; the flag is in the same family:reason form.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.types import Classification, Outcome

ToolChoice = Literal["auto", "required", "named", "none"]
TOOL_CHOICES: tuple[str, ...] = ("auto", "required", "named", "none")
REQUIRED_IGNORED = "constraint:required_ignored"
NAMED_IGNORED = "constraint:named_ignored"
NONE_IGNORED = "constraint:none_ignored"
PARALLEL_IGNORED = "constraint:parallel_ignored"
UNJUDGED_TRUNCATED = "constraint:unjudged_truncated"  # cut at max_tokens with no call yet: a forced call may be late
CONSTRAINT_FLAGS = frozenset({REQUIRED_IGNORED, NAMED_IGNORED, NONE_IGNORED, PARALLEL_IGNORED, UNJUDGED_TRUNCATED})


class RequestSemantics(BaseModel):
    """What a native request asks of the stack beyond `tools=`: the cell's axes, and the tool `named` names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_choice: ToolChoice = "auto"
    named_tool: str | None = Field(None, description="tool_choice named: the tool the request names.")
    parallel_tool_calls: bool | None = Field(None, description="None: not sent (the stack's default).")

    @property
    def asks(self) -> bool:
        """Anything beyond the API's defaults is asked (auto and an unsent parallel_tool_calls ask nothing)."""
        return self.tool_choice != "auto" or self.parallel_tool_calls is False

    def body_fields(self) -> dict[str, Any]:
        """The request fields, in the OpenAI names every stack here reads (Ollama's /api/chat ignores them:
        that is what the measurement shows). `auto` is the default with tools and is not sent."""
        fields: dict[str, Any] = {}
        if self.tool_choice == "named":
            fields["tool_choice"] = {"type": "function", "function": {"name": self.named_tool}}
        elif self.tool_choice != "auto":
            fields["tool_choice"] = self.tool_choice
        if self.parallel_tool_calls is not None:
            fields["parallel_tool_calls"] = self.parallel_tool_calls
        return fields


def request_semantics(
    tool_choice: str | None, parallel_tool_calls: bool | None, tools: list[dict[str, Any]]
) -> RequestSemantics | None:
    """What a cell's requests ask beyond tools= for one suite (None: nothing); `named` names the suite's
    first tool. The one rule the runner sends by and --reclassify judges by."""
    choice = tool_choice or "auto"
    if choice == "auto" and parallel_tool_calls is None:
        return None
    named = tools[0]["function"]["name"] if choice == "named" and tools else None
    return RequestSemantics(tool_choice=choice, named_tool=named, parallel_tool_calls=parallel_tool_calls)


def _stack_call_names(raw_tool_calls: Any) -> list[str | None]:
    if not isinstance(raw_tool_calls, list):
        return []
    names = []
    for raw in raw_tool_calls:
        function = raw.get("function") if isinstance(raw, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        names.append(name if isinstance(name, str) else None)
    return names


def constraint_breaches(semantics: RequestSemantics, raw_tool_calls: Any) -> list[str]:
    """The constraints an answer broke, from the calls the stack returned."""
    names = _stack_call_names(raw_tool_calls)
    broken = []
    if semantics.tool_choice == "required" and not names:
        broken.append(REQUIRED_IGNORED)
    elif semantics.tool_choice == "named" and (not names or any(n != semantics.named_tool for n in names)):
        broken.append(NAMED_IGNORED)
    elif semantics.tool_choice == "none" and names:
        broken.append(NONE_IGNORED)
    if semantics.parallel_tool_calls is False and len(names) > 1:
        broken.append(PARALLEL_IGNORED)
    return broken


def stack_answered(outcome: Outcome, error: Any) -> bool:
    """The stack gave an answer: not a refusal, and not a failure without a message (an empty 2xx message is
    an answer: a stack asked to force a call that sends nothing did not honour it)."""
    if outcome is Outcome.REJECTED_REQUEST:
        return False
    return outcome is not Outcome.NON_RESPONSE or not error


def answered(verdict: Classification) -> bool:
    """A verdict the constraints can be judged on (see `stack_answered`)."""
    return stack_answered(verdict.outcome, verdict.error)


def check_constraints(verdict: Classification, semantics: RequestSemantics | None) -> Classification:
    """The verdict with `constraint_honoured` and the breach flags; unchanged when nothing was asked or the
    stack gave no answer to judge (refused, no response)."""
    if semantics is None or not semantics.asks or not answered(verdict):
        return verdict
    broken = constraint_breaches(semantics, verdict.raw_tool_calls)
    kept = [f for f in verdict.flags if f not in CONSTRAINT_FLAGS]
    missing_call = {REQUIRED_IGNORED, NAMED_IGNORED} & set(broken) and not _stack_call_names(verdict.raw_tool_calls)
    if missing_call and verdict.finish_reason == "length":  # the stack's parser may never have seen the call
        others = [f for f in broken if f not in (REQUIRED_IGNORED, NAMED_IGNORED)]
        return verdict.model_copy(
            update={"constraint_honoured": False if others else None, "flags": [*kept, *others, UNJUDGED_TRUNCATED]}
        )
    return verdict.model_copy(update={"constraint_honoured": not broken, "flags": kept + broken})
