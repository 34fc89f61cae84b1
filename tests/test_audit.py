"""`orchestrate audit`: relabel generic-error turns of other harnesses' trajectories and recount.

The fixture tests/fixtures/audit/loca_run follows LOCA-bench's published layout (README "Output Structure":
tasks/<task>/state<N>/trajectory.json holding {"messages", "events", "metrics"}; here with a "tools" list too).
The folded text is the one LOCA-bench's inference/run_react.py writes: "Error: Failed to get response after
multiple retries." tests/fixtures/audit/plain/folded.jsonl adds the other text it folds into a message when the
server refuses a request (inference/run_react.py): "Error: Request failed with 400 status. Response: ...".
The figures below are computed by hand from the fixtures, never read back from the code.
"""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.analysis.audit.audit import (
    DEFAULT_PATTERN,
    FOLDED_REFUSAL_DETAIL,
    GENERIC_ERROR_DETAIL,
    FoldedPatterns,
    audit,
    label_turns,
)
from orchestrator.analysis.audit.trajectories import load_trajectories
from orchestrator.cli import app
from orchestrator.core.stats import BootstrapSettings, bootstrap_mean_interval, cell_stats, per_seed_fidelity
from orchestrator.core.types import Outcome, ToolsMode

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "audit"
LOCA = FIXTURES / "loca_run"
PLAIN = FIXTURES / "plain"
TOOLS_FILE = PLAIN / "tools.json"
GE = "Error: Failed to get response after multiple retries."

# Hand count, per seed (assistant turns in order; GE = generic error, prose = no call, empty = "" content):
#   ABTestingS2LEnv/state0      valid, valid, hallucinated (delete_file not offered), GE, valid
#       naive 3/5 (GE is prose, eligible)      corrected 3/4 (GE -> non_response, out of the denominator)
#   ABTestingS2LEnv/state1      prose, GE, GE, empty (non_response by the classifier), valid
#       naive 1/4 (empty is ineligible)        corrected 1/2
#   ABTestingS2LEnv/state2      GE, GE
#       naive 0/2 = 0                          corrected 0/0: undefined, left out of the mean
#   CanvasListTestS2LEnv/state0 valid, hallucinated (path: 5, wrong type), fenced JSON (unparseable in native), prose
#       naive 1/4                              corrected 1/4
#   CanvasListTestS2LEnv/state1 GE, valid, valid
#       naive 2/3                              corrected 2/2 = 1
# naive:     mean = (3/5 + 1/4 + 0 + 1/4 + 2/3) / 5 = (36 + 15 + 0 + 15 + 40)/60 / 5 = 106/300 = 53/150 (35.3%)
#            pooled = (3+1+0+1+2) / (5+4+2+4+3) = 7/18 (38.9%); 5 defined seeds
# corrected: mean = (3/4 + 1/2 + 1/4 + 1) / 4 = (5/2) / 4 = 5/8 (62.5%)
#            pooled = 7 / (4+2+0+4+2) = 7/12 (58.3%); 4 defined seeds
# turns 5+5+2+4+3 = 19; generic errors 1+2+2+0+1 = 6
# outcomes naive: valid 7, hallucinated 2, unparseable 1, prose 1+1+6 = 8, non_response 1 (the empty answer)
# outcomes corrected: prose 2, non_response 1+6 = 7, the rest unchanged
SEED_COUNTS = {  # seed: (naive valid, naive eligible, corrected valid, corrected eligible)
    "ABTestingS2LEnv/state0": (3, 5, 3, 4),
    "ABTestingS2LEnv/state1": (1, 4, 1, 2),
    "ABTestingS2LEnv/state2": (0, 2, 0, 0),
    "CanvasListTestS2LEnv/state0": (1, 4, 1, 4),
    "CanvasListTestS2LEnv/state1": (2, 3, 2, 2),
}
NAIVE_SEEDS = [Fraction(3, 5), Fraction(1, 4), Fraction(0), Fraction(1, 4), Fraction(2, 3)]  # in seed-id order
CORRECTED_SEEDS = [Fraction(3, 4), Fraction(1, 2), Fraction(1, 4), Fraction(1)]  # state2 undefined
NAIVE_MEAN, NAIVE_POOLED = Fraction(53, 150), Fraction(7, 18)
CORRECTED_MEAN, CORRECTED_POOLED = Fraction(5, 8), Fraction(7, 12)
OUTCOMES_NAIVE = {
    "valid_call": 7,
    "hallucinated_call": 2,
    "unparseable_text": 1,
    "no_call_prose": 8,
    "rejected_request": 0,
    "non_response": 1,
}
OUTCOMES_CORRECTED = {**OUTCOMES_NAIVE, "no_call_prose": 2, "non_response": 7}

