"""Scoring of the model and product channels (core/scoring.py): expectations, subset argument matching,
unscored runs and the majority vote. Records are built as the dicts turns.jsonl holds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.core.scoring import (
    Expectation,
    ExpectedCall,
    RunScore,
    applicable_dimensions,
    arguments_match,
    majority,
    score_model_run,
    score_product_run,
    vote_case,
)


def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments, "id": None}


def execution(tool: str, /, sent: bool = True, **arguments: Any) -> dict[str, Any]:
    return {"call": call(tool, **arguments), "result": {"ok": True}, "error": False, "sent": sent}


def event(guard: str, fired: bool = True, changed: bool = False) -> dict[str, Any]:
    return {"guard": guard, "fired": fired, "changed": changed, "before": None, "after": None}


def record(
    seed: str = "s1",
    *,
    channel: str = "product",
    turn: int = 0,
    attempt: int = 0,
    sample: int = 0,
    without: str | None = None,
    suite: str = "formation",
    model: str = "qwen",
    stack_config: str = "llamacpp-jinja",
    tools_mode: str = "text-tools",
    calls: list[dict[str, Any]] | None = None,
    raw_content: str | None = None,
    executions: list[dict[str, Any]] | None = None,
    guard_events: list[dict[str, Any]] | None = None,
    end: str | None = None,
    final_answer: str | None = None,
    superseded: bool = False,
) -> dict[str, Any]:
    """A turn record as turns.jsonl holds it, with only the fields scoring reads set to something telling."""
    cell_id = f"{stack_config}__{model}__{tools_mode}__channel-{channel}"
    cell_id += (f"__sample-{sample}" if sample else "") + (f"__without-{without}" if without else "")
    return {
        "run_id": "run-1",
        "cell_id": cell_id,
        "seed": seed,
        "suite": suite,
        "turn": turn,
        "attempt": attempt,
        "sample": sample,
        "model": model,
        "stack": stack_config.split("-")[0],
        "stack_config": stack_config,
        "tools_mode": tools_mode,
        "outcome": "valid_call" if calls else "no_call_prose",
        "detail": None,
        "raw_content": raw_content,
        "calls": calls or [],
        "flags": [],
        "superseded": superseded,
        "end": end,
        "channel": channel,
        "without": without,
        "executions": executions or [],
        "guard_events": guard_events or [],
        "prompted_by": None,
        "final_answer": final_answer,
    }


def first_answer(calls: list[dict[str, Any]] | None = None, text: str | None = None, **fields: Any) -> dict[str, Any]:
    return record(channel="model", calls=calls, raw_content=text, end="first_answer", **fields)


FORM = Expectation(call=ExpectedCall(tool="form_company", arguments={"name": "Acme", "state": "DE"}))
FORM_AND_ANSWER = Expectation(call=ExpectedCall(tool="form_company"), answer=["C-1042", "order 1042"])
ASK = Expectation(ask_user=True)
CHAT = Expectation(chat=True)


# ---- expectations ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "at least one of"),
        ({"ask_user": True, "chat": True}, "exclude each other"),
        ({"call": {"tool": "t"}, "chat": True}, "exclude call"),
        ({"call": {"tool": "t"}, "ask_user": True}, "exclude call"),
        ({"answer": []}, "at least one alternative"),
        ({"chat": True, "tone": "warm"}, "Extra inputs"),
    ],
)
def test_incoherent_expectations_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Expectation.model_validate(fields)


def test_applicable_dimensions_differ_by_channel() -> None:
    assert applicable_dimensions(FORM, "model") == ("tool", "args")
    assert applicable_dimensions(FORM, "product") == ("tool", "args")
    assert applicable_dimensions(FORM_AND_ANSWER, "model") == ("tool",)  # a first answer holds no tool result
    assert applicable_dimensions(FORM_AND_ANSWER, "product") == ("tool", "answer")
    assert applicable_dimensions(Expectation(answer="42"), "model") == ()
    assert applicable_dimensions(ASK, "model") == ("tool", "answer")
    assert applicable_dimensions(CHAT, "product") == ("tool", "answer")


# ---- argument matching -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ({"name": "Acme"}, {"name": "  acme ", "state": "DE"}, True),  # casefold + strip; extra keys allowed
        ({"name": "Acme", "state": "DE"}, {"name": "Acme"}, False),  # an expected key is missing
        ({"shares": 1}, {"shares": 1.0}, True),
        ({"shares": 600}, {"shares": "600"}, False),  # a string is not a number
        ({"shares": "600"}, {"shares": 600}, False),
        ({"shares": 1}, {"shares": True}, False),  # a bool is not a number
        ({"public": True}, {"public": 1}, False),
        ({"note": None}, {"note": None}, True),
        ({"note": None}, {"note": "null"}, False),
        ({"tags": ["a", "B"]}, {"tags": ["A", "b"]}, True),
        ({"tags": ["a", "b"]}, {"tags": ["a"]}, False),  # lists: same length
        ({"tags": ["a", "b"]}, {"tags": ["b", "a"]}, False),  # element-wise, in order
        ({"state": {"any_of": ["DE", "Delaware"]}}, {"state": "delaware"}, True),
        ({"state": {"any_of": ["DE", "Delaware"]}}, {"state": "NV"}, False),
        ({"shares": {"any_of": [100, "hundred"]}}, {"shares": 100.0}, True),
        ({"agent": {"name": "Bob"}}, {"agent": {"name": "bob", "id": 7}}, True),  # nested subset
        ({"agent": {"name": "Bob"}}, {"agent": "Bob"}, False),
        ({"any_of": [{"a": 1}, {"b": 2}]}, {"b": 2, "c": 3}, True),  # any_of at the top level
        ({"name": "Acme"}, None, False),  # arguments that did not decode
    ],
)
def test_arguments_match_is_a_recursive_subset(expected: Any, actual: Any, matches: bool) -> None:
    assert arguments_match(expected, actual) is matches


# ---- the model channel -----------------------------------------------------------------------------------


def test_model_channel_scores_the_first_call() -> None:
    right = score_model_run([first_answer([call("form_company", name="acme", state="DE", shares=10)])], FORM)
    assert right.scores == {"tool": True, "args": True, "answer": None}
    wrong_args = score_model_run([first_answer([call("form_company", name="Acme", state="NV")])], FORM)
    assert wrong_args.scores == {"tool": True, "args": False, "answer": None}
    # The right call second is not the model's answer: the first call decides.
    second = score_model_run(
        [first_answer([call("lookup", name="Acme"), call("form_company", name="Acme", state="DE")])], FORM
    )
    assert second.scores == {"tool": False, "args": False, "answer": None}
    prose = score_model_run([first_answer(text="I will form it.")], FORM)
    assert prose.scores == {"tool": False, "args": False, "answer": None}


def test_model_channel_reads_the_last_attempt_of_the_first_turn() -> None:
    retried = record(channel="model", attempt=0, calls=[])  # a retried attempt (no end), then the answer
    answered = first_answer([call("form_company", name="Acme", state="DE")], attempt=1)
    assert score_model_run([answered, retried], FORM).scores["tool"] is True  # order of the records is no matter


def test_model_channel_scores_no_tool_answer_for_a_tool_needing_answer() -> None:
    scored = score_model_run([first_answer([call("form_company")])], FORM_AND_ANSWER)
    assert scored.scores == {"tool": True, "args": None, "answer": None}


@pytest.mark.parametrize(
    ("calls", "text", "expected"),
    [
        ([], "Which state should I form it in?", {"tool": True, "args": None, "answer": True}),
        ([], "I will form it in Delaware.", {"tool": True, "args": None, "answer": False}),
        ([call("form_company", name="Acme")], "Which state?", {"tool": False, "args": None, "answer": False}),
    ],
)
def test_model_channel_ask_user(calls: list[dict[str, Any]], text: str, expected: dict[str, Any]) -> None:
    assert score_model_run([first_answer(calls, text)], ASK).scores == expected


@pytest.mark.parametrize(
    ("text", "answer"),
    [("Hello! How can I help today?", True), ('{"reply": "hello"}', False), ("   ", False), (None, False)],
)
def test_model_channel_chat(text: str | None, answer: bool) -> None:
    assert score_model_run([first_answer([], text)], CHAT).scores == {"tool": True, "args": None, "answer": answer}


# ---- the product channel ---------------------------------------------------------------------------------


def product_run(executions: list[dict[str, Any]], final: str | None, **fields: Any) -> list[dict[str, Any]]:
    """A two-turn product run: the call(s) executed on turn 0, the final answer on turn 1."""
    return [
        record(turn=0, executions=executions, **fields),
        record(turn=1, end="answered", final_answer=final, **fields),
    ]


def test_product_channel_scores_what_the_tool_server_received() -> None:
    sent = product_run([execution("lookup", name="Acme"), execution("form_company", name="ACME", state="de")], "ok")
    assert score_product_run(sent, FORM).scores == {"tool": True, "args": True, "answer": None}
    held_back = product_run([execution("form_company", sent=False, name="Acme", state="DE")], "ok")
    assert score_product_run(held_back, FORM).scores == {"tool": False, "args": False, "answer": None}
    # Args match on some executed call to that tool, not necessarily the first.
    retried = product_run(
        [execution("form_company", name="Acme", state="NV"), execution("form_company", name="Acme", state="DE")], "ok"
    )
    assert score_product_run(retried, FORM).scores["args"] is True
    other_tool = product_run([execution("lookup", name="Acme", state="DE")], "ok")
    assert score_product_run(other_tool, FORM).scores["args"] is False


@pytest.mark.parametrize(
    ("final", "answer"),
    [
        ("Done: your company is registered as\n  c-1042.", True),
        ("Your  ORDER   1042 is placed.", True),
        ("Your order is placed.", False),
        (None, False),
    ],
)
def test_product_channel_answer_is_a_normalised_substring(final: str | None, answer: bool) -> None:
    scored = score_product_run(product_run([execution("form_company")], final), FORM_AND_ANSWER)
    assert scored.scores == {"tool": True, "args": None, "answer": answer}


def test_product_channel_answer_only_case() -> None:
    scored = score_product_run(
        product_run([execution("md5", text="hi")], "49f68a5c8493ec2c0bf489821c21fc3b"),
        Expectation(answer="49F68A5C8493EC2C0BF489821C21FC3B"),
    )
    assert scored.scores == {"tool": None, "args": None, "answer": True}


def test_product_channel_ask_user_and_chat() -> None:
    asked = [record(end="answered", final_answer="Which state should I use?")]
    assert score_product_run(asked, ASK).scores == {"tool": True, "args": None, "answer": True}
    acted = product_run([execution("form_company", name="Acme")], "Which state should I use?")
    assert score_product_run(acted, ASK).scores == {"tool": False, "args": None, "answer": False}
    chatted = [record(end="answered", final_answer="Hi there!")]
    assert score_product_run(chatted, CHAT).scores == {"tool": True, "args": None, "answer": True}
    json_final = [record(end="answered", final_answer='```json\n{"greeting": "hi"}\n```')]
    assert score_product_run(json_final, CHAT).scores == {"tool": True, "args": None, "answer": False}


def test_the_same_first_answer_can_fail_the_model_and_pass_the_product() -> None:
    """A JSON first answer fails chat in the model channel; the product's guard rewrote the final answer."""
    model = score_model_run([first_answer([], '{"reply": "hi"}')], CHAT)
    product = score_product_run([record(raw_content='{"reply": "hi"}', end="answered", final_answer="hi")], CHAT)
    assert model.scores["answer"] is False
    assert product.scores["answer"] is True


