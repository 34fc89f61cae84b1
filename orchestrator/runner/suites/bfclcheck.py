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
)
from orchestrator.core.types import Outcome, ParsedCall
from orchestrator.runner.suites.bfclpackage import CHECKER_MODEL, checker_module, python_language

CHECKER_RAISED = "toolcall_matrix:checker_raised"  # BFCL's checker raised on these calls: a failure, named


def check_calls(case: BfclCase, calls: Sequence[ParsedCall]) -> tuple[bool, str | None]:
    """(valid, BFCL's error type when not valid) for the calls of one answer to the case."""
    if case.category in IRRELEVANCE_CATEGORIES or case.category in RELEVANCE_CATEGORIES:
        return relevance_verdict(case.category, calls)
    if not calls:  # BFCL's evaluator: the answer does not decode to a call
        return False, DECODER_FAILED
    shaped = model_output(calls, original_names(case.function))
    try:
        result = checker_module().ast_checker(
            copy.deepcopy(case.function),
            shaped,
            copy.deepcopy(case.ground_truth),
            python_language(),
            case.category,
            CHECKER_MODEL,
        )
    except Exception as exc:  # model-written values the checker cannot compare: the answer fails, said so
        return False, f"{CHECKER_RAISED}:{type(exc).__name__}"
    valid = bool(result.get("valid"))
    return valid, None if valid else str(result.get("error_type"))  # a valid result can carry a stale type


def turn_verdict(
    case: BfclCase, outcome: Outcome | str, calls: Sequence[ParsedCall], text_calls: Sequence[ParsedCall]
) -> BfclVerdict:
    """The turn's verdict as served (`calls`: what the serving path delivered) and as said (the served calls,
    or, where none were delivered, those the recognisers read in the text)."""
    if not has_verdict(outcome):
        return BfclVerdict(category=case.category, id=case.id, valid=None, valid_as_said=None)
    valid, error_type = check_calls(case, calls)
    said = list(calls) or list(text_calls)
    valid_as_said = valid if said == list(calls) else check_calls(case, said)[0]
    return BfclVerdict(
        category=case.category, id=case.id, valid=valid, valid_as_said=valid_as_said, error_type=error_type
    )