runner = CliRunner()


def exact(value: float | None, fraction: Fraction) -> bool:
    """The float is the hand-computed fraction (correctly rounded): no other fraction with a small
    denominator lies that close."""
    return value is not None and Fraction(value).limit_denominator(10_000) == fraction


def load_tools() -> list[Any]:
    tools: list[Any] = json.loads(TOOLS_FILE.read_text())["tools"]
    return tools


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["audit", *args])


def assert_input_error(result: Any, *needles: str) -> None:
    """Exit 2, one clear line naming the file, and no traceback."""
    stderr = result.stderr
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in stderr, (needle, stderr)


# ------------------------------------------------------------------ the LOCA fixture, by hand


def test_loca_layout_is_read_one_seed_per_state() -> None:
    trajectories = load_trajectories(LOCA)
    assert [t.seed for t in trajectories] == list(SEED_COUNTS)  # task_mapping.json and eval.json are not seeds
    assert all(t.tools for t in trajectories)


def test_loca_figures_match_the_hand_count() -> None:
    report = audit(LOCA)
    counts = {r.seed: (r.naive_valid, r.naive_eligible, r.corrected_valid, r.corrected_eligible) for r in report.seeds}
    assert counts == SEED_COUNTS
    assert [r.n_generic_error for r in report.seeds] == [1, 2, 2, 0, 1]
    assert report.n_assistant_turns == 19 and report.n_generic_error == 6

    naive, corrected = report.naive, report.corrected
    assert exact(naive.per_seed_mean, NAIVE_MEAN) and exact(naive.pooled, NAIVE_POOLED)
    assert exact(corrected.per_seed_mean, CORRECTED_MEAN) and exact(corrected.pooled, CORRECTED_POOLED)
    assert (naive.n_valid, naive.n_eligible, naive.n_defined_seeds) == (7, 18, 5)
    assert (corrected.n_valid, corrected.n_eligible, corrected.n_defined_seeds) == (7, 12, 4)
    assert report.outcomes_naive == OUTCOMES_NAIVE and report.outcomes_corrected == OUTCOMES_CORRECTED
    undefined = next(r for r in report.seeds if r.seed == "ABTestingS2LEnv/state2")
    assert undefined.naive == 0.0 and undefined.corrected is None  # only generic errors: undefined, not 0


@pytest.mark.parametrize(
    ("which", "seed_values"), [("naive", NAIVE_SEEDS), ("corrected", CORRECTED_SEEDS)], ids=["naive", "corrected"]
)
def test_interval_is_the_seed_bootstrap_of_the_hand_values(which: str, seed_values: list[Fraction]) -> None:
    figures = getattr(audit(LOCA), which)
    expected = bootstrap_mean_interval(np.array([float(v) for v in seed_values]), BootstrapSettings())
    assert (figures.ci_low, figures.ci_high) == expected
    assert figures.ci_low <= figures.per_seed_mean <= figures.ci_high
    assert figures.ci_low < figures.ci_high  # the seeds differ: a real interval, not a point


