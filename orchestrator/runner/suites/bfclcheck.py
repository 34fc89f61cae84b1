"""BFCL's verdict on a turn, by BFCL's own AST checker (runner/suites/bfclpackage.py imports it unmodified).

The calls checked are built from parsed names and values only (core/bfcl.py `model_output`): nothing the
model wrote reaches BFCL's decoder or executor as text, and a call is never run.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from orchestrator.core.bfcl import (
    DECODER_FAILED,
    IRRELEVANCE_CATEGORIES,
    RELEVANCE_CATEGORIES,
    BfclCase,
    BfclVerdict,
    has_verdict,
    model_output,
    original_names,
    relevance_verdict,
    served_calls,
)
from orchestrator.core.types import Classification, ParsedCall, ToolsMode, TurnRecord
from orchestrator.runner.suites.bfclpackage import CHECKER_MODEL, checker_module, python_language

CHECKER_RAISED = "toolcall_matrix:checker_raised"  # BFCL's checker raised on these calls: a failure, named


def check_calls(case: BfclCase, calls: Sequence[ParsedCall]) -> tuple[bool, str | None]:
    """(valid, BFCL's error type when not valid) for the calls of one answer to the case."""
    if case.category in IRRELEVANCE_CATEGORIES or case.category in RELEVANCE_CATEGORIES:
        return relevance_verdict(case.category, calls)
    if not calls:  # BFCL's evaluator: the answer does not decode to a call
        return False, DECODER_FAILED
    shaped = model_output(calls, original_names(case.function))
    checker, language = checker_module(), python_language()  # a missing install is an error, never a verdict
    try:
        function, answer = copy.deepcopy(case.function), copy.deepcopy(case.ground_truth)
        result = checker.ast_checker(function, shaped, answer, language, case.category, CHECKER_MODEL)
    except Exception as exc:  # model-written values the checker cannot compare: the answer fails, said so
        return False, f"{CHECKER_RAISED}:{type(exc).__name__}"
    valid = bool(result.get("valid"))
    return valid, None if valid else str(result.get("error_type"))  # a valid result can carry a stale type


def turn_verdict(case: BfclCase, mode: ToolsMode | str, record: TurnRecord | Classification) -> BfclVerdict:
    """The turn's verdict as served (the calls the serving path delivered: core/bfcl.py `served_calls`) and as
    said (those, or, where none were delivered, the calls the recognisers read in the text). A turn without
    model output gets none."""
    if not has_verdict(record.outcome):
        return BfclVerdict(category=case.category, id=case.id, valid=None, valid_as_said=None)
    served = served_calls(mode, record.calls, record.raw_tool_calls)
    valid, error_type = check_calls(case, served)
    said = served or list(record.text_calls)
    valid_as_said = valid if said == served else check_calls(case, said)[0]
    return BfclVerdict(
        category=case.category, id=case.id, valid=valid, valid_as_said=valid_as_said, error_type=error_type
    )