# ---- unscored runs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["rejected", "context_overflow", "retries_exhausted", "server_died", "template_error"])
def test_a_run_the_stack_cut_short_is_unscored(end: str) -> None:
    run = [record(executions=[execution("form_company", name="Acme", state="DE")], end=end)]
    scored = score_product_run(run, FORM)
    assert scored.unscored is True
    assert [scored.vote(d) for d in ("tool", "args", "answer")] == [None, None, None]
    model = score_model_run([record(channel="model", calls=[call("form_company")], end=end)], FORM)
    assert model.unscored is True


def test_a_run_without_an_end_is_unscored() -> None:
    assert score_product_run([record(executions=[execution("form_company")])], FORM).unscored is True
    assert score_model_run([record(channel="model", calls=[call("form_company")])], FORM).unscored is True
    assert score_product_run([], FORM).unscored is True


@pytest.mark.parametrize("end", ["stalled", "short_circuit", "turn_cap", "loop", "empty"])
def test_model_made_ends_are_scored(end: str) -> None:
    scored = score_product_run([record(executions=[execution("form_company", name="Acme", state="DE")], end=end)], FORM)
    assert scored.unscored is False
    assert scored.scores["tool"] is True


def test_superseded_records_are_ignored() -> None:
    died = record(executions=[execution("form_company", name="Acme", state="DE")], end="server_died", superseded=True)
    rerun = record(executions=[execution("lookup", name="Acme")], end="answered", final_answer="done")
    scored = score_product_run([died, rerun], FORM)
    assert scored.unscored is False  # the superseded end does not make the run unscored
    assert scored.scores["tool"] is False  # and its execution was not the rerun's
    only_superseded = [record(executions=[execution("form_company")], end="answered", superseded=True)]
    assert score_product_run(only_superseded, FORM).unscored is True


# ---- majority vote ---------------------------------------------------------------------------------------


def test_majority_vote() -> None:
    assert majority([True, True, False]).model_dump() == {"passed": True, "tie": False, "n_pass": 2, "n_votes": 3}
    assert majority([True, False, False]).model_dump() == {"passed": False, "tie": False, "n_pass": 1, "n_votes": 3}
    tie = majority([True, False])
    assert (tie.passed, tie.tie, tie.unscored) == (False, True, False)
    empty = majority([])
    assert (empty.passed, empty.tie, empty.unscored, empty.n_votes) == (False, False, True, 0)


def test_an_unscored_sample_is_no_vote() -> None:
    passing = RunScore(scores={"tool": True, "args": None, "answer": None})
    failing = RunScore(scores={"tool": False, "args": None, "answer": None})
    cut_short = RunScore(scores={"tool": None, "args": None, "answer": None}, unscored=True)
    tied = vote_case([passing, failing, cut_short], "tool")
    assert (tied.passed, tied.tie, tied.n_pass, tied.n_votes) == (False, True, 1, 2)
    assert vote_case([cut_short, cut_short, cut_short], "tool").unscored is True
    assert vote_case([passing, passing, failing], "args").unscored is True  # args applies to none of them