def test_figures_agree_with_core_cell_stats() -> None:
    """The same relabelled turns through core/stats.cell_stats (what `orchestrate stats` uses) give the same
    mean, interval and pooled figure: the audit computes no fidelity of its own kind."""
    report = audit(LOCA)
    patterns = FoldedPatterns((GE,))
    labels = [t for tr in load_trajectories(LOCA) for t in label_turns(tr, tr.tools or [], ToolsMode.NATIVE, patterns)]
    for which, figures in (("naive", report.naive), ("corrected", report.corrected)):
        stats = cell_stats([t.seed for t in labels], [getattr(t, which).value for t in labels])
        assert stats.per_seed_mean == figures.per_seed_mean
        assert (stats.ci_low, stats.ci_high, stats.pooled) == (figures.ci_low, figures.ci_high, figures.pooled)


def test_per_seed_figures_are_core_per_seed_fidelity() -> None:
    """Each seed's figure is core/stats.per_seed_fidelity's, and equals the hand count."""
    report = audit(LOCA)
    patterns = FoldedPatterns((GE,))
    labels = [t for tr in load_trajectories(LOCA) for t in label_turns(tr, tr.tools or [], ToolsMode.NATIVE, patterns)]
    for which in ("naive", "corrected"):
        core = per_seed_fidelity([t.seed for t in labels], [getattr(t, which).value for t in labels])
        assert {r.seed: getattr(r, which) for r in report.seeds} == core
    for row in report.seeds:
        naive_valid, naive_eligible, corrected_valid, corrected_eligible = SEED_COUNTS[row.seed]
        assert exact(row.naive, Fraction(naive_valid, naive_eligible))
        assert (
            row.corrected is None
            if not corrected_eligible
            else exact(row.corrected, Fraction(corrected_valid, corrected_eligible))
        )


def test_generic_error_turns_are_relabelled_and_nothing_else() -> None:
    trajectory = next(t for t in load_trajectories(LOCA) if t.seed == "ABTestingS2LEnv/state1")
    labels = label_turns(trajectory, trajectory.tools or [], ToolsMode.NATIVE, FoldedPatterns())
    assert [t.naive for t in labels] == [
        Outcome.NO_CALL_PROSE,
        Outcome.NO_CALL_PROSE,  # the folded error, as a naive reading sees it
        Outcome.NO_CALL_PROSE,
        Outcome.NON_RESPONSE,  # empty answer: the classifier's own verdict, kept
        Outcome.VALID_CALL,
    ]
    assert [t.generic_error for t in labels] == [False, True, True, False, False]
    relabelled = [(t.folded, t.corrected, t.corrected_detail) for t in labels if t.generic_error]
    assert relabelled == [(Outcome.NON_RESPONSE, Outcome.NON_RESPONSE, GENERIC_ERROR_DETAIL)] * 2
    kept = [(t.naive, t.naive_detail) == (t.corrected, t.corrected_detail) for t in labels if not t.generic_error]
    assert all(kept)


def test_a_message_with_tool_calls_is_never_a_generic_error(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "claim_done", "arguments": "{}"}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "assistant", "content": GE, "tool_calls": [call]}]))
    report = audit(path, tools_file=TOOLS_FILE)
    assert report.n_generic_error == 0 and report.outcomes_corrected["valid_call"] == 1


def test_pattern_option_changes_what_is_relabelled() -> None:
    report = audit(LOCA, patterns=["no such text"])
    assert report.n_generic_error == 0
    assert report.outcomes_corrected == report.outcomes_naive
    assert report.patterns == ["no such text"] and report.rejected_patterns == []


# ------------------------------------------------------------------ folded refusals (--rejected-pattern)
# plain/folded.jsonl, tools from plain/tools.json; R400 = "Error: Request failed with 400 status. Response: ..."
#   line 1: valid (read_file), R400, GE, prose
#   line 2: R400, valid (list_courses), valid (claim_done), prose, R400
# naive (both texts are prose):  line 1 1/4, line 2 2/5
#     mean (1/4 + 2/5)/2 = (5/20 + 8/20)/2 = 13/40 (32.5%); pooled 3/9 = 1/3; prose 3 + 3 = 6
# default (R400 is prose, GE non_response):  line 1 1/3, line 2 2/5
#     mean (1/3 + 2/5)/2 = (5/15 + 6/15)/2 = 11/30; pooled 3/8; folded 1 (non_response 1)
# --rejected-pattern R400 (R400 rejected_request, GE non_response):  line 1 1/2, line 2 2/3
#     mean (1/2 + 2/3)/2 = (3/6 + 4/6)/2 = 7/12 (58.3%); pooled 3/5; folded 4 (non_response 1, rejected_request 3)
# --pattern R400 --pattern GE (both non_response): the same figures, non_response 4 and rejected_request 0

