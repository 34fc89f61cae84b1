"""BFCL (Berkeley Function Calling Leaderboard) single-turn cases as this project runs and scores them. Pure.

- Categories: the single-turn Python ones BFCL checks by AST, and its relevance ones. Java and JavaScript
  (their arguments are strings in those languages' syntax) and the multi-turn and agentic categories are not
  run here.
- Names: BFCL's chat `tools=` handler offers `a.b` as `a_b` (OpenAI tool names cannot hold a dot); the text
  modes describe the original names. A call under either spelling is read as that function, and is checked
  under its original name (`original_names`), so a verdict equals what BFCL's own handler would give.
- A turn's verdict (`BfclVerdict`): `valid` on the calls the serving path delivered, `valid_as_said` on the
  calls the model wrote (the served ones, or those recovered from its text where the stack's parser lost
  them). A turn without model output (`rejected_request`, `non_response`) has none: it is no pass and no
  failure, on irrelevance too (BFCL scores a failed request's error text as a pass there).
- Aggregation (`subscores`): BFCL's own rules as far as these categories allow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.modes import mode_of
from orchestrator.core.types import INELIGIBLE_OUTCOMES, BfclVerdict, Outcome, ParsedCall, ToolsMode

__all__ = ["BfclVerdict"]  # defined with the turn record it is part of (core/types.py)

BFCL_SUITE = "bfcl"
AST_CATEGORIES: tuple[str, ...] = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
IRRELEVANCE_CATEGORIES: tuple[str, ...] = ("irrelevance", "live_irrelevance")
RELEVANCE_CATEGORIES: tuple[str, ...] = ("live_relevance",)
CATEGORIES: tuple[str, ...] = AST_CATEGORIES + IRRELEVANCE_CATEGORIES + RELEVANCE_CATEGORIES
NON_LIVE_AST: tuple[str, ...] = ("simple_python", "multiple", "parallel", "parallel_multiple")
# BFCL weights the live AST categories by their full sizes (its `calculate_weighted_accuracy`), whatever ran here.
LIVE_WEIGHTS: Mapping[str, int] = {
    "live_simple": 258,
    "live_multiple": 1053,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
}
# Cases whose ground truth contradicts their own function docs (checked by tests/test_bfcl.py on BFCL's checker):
# no sensible output passes them, so they measure no model and are never selected. BFCL itself still scores them.
UNPASSABLE: Mapping[str, str] = {
    "live_simple_106-63-0": "ground truth leaves out required parameters of `record` (missing_required)",
    "live_simple_112-68-0": "ground truth gives required parameters no accepted value (empty alternative lists)",
    "live_multiple_507-149-4": "ground truth accepts only '' for the required origin_airport (passed only by '')",
    "live_multiple_862-181-3": "ground truth passes journey_start_time, which Trains_1_FindTrains does not declare",
    "live_multiple_964-207-0": "ground truth names parameter `question`; transfer_to_human_agent requires `statement`",
}
IRRELEVANCE_ERROR = "irrelevance_error:decoder_success"
DECODER_FAILED = "ast_decoder:decoder_failed"  # BFCL's evaluator: an AST case answered with no call
RELEVANCE_ERROR = "relevance_error:decoder_failed"


class BfclCase(BaseModel):
    """One selected case, as the run snapshots it: what BFCL's data and possible-answer files say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    category: str
    question: list[dict[str, Any]] = Field(description="The single turn's messages, as BFCL's data file has them.")
    function: list[dict[str, Any]] = Field(description="The function docs offered, unmodified.")
    ground_truth: list[dict[str, Any]] | None = Field(None, description="None: a relevance category (no checker).")

    @property
    def user_request(self) -> str:
        users = [m.get("content") for m in self.question if m.get("role") == "user"]
        return str(users[-1] if users else "")

    @property
    def system_text(self) -> str | None:
        systems = [str(m.get("content") or "") for m in self.question if m.get("role") == "system"]
        return "\n\n".join(systems) if systems else None


def selection_key(case_id: str) -> str:
    """The stable selection order: cases sorted by the sha256 of their id, the first N taken. The same cases on
    every stack, run and machine, spread over the whole file rather than its first rows."""
    return hashlib.sha256(case_id.encode()).hexdigest()


def fc_name(name: str) -> str:
    """A function name as BFCL's chat `tools=` handler offers it (`.` -> `_`)."""
    return name.replace(".", "_")


def original_names(functions: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Every spelling a call may use for a case's functions -> the function's BFCL name (its own spelling wins
    where two collide)."""
    names = [str(function.get("name")) for function in functions]
    spelled = {fc_name(name): name for name in names}
    return {**spelled, **{name: name for name in names}}


def model_output(calls: Iterable[ParsedCall], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """Calls in BFCL's `[{name: {arg: value}}]` shape, each name mapped back to BFCL's spelling; a name that is
    no offered function stays as written (BFCL's checker fails it on the name). Arguments that are no object
    are an empty set of arguments, as BFCL's decoder would have none."""
    return [
        {names.get(call.name, call.name): dict(call.arguments) if isinstance(call.arguments, dict) else {}}
        for call in calls
    ]


def served_calls(mode: ToolsMode | str, calls: Sequence[ParsedCall], raw_tool_calls: Any) -> list[ParsedCall]:
    """The calls the serving path delivered: in a mode that sends `tools=` (native, native+hint) only the stack's
    own `tool_calls` (native+hint's label also reads a call from the text: that one the stack did not deliver);
    in the other modes the harness's parse is the serving path."""
    if not mode_of(mode).sends_tools:
        return list(calls)
    return list(calls) if raw_tool_calls else []


def has_verdict(outcome: Outcome | str) -> bool:
    """A turn the model answered: the others are outside the denominator (no verdict at all)."""
    return Outcome(outcome) not in INELIGIBLE_OUTCOMES


def relevance_verdict(category: str, calls: Sequence[ParsedCall]) -> tuple[bool, str | None]:
    """BFCL's evaluator rule for the relevance categories: irrelevance passes when the answer holds no call,
    relevance when it holds one (arguments not checked)."""
    if category in IRRELEVANCE_CATEGORIES:
        return (not calls, None if not calls else IRRELEVANCE_ERROR)
    return (bool(calls), None if calls else RELEVANCE_ERROR)


def subscores(accuracy: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """BFCL's aggregation over the categories that ran ({category: accuracy in 0..1}): non-live (Python) is the
    plain mean of its four AST categories (BFCL's own non-live also averages Java and JavaScript into simple);
    live is the AST categories weighted by BFCL's full sizes; irrelevance is the mean of its two. A sub-score
    names the categories it is over; one with none of its categories is absent. Never an overall score: BFCL's
    agentic part cannot run offline."""
    found: dict[str, dict[str, Any]] = {}
    non_live = [c for c in NON_LIVE_AST if c in accuracy]
    if non_live:
        found["non_live_python"] = {"value": sum(accuracy[c] for c in non_live) / len(non_live), "over": non_live}
    live = [c for c in LIVE_WEIGHTS if c in accuracy]
    if live:
        total = sum(LIVE_WEIGHTS[c] for c in live)
        found["live"] = {"value": sum(accuracy[c] * LIVE_WEIGHTS[c] for c in live) / total, "over": live}
    relevance = [c for c in IRRELEVANCE_CATEGORIES if c in accuracy]
    if relevance:
        found["irrelevance"] = {"value": sum(accuracy[c] for c in relevance) / len(relevance), "over": relevance}
    return found
