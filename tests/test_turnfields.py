"""The lean readers' types are derived from `TurnRecord` (core/turnfields.py), not kept by hand."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest

from orchestrator.analysis.report.notebook import NotebookTurn
from orchestrator.cli.outcomerows import STATS_FIELDS, OutcomeRow, TurnOutcomeRow
from orchestrator.core.turnfields import Read, lean_type, lean_typeddict
from orchestrator.core.types import Outcome, TurnRecord
from orchestrator.runner.store.turnview import FIRST_TURN_FIELDS, REPORT_FIELDS, TurnView


@pytest.mark.parametrize("fields", [REPORT_FIELDS, FIRST_TURN_FIELDS, STATS_FIELDS])
def test_every_lean_field_is_a_record_field(fields: dict[str, Read]) -> None:
    assert set(fields) <= set(TurnRecord.model_fields)


def test_a_name_that_is_no_record_field_is_refused() -> None:
    with pytest.raises(KeyError, match="not a TurnRecord field"):
        lean_typeddict("Bad", {"no_such_field": Read()})


def test_the_views_hold_exactly_their_declared_fields() -> None:
    assert list(TurnView.__annotations__) == list(REPORT_FIELDS)
    assert list(OutcomeRow.__annotations__) == list(STATS_FIELDS) == list(TurnOutcomeRow.model_fields)
    assert set(REPORT_FIELDS) < set(NotebookTurn.__annotations__)
    required = {name for name, read in REPORT_FIELDS.items() if read.required}
    assert TurnView.__required_keys__ == NotebookTurn.__required_keys__ == required


def test_types_come_from_the_record() -> None:
    hints = typing.get_type_hints(TurnView)
    assert hints["outcome"] == typing.Literal[tuple(o.value for o in Outcome)]  # the record's enum, its values
    assert hints["detail"] == str | None
    assert hints["superseded"] is bool  # nullable=False
    assert lean_type("flags", Read()) == list[str] | None
    assert lean_type("tools_mode", Read(any_text=True, nullable=False)) is str
    assert lean_type("raw_body", Read(checked=False)) is Any
    with pytest.raises(TypeError, match="raw_body"):  # an Any field cannot be checked: said, not guessed
        lean_type("raw_body", Read())


def test_the_msgspec_and_pydantic_forms_agree_on_a_bad_count() -> None:
    line = b'{"stack": "s", "model": "m", "tools_mode": "native", "seed": "a", "turn": -1, "outcome": "valid_call"}'
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(line, type=OutcomeRow)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        TurnOutcomeRow.model_validate_json(line)
    good = line.replace(b"-1", b"2")
    assert msgspec.json.decode(good, type=OutcomeRow)["turn"] == TurnOutcomeRow.model_validate_json(good).turn == 2