FOLDED = PLAIN / "folded.jsonl"
R400 = "Request failed with 400 status"
FOLDED_NAIVE = {"valid_call": 3, "hallucinated_call": 0, "unparseable_text": 0, "no_call_prose": 6}
FOLDED_NAIVE |= {"rejected_request": 0, "non_response": 0}


def folded_json(*args: str) -> dict[str, Any]:
    result = invoke(str(FOLDED), "--tools", str(TOOLS_FILE), "--json", *args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["n_seeds"] == 2 and data["n_assistant_turns"] == 9
    assert exact(data["naive"]["per_seed_mean"], Fraction(13, 40)) and exact(data["naive"]["pooled"], Fraction(1, 3))
    assert data["outcomes"]["naive"] == FOLDED_NAIVE
    return data


def test_refusal_text_is_prose_by_default() -> None:
    data = folded_json()
    assert data["n_generic_error"] == 1 and data["n_folded"] == {"non_response": 1, "rejected_request": 0}
    corrected = data["corrected"]
    assert exact(corrected["per_seed_mean"], Fraction(11, 30)) and exact(corrected["pooled"], Fraction(3, 8))
    assert data["patterns"] == [DEFAULT_PATTERN] and data["rejected_patterns"] == []


def test_rejected_pattern_relabels_refusals_as_rejected_request() -> None:
    data = folded_json("--rejected-pattern", R400)
    assert data["n_generic_error"] == 4 and data["n_folded"] == {"non_response": 1, "rejected_request": 3}
    corrected = data["corrected"]
    assert exact(corrected["per_seed_mean"], Fraction(7, 12)) and exact(corrected["pooled"], Fraction(3, 5))
    assert (corrected["n_valid"], corrected["n_eligible"], corrected["n_defined_seeds"]) == (3, 5, 2)
    expected = {**FOLDED_NAIVE, "no_call_prose": 2, "rejected_request": 3, "non_response": 1}
    assert data["outcomes"]["corrected"] == expected
    assert data["patterns"] == [DEFAULT_PATTERN] and data["rejected_patterns"] == [R400]
    seeds = {s["seed"]: s for s in data["seeds"]}
    assert seeds["folded.jsonl:1"]["n_folded"] == {"non_response": 1, "rejected_request": 1}
    assert seeds["folded.jsonl:2"]["n_folded"] == {"non_response": 0, "rejected_request": 2}
    assert exact(seeds["folded.jsonl:1"]["corrected"], Fraction(1, 2))
    assert exact(seeds["folded.jsonl:2"]["corrected"], Fraction(2, 3))


def test_pattern_is_repeatable() -> None:
    data = folded_json("--pattern", R400, "--pattern", DEFAULT_PATTERN)
    assert data["n_generic_error"] == 4 and data["n_folded"] == {"non_response": 4, "rejected_request": 0}
    corrected = data["corrected"]
    assert exact(corrected["per_seed_mean"], Fraction(7, 12)) and exact(corrected["pooled"], Fraction(3, 5))
    assert data["outcomes"]["corrected"] == {**FOLDED_NAIVE, "no_call_prose": 2, "non_response": 4}
    assert data["patterns"] == [R400, DEFAULT_PATTERN]


def test_refused_turns_carry_the_folded_refusal_detail() -> None:
    trajectory = load_trajectories(FOLDED)[0]
    labels = label_turns(trajectory, load_tools(), ToolsMode.NATIVE, FoldedPatterns((DEFAULT_PATTERN,), (R400,)))
    assert [(t.folded, t.corrected, t.corrected_detail) for t in labels] == [
        (None, Outcome.VALID_CALL, None),
        (Outcome.REJECTED_REQUEST, Outcome.REJECTED_REQUEST, FOLDED_REFUSAL_DETAIL),
        (Outcome.NON_RESPONSE, Outcome.NON_RESPONSE, GENERIC_ERROR_DETAIL),
        (None, Outcome.NO_CALL_PROSE, labels[3].naive_detail),
    ]
    assert all(t.naive in (Outcome.VALID_CALL, Outcome.NO_CALL_PROSE) for t in labels)


def test_a_rejected_pattern_wins_over_a_non_response_one() -> None:
    message = {"role": "assistant", "content": f"Error: {R400}. Response: {DEFAULT_PATTERN}"}
    assert FoldedPatterns((DEFAULT_PATTERN,), (R400,)).outcome(message) is Outcome.REJECTED_REQUEST
    assert FoldedPatterns((DEFAULT_PATTERN,), ()).outcome(message) is Outcome.NON_RESPONSE
    assert FoldedPatterns((), (R400,)).outcome({**message, "tool_calls": [{"id": "c"}]}) is None


def test_table_shows_refused_turns() -> None:
    result = invoke(str(FOLDED), "--tools", str(TOOLS_FILE), "--rejected-pattern", R400)
    assert result.exit_code == 0, result.output
    for text in ("32.5%", "58.3%", "2 (1 refused)", "2 (2 refused)", "1/2", "2/3"):
        assert text in result.stdout, text


# ------------------------------------------------------------------ the CLI


def test_cli_json_matches_the_hand_count() -> None:
    result = invoke(str(LOCA), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # ONE object for the whole PATH
    assert (data["n_seeds"], data["n_assistant_turns"], data["n_generic_error"]) == (5, 19, 6)
    assert exact(data["naive"]["per_seed_mean"], NAIVE_MEAN) and exact(data["naive"]["pooled"], NAIVE_POOLED)
    corrected = data["corrected"]
    assert exact(corrected["per_seed_mean"], CORRECTED_MEAN) and exact(corrected["pooled"], CORRECTED_POOLED)
    assert corrected["ci_low"] <= corrected["per_seed_mean"] <= corrected["ci_high"]
    assert (data["naive"]["n_defined_seeds"], corrected["n_defined_seeds"]) == (5, 4)
    assert data["outcomes"] == {"naive": OUTCOMES_NAIVE, "corrected": OUTCOMES_CORRECTED}
    assert data["n_folded"] == {"non_response": 6, "rejected_request": 0}
    assert data["patterns"] == [DEFAULT_PATTERN] and data["rejected_patterns"] == []
    assert data["mode"] == "native" and data["tools_source"] == "trajectory"
    assert data["bootstrap"] == {"resamples": 10_000, "rng_seed": BootstrapSettings().rng_seed}
    assert [s["corrected"] for s in data["seeds"]][2] is None


def test_cli_table_lists_both_figures_and_every_seed() -> None:
    result = invoke(str(LOCA))
    assert result.exit_code == 0, result.output
    for text in ("35.3%", "62.5%", "38.9%", "58.3%", "ABTestingS2LEnv/state2", "— (0/0)", "7/18", "7/12"):
        assert text in result.stdout, text


def test_cli_plain_json_with_tools_file() -> None:
    # [valid, GE, prose]: naive 1/3, corrected 1/2 (one seed: the interval is the point)
    result = invoke(str(PLAIN / "trajectory.json"), "--tools", str(TOOLS_FILE), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["n_seeds"], data["n_assistant_turns"], data["n_generic_error"]) == (1, 3, 1)
    assert exact(data["naive"]["per_seed_mean"], Fraction(1, 3)) and exact(data["corrected"]["pooled"], Fraction(1, 2))
    assert data["corrected"]["ci_low"] == data["corrected"]["ci_high"] == 0.5
    assert data["tools_source"] == f"file:{TOOLS_FILE}"


def test_cli_jsonl_one_message_per_line_is_one_seed() -> None:
    # [valid, valid, GE, GE]: naive 2/4, corrected 2/2
    result = invoke(str(PLAIN / "messages.jsonl"), "--tools", str(TOOLS_FILE), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["n_seeds"], data["n_assistant_turns"], data["n_generic_error"]) == (1, 4, 2)
    assert exact(data["naive"]["pooled"], Fraction(1, 2)) and exact(data["corrected"]["pooled"], Fraction(1))


def test_cli_jsonl_one_trajectory_per_line_in_text_tools_mode() -> None:
    # line 1 [text call read_file (valid), GE]: naive 1/2, corrected 1/1
    # line 2 [text call open_file (not offered: hallucinated), prose]: naive 0/2, corrected 0/2
    # naive mean (1/2 + 0)/2 = 1/4, pooled 1/4; corrected mean (1 + 0)/2 = 1/2, pooled 1/3
    path = PLAIN / "trajectories.jsonl"
    result = invoke(str(path), "--mode", "text-tools", "--tools", str(TOOLS_FILE), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["seed"] for s in data["seeds"]] == ["trajectories.jsonl:1", "trajectories.jsonl:3"]
    assert exact(data["naive"]["per_seed_mean"], Fraction(1, 4)) and exact(data["naive"]["pooled"], Fraction(1, 4))
    assert exact(data["corrected"]["per_seed_mean"], Fraction(1, 2))
    assert exact(data["corrected"]["pooled"], Fraction(1, 3))
    assert data["outcomes"]["naive"]["hallucinated_call"] == 1
    assert data["tools_source"] == "trajectory"  # each line's own list wins over --tools
    # In native mode the same text calls are not calls at all (the stack's parser left them in the text).
    native = json.loads(invoke(str(path), "--json").stdout)
    assert native["outcomes"]["naive"]["valid_call"] == 0 and native["outcomes"]["naive"]["unparseable_text"] == 2


# ------------------------------------------------------------------ bad input: exit 2, the file named, no traceback


def test_truncated_trajectory_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(LOCA, run)
    bad = run / "tasks" / "CanvasListTestS2LEnv" / "state1" / "trajectory.json"
    text = bad.read_text()
    for cut in (300, text.index('"tool_calls"') + 5, len(text) - 3):  # between values, inside a string, near the end
        bad.write_text(text[:cut])
        assert_input_error(invoke(str(run), "--json"), str(bad), "truncated JSON")


def test_invalid_json_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"messages": [}, "tools": []}')
    assert_input_error(invoke(str(path), "--tools", str(TOOLS_FILE)), str(path), "bad JSON")


def test_missing_messages(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"error": "boom", "total_steps": 3}))  # what LOCA-bench writes for a crashed run
    assert_input_error(invoke(str(path), "--tools", str(TOOLS_FILE)), str(path), "no 'messages' list", "boom")


