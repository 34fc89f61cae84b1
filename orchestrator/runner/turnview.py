"""A lean, read-only view of a turn record for the report at scale.

A full record holds the stack's raw reply (`raw_body`, ~40% of a record), the text-call candidates, the prompt-
cache facts: decoded as Python dicts, 1M records take ~12 GB and minutes. The report reads none of those. A
view is a plain dict decoded by msgspec straight from the line's bytes with only the fields the report reads
(`TurnView`, a TypedDict; every other field in the line is scanned, never built into objects), and a later
turn drops the fields only a seed's first turn is read for (`FIRST_TURN_ONLY`).

The key fields are checked as strictly as `storedamage.turn_record` checks them; a line that fails here is
handed to `turn_record` for its exact error message (the one reader of damage), so the view changes how fast a
good line is read, never which lines are good.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec

from orchestrator.core.types import KNOWN_SCHEMA_VERSIONS, Outcome

OutcomeName = Literal[
    "valid_call", "hallucinated_call", "unparseable_text", "no_call_prose", "rejected_request", "non_response"
]
KnownVersion = Literal[tuple(sorted(KNOWN_SCHEMA_VERSIONS))]  # type: ignore[valid-type]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
assert set(OutcomeName.__args__) == {o.value for o in Outcome}  # type: ignore[attr-defined]  # one list of six


class TurnView(TypedDict):
    """The fields of a turn record the report reads (analysis/report.py and the sections it writes)."""

    cell_id: str
    seed: str
    turn: NonNegative
    outcome: OutcomeName
    tools_mode: str
    schema_version: NotRequired[KnownVersion]  # another version: the line goes to the full reader, which names it
    seed_attempt: NotRequired[NonNegative | None]
    end: NotRequired[str | None]
    superseded: NotRequired[bool]
    attempt: NotRequired[Any]
    call_format: NotRequired[Any]
    calls: NotRequired[Any]
    constraint_honoured: NotRequired[Any]
    detail: NotRequired[Any]
    error: NotRequired[Any]
    flags: NotRequired[Any]
    raw_content: NotRequired[Any]
    sampling_seed: NotRequired[Any]
    stack_version: NotRequired[Any]
    stream: NotRequired[Any]
    stream_facts: NotRequired[Any]
    suite: NotRequired[Any]
    task_success: NotRequired[Any]


VIEW_FIELDS = frozenset(TurnView.__annotations__)
# Read on a seed's first turn only (its first answer: stream pairs, parallel first calls); a later turn's view
# drops them. tests/test_turnview.py holds the report from views equal to the report from full records.
FIRST_TURN_ONLY = ("attempt", "calls", "error", "raw_content", "sampling_seed")
_DECODER = msgspec.json.Decoder(TurnView)


def _compact(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for view in views:
        if view["turn"]:
            for key in FIRST_TURN_ONLY:
                view.pop(key, None)
    return views


def decode_views(lines: bytes) -> list[dict[str, Any]]:
    """Newline-delimited records as views, all at once (msgspec.DecodeError on the first that is none)."""
    return _compact(_DECODER.decode_lines(lines))


def decode_view(raw: bytes) -> dict[str, Any]:
    """A line as a view; msgspec.DecodeError (its ValidationError included) when it is not a good record."""
    return _compact([_DECODER.decode(raw)])[0]
