"""A lean, read-only view of a turn record for the report at scale.

A full record holds the stack's raw reply (`raw_body`, ~40% of a record), the text-call candidates, the prompt-
cache facts: decoded as Python dicts, 1M records take ~12 GB and minutes. The report reads none of those. A
view is a plain dict decoded by msgspec straight from the line's bytes with only the fields the report reads
(`TurnView`, a TypedDict; every other field in the line is scanned, never built into objects). The fields the
report reads on a seed's first turn only (`FirstTurnFields`: its first answer, for stream pairs and parallel
first calls) are decoded for turn-0 lines alone, in a second pass over just those lines.

The key fields are checked as strictly as `storedamage.turn_record` checks them; a line that fails here is
handed to `turn_record` for its exact error message (the one reader of damage), so the view changes how fast a
good line is read, never which lines are good.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec
import numpy as np

from orchestrator.core.types import KNOWN_SCHEMA_VERSIONS, Outcome

OutcomeName = Literal[
    "valid_call", "hallucinated_call", "unparseable_text", "no_call_prose", "rejected_request", "non_response"
]
KnownVersion = Literal[tuple(sorted(KNOWN_SCHEMA_VERSIONS))]  # type: ignore[valid-type]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
assert set(OutcomeName.__args__) == {o.value for o in Outcome}  # type: ignore[attr-defined]  # one list of six


class TurnView(TypedDict):
    """The fields of a turn record the report reads on every turn (analysis/report.py and its sections)."""

    cell_id: str
    seed: str
    turn: NonNegative
    outcome: OutcomeName
    tools_mode: str
    schema_version: NotRequired[KnownVersion]  # another version: the line goes to the full reader, which names it
    seed_attempt: NotRequired[NonNegative | None]
    end: NotRequired[str | None]
    superseded: NotRequired[bool]
    call_format: NotRequired[Any]
    constraint_honoured: NotRequired[Any]
    detail: NotRequired[Any]
    flags: NotRequired[Any]
    stack_version: NotRequired[Any]
    stream: NotRequired[Any]
    stream_facts: NotRequired[Any]
    suite: NotRequired[Any]
    task_success: NotRequired[Any]


class FirstTurnFields(TypedDict):
    """What the report reads of a seed's first turn beyond `TurnView`: its first answer and how it was drawn."""

    attempt: NotRequired[Any]
    calls: NotRequired[Any]
    error: NotRequired[Any]
    raw_content: NotRequired[Any]
    sampling_seed: NotRequired[Any]


VIEW_FIELDS = frozenset(TurnView.__annotations__) | frozenset(FirstTurnFields.__annotations__)
_DECODER = msgspec.json.Decoder(TurnView)
_FIRST_TURN = msgspec.json.Decoder(FirstTurnFields)


def decode_views(lines: bytes | memoryview, ends: np.ndarray) -> list[dict[str, Any]]:
    """Newline-delimited records as views, all at once (msgspec.DecodeError on the first that is none); `ends`:
    the offset of each line's `\\n` (one record a line), which finds a turn-0 line for its second pass."""
    views = _DECODER.decode_lines(lines)
    if len(views) != len(ends):
        return views  # not one record a line: the caller reads this chunk line by line
    for index, view in enumerate(views):
        if view["turn"] == 0:
            start = int(ends[index - 1]) + 1 if index else 0
            view.update(_FIRST_TURN.decode(lines[start : int(ends[index])]))
    return views


def decode_view(raw: bytes) -> dict[str, Any]:
    """A line as a view; msgspec.DecodeError (its ValidationError included) when it is not a good record."""
    view = _DECODER.decode(raw)
    if view["turn"] == 0:
        view.update(_FIRST_TURN.decode(raw))
    return view