def test_messages_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": {"role": "assistant"}}))
    assert_input_error(invoke(str(path), "--tools", str(TOOLS_FILE)), str(path), "'messages' is not a list")


@pytest.mark.parametrize(
    ("message", "needle"), [("hello", "not a message object"), ({"content": "hi"}, "has no 'role'")], ids=str
)
def test_bad_message(tmp_path: Path, message: Any, needle: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}, message], "tools": []}))
    assert_input_error(invoke(str(path), "--tools", str(TOOLS_FILE)), f"{path}: messages[1]", needle)


def test_jsonl_mixing_forms(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"messages": []}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert_input_error(invoke(str(path), "--tools", str(TOOLS_FILE)), f"{path}:3", "mixes forms")


def test_jsonl_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"role": "assistant", "content": "y"}) + "\n" + '{"role": "assis\n')
    assert_input_error(invoke(str(path), "--tools", str(TOOLS_FILE)), f"{path}:2", "JSON")


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "tasks" / "SomeTask").mkdir(parents=True)
    assert_input_error(invoke(str(tmp_path)), str(tmp_path), "no trajectory files")


def test_no_tools_anywhere() -> None:
    path = PLAIN / "trajectory.json"
    assert_input_error(invoke(str(path)), str(path), "no tools", "--tools")


