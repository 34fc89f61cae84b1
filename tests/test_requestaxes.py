"""The report's request-semantics tables on hand-built records, figures computed by hand."""

from __future__ import annotations

from orchestrator.analysis.report.requestaxes import constraint_table, divergence_markers, stream_pairs
from orchestrator.core.stats import BootstrapSettings

SETTINGS = BootstrapSettings(resamples=2000, rng_seed=1)
BASE = {"stack_label": "s", "model": "m", "tools_mode": "native", "decoding": {"temperature": 1.0, "seed": 7}}


def turn(cell: str, seed: str, outcome: str, turn_no: int = 0, **extra: object) -> dict:
    return {"cell_id": cell, "seed": seed, "turn": turn_no, "attempt": 0, "outcome": outcome, "raw_content": "x",
            "calls": [], **extra}


def test_stream_pairs_divergence_failures_apart_and_paired_fidelity() -> None:
    cells = {"p": {**BASE, "cell_id": "p", "stream": False}, "q": {**BASE, "cell_id": "q", "stream": True}}
    by_cell = {
        "p": [turn("p", "1", "valid_call"), turn("p", "2", "valid_call"), turn("p", "3", "valid_call"),
              turn("p", "1", "valid_call", 1)],
        "q": [turn("q", "1", "valid_call", calls=[]), turn("q", "2", "no_call_prose"),
              turn("q", "3", "non_response", error={"type": "stream_stalled"})],
    }
    row = stream_pairs(cells, by_cell, SETTINGS).iloc[0]
    assert (row.n_seeds_paired, row.n_seeds_compared, row.n_failed_one_side) == (3, 2, 1)
    assert row.n_diverged == 1 and row.divergence == 0.5 and row.divergence_lo == 0.0 and row.divergence_hi == 1.0
    # Fidelity per seed: plain 1, 1, 1; stream 1, 0, undefined (no eligible turn): paired seeds 1 and 2.
    assert row.n_seeds_fidelity == 2 and row.delta == -0.5
    assert row.stack_finding  # a fixed sampling seed, and the answered first turns differ
    assert divergence_markers(stream_pairs(cells, by_cell, SETTINGS)) == {"q": " div1/2"}


def test_an_unpaired_cell_gives_no_row_and_ids_do_not_make_answers_differ() -> None:
    cells = {"p": {**BASE, "cell_id": "p", "stream": False}, "q": {**BASE, "cell_id": "q", "stream": True}}
    call = {"name": "f", "arguments": {"a": 1}}
    by_cell = {"p": [turn("p", "1", "valid_call", calls=[{**call, "id": "x1"}])],
               "q": [turn("q", "1", "valid_call", calls=[{**call, "id": "y2"}])]}
    row = stream_pairs(cells, by_cell, SETTINGS).iloc[0]
    assert row.n_same_first_answer == 1 and row.n_diverged == 0 and not row.stack_finding
    assert stream_pairs({"p": cells["p"]}, by_cell, SETTINGS).empty


def test_constraint_compliance_per_seed_mean_and_pooled() -> None:
    cells = {"r": {**BASE, "cell_id": "r", "tool_choice": "required"}, "a": {**BASE, "cell_id": "a"}}
    by_cell = {"r": [
        turn("r", "1", "valid_call", constraint_honoured=True),
        turn("r", "1", "no_call_prose", 1, constraint_honoured=False, flags=["constraint:required_ignored"]),
        turn("r", "2", "valid_call", constraint_honoured=True),
        turn("r", "2", "valid_call", 1, constraint_honoured=True),
        turn("r", "3", "rejected_request", constraint_honoured=None),
    ]}
    table = constraint_table(cells, by_cell, SETTINGS)
    assert list(table.cell_id) == ["r"]  # the auto cell asked nothing
    row = table.iloc[0]
    assert (row.n_turns_judged, row.n_seeds_judged) == (4, 2)
    assert row.honoured == 0.75 and row.honoured_pooled == 0.75  # seeds 1/2 and 2/2
    assert (row.honoured_lo, row.honoured_hi) == (0.5, 1.0)
    assert row.breaches == "constraint:required_ignored:1"


def test_a_seed_whose_cache_was_not_cleared_is_not_compared_even_on_its_retried_attempt() -> None:
    """As recorded in the stream-cpu example (llama.cpp, ops-03): the slot erase timed out, the first attempt
    timed out too, the retry answered differently from the plain path on a cache an earlier seed left."""
    cells = {"p": {**BASE, "cell_id": "p", "stream": False}, "q": {**BASE, "cell_id": "q", "stream": True}}
    by_cell = {
        "p": [turn("p", "1", "valid_call"), turn("p", "2", "valid_call")],
        "q": [turn("q", "1", "valid_call"),
              turn("q", "2", "non_response", error={"type": "timeout"}, flags=["cache:not_cleared"]),
              {**turn("q", "2", "unparseable_text", raw_content="other"), "attempt": 1}],
    }
    row = stream_pairs(cells, by_cell, SETTINGS).iloc[0]
    assert (row.n_seeds_paired, row.n_seeds_compared, row.n_cache_not_cleared, row.n_failed_one_side) == (2, 1, 1, 0)
    assert row.n_diverged == 0 and not row.stack_finding
    # Without the flag the retried attempt is the seed's first answer; sent with the retry's own sampling seed,
    # it is not the plain path's request and is counted apart; under the same seed it is compared, and diverges.
    by_cell["q"][1] = turn("q", "2", "non_response", error={"type": "timeout"})
    by_cell["q"][2]["sampling_seed"], by_cell["p"][1]["sampling_seed"] = 8, 7
    row = stream_pairs(cells, by_cell, SETTINGS).iloc[0]
    assert (row.n_seeds_compared, row.n_other_sampling_seed, row.n_cache_not_cleared) == (1, 1, 0)
    by_cell["q"][2]["sampling_seed"] = 7
    row = stream_pairs(cells, by_cell, SETTINGS).iloc[0]
    assert (row.n_seeds_compared, row.n_diverged, row.n_other_sampling_seed) == (2, 1, 0)


def test_a_required_turn_cut_at_max_tokens_without_a_call_is_unjudged() -> None:
    from orchestrator.core.constraints import RequestSemantics, check_constraints
    from orchestrator.core.types import Classification, Outcome

    required = RequestSemantics(tool_choice="required")
    prose = Classification(outcome=Outcome.NO_CALL_PROSE, detail="prose:no_call", parse_path="server",
                           finish_reason="stop")
    cut = prose.model_copy(update={"finish_reason": "length"})
    assert check_constraints(prose, required).constraint_honoured is False
    judged = check_constraints(cut, required)
    assert judged.constraint_honoured is None and judged.flags == ["constraint:unjudged_truncated"]
    # parallel_tool_calls: false broken by two calls stays a breach even when the answer was cut
    two = [{"function": {"name": "f"}}, {"function": {"name": "g"}}]
    both = RequestSemantics(tool_choice="required", parallel_tool_calls=False)
    many = cut.model_copy(update={"raw_tool_calls": two})
    assert check_constraints(many, both).constraint_honoured is False
    cells = {"r": {**BASE, "cell_id": "r", "tool_choice": "required"}}
    rows = [turn("r", "1", "no_call_prose", constraint_honoured=None, flags=["constraint:unjudged_truncated"]),
            turn("r", "2", "valid_call", constraint_honoured=True)]
    row = constraint_table(cells, {"r": rows}, SETTINGS).iloc[0]
    assert (row.n_turns_judged, row.n_turns_unjudged_truncated, row.honoured) == (1, 1, 1.0)
    assert row.breaches == "constraint:unjudged_truncated:1"