@pytest.mark.parametrize(
    ("content", "needle"),
    [('{"tools": {"read_file": {}}}', "not a list"), ("[]", "lists no tools"), ('[{"x": 1}]', "tools[0]")],
    ids=["tools-not-a-list", "empty", "no-name"],
)
def test_bad_tools_file(tmp_path: Path, content: str, needle: str) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(content)
    assert_input_error(invoke(str(PLAIN / "trajectory.json"), "--tools", str(tools)), str(tools), needle)


def test_tools_in_trajectory_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": [], "tools": "read_file"}))
    assert_input_error(invoke(str(path)), str(path), "'tools' is not a list")


def test_unreadable_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope[1].json"  # brackets: printed as text, never read as rich markup
    assert_input_error(invoke(str(missing), "--tools", str(TOOLS_FILE)), str(missing), "cannot read")


@pytest.mark.parametrize("option", ["--pattern", "--rejected-pattern"])
def test_empty_pattern_is_refused(option: str) -> None:
    assert_input_error(invoke(str(LOCA), option, "x", option, "  "), option, "empty")


# ------------------------------------------------------------------ offered tools are checked up front

READ_FILE = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("tool", "needles"),
    [
        ({"type": "function", "function": {"name": ["read_file"]}}, ("name is not a non-empty string", "list")),
        ({"type": "function", "function": {"name": "  "}}, ("name is not a non-empty string",)),
        ({"type": "function", "function": "read_file"}, ("not a tool object",)),
        ("read_file", ("not a tool object",)),
        ({"function": {"name": "f", "parameters": {"type": "objekt"}}}, ("'f'", "not a valid JSON Schema", "$.type")),
        (
            {"function": {"name": "f", "parameters": {"properties": {"p": {"pattern": "("}}}}},
            ("not a valid JSON Schema",),
        ),
        ({"function": {"name": "f", "parameters": []}}, ("'parameters' is not a JSON object",)),
        ({"function": {"name": "f", "parameters": None}}, ("'parameters' is not a JSON object",)),
        ({"function": {"name": "f", "parameters": {"$schema": 5}}}, ("no usable metaschema",)),
    ],
    ids=[
        "name-list",
        "name-blank",
        "function-str",
        "tool-str",
        "bad-type",
        "bad-regex",
        "params-list",
        "params-null",
        "schema-int",
    ],
)
def test_bad_tool_in_tools_file(tmp_path: Path, tool: Any, needles: tuple[str, ...]) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps({"tools": [READ_FILE, tool]}))
    result = invoke(str(PLAIN / "trajectory.json"), "--tools", str(tools), "--json")
    assert_input_error(result, f"{tools}: tools[1]", *needles)


def test_bad_tool_in_a_loca_trajectory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(LOCA, run)
    bad = run / "tasks" / "ABTestingS2LEnv" / "state1" / "trajectory.json"
    data = json.loads(bad.read_text())
    data["tools"][2]["function"]["name"] = ["claim_done"]
    bad.write_text(json.dumps(data))
    assert_input_error(invoke(str(run), "--json"), f"{bad}: tools[2]", "name is not a non-empty string")
    data["tools"][2]["function"]["name"] = "claim_done"
    data["tools"][0]["function"]["parameters"]["properties"]["path"]["type"] = "strin"
    bad.write_text(json.dumps(data))
    assert_input_error(invoke(str(run)), f"{bad}: tools[0] ('read_file')", "not a valid JSON Schema")


def test_bad_tool_on_a_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = {"messages": [{"role": "assistant", "content": "hi"}], "tools": [READ_FILE]}
    bad = {**good, "tools": [READ_FILE, {"function": {"name": "f", "parameters": {"required": "path"}}}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    assert_input_error(invoke(str(path)), f"{path}:2: tools[1] ('f')", "not a valid JSON Schema")


def test_tools_without_parameters_or_with_a_known_draft_are_accepted(tmp_path: Path) -> None:
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "items": [{}]}
    tools = [{"type": "function", "function": {"name": "claim_done"}}, {"name": "read_file", "parameters": draft7}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    result = invoke(str(PLAIN / "trajectory.json"), "--tools", str(path), "--json")
    assert result.exit_code == 0, result.output
