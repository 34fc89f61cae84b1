"""The channel table (analysis/product/channelverdicts.py), release gates (analysis/product/gate.py) and the guard
ablation (analysis/product/guardeffects.py), on constructed turn records and verdicts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from orchestrator.analysis.product.channelverdicts import CaseVerdict, case_verdicts, channel_table, render_markdown
from orchestrator.analysis.product.gate import GateError, evaluate_gates, format_gate_results, gates_passed, parse_gate
from orchestrator.analysis.product.guardeffects import AblationRow, ablation_rows, render_ablation_markdown
from orchestrator.core.scoring import Expectation, ExpectedCall
from orchestrator.core.stats import BootstrapSettings
from tests.test_scoring import call, event, execution, record

FORM = Expectation(call=ExpectedCall(tool="form_company", arguments={"state": "DE"}), answer="C-1042")
ASK = Expectation(ask_user=True)
SETTINGS = BootstrapSettings(resamples=4000, rng_seed=7)


def model_sample(seed: str, sample: int, right: bool, end: str = "first_answer") -> dict[str, Any]:
    calls = [call("form_company", state="DE" if right else "NV")]
    return record(seed, channel="model", sample=sample, calls=calls, end=end)


def product_sample(
    seed: str,
    sample: int = 0,
    *,
    answer_right: bool = True,
    without: str | None = None,
    end: str = "answered",
    events: list[dict[str, Any]] | None = None,
    model: str = "qwen",
    superseded: bool = False,
) -> dict[str, Any]:
    """A one-record product run that sent form_company(state=DE) and answered right or wrong."""
    return record(
        seed,
        sample=sample,
        without=without,
        model=model,
        executions=[execution("form_company", state="DE")],
        guard_events=events,
        end=end,
        final_answer="Registered as C-1042." if answer_right else "Registered.",
        superseded=superseded,
    )


# ---- the channel table -----------------------------------------------------------------------------------


def channel_records() -> list[dict[str, Any]]:
    asked = "Which state should I use?"
    return [
        # s1 (FORM): the model's first call is right in 2 of 3 samples; the product is right in all three.
        *(model_sample("s1", i, right) for i, right in enumerate([True, False, True])),
        *(product_sample("s1", i) for i in range(3)),
        # s2 (ASK): one sample asks, one calls, one the stack cut short: a 1-1 tie, which fails.
        record("s2", channel="model", sample=0, raw_content=asked, end="first_answer"),
        record("s2", channel="model", sample=1, calls=[call("form_company")], end="first_answer"),
        record("s2", channel="model", sample=2, raw_content=asked, end="server_died"),
        *(record("s2", sample=i, end="answered", final_answer=asked) for i in range(3)),
        # s3 (FORM): the product channel never got a scored sample.
        *(product_sample("s3", i, end="context_overflow") for i in range(3)),
        # An ablation run and an agent-loop record: neither is in the side-by-side table.
        *(product_sample("s1", i, answer_right=False, without="final_json") for i in range(3)),
        {**record("s1", end="submitted"), "channel": None},
    ]


EXPECTATIONS = {("formation", "s1"): FORM, ("formation", "s2"): ASK, ("formation", "s3"): FORM}


def test_case_verdicts_vote_per_dimension() -> None:
    verdicts = case_verdicts(channel_records(), EXPECTATIONS, core={("formation", "s1")})
    by_key = {(v.channel, v.without, v.seed, v.dimension): v for v in verdicts}
    assert set(by_key) == {
        ("model", None, "s1", "tool"),
        ("model", None, "s1", "args"),
        ("model", None, "s2", "tool"),
        ("model", None, "s2", "answer"),
        *(("product", None, seed, d) for seed in ("s1", "s3") for d in ("tool", "args", "answer")),
        ("product", None, "s2", "tool"),
        ("product", None, "s2", "answer"),
        *(("product", "final_json", "s1", d) for d in ("tool", "args", "answer")),
    }
    model_args = by_key["model", None, "s1", "args"]
    assert (model_args.passed, model_args.n_pass, model_args.n_votes, model_args.core) == (True, 2, 3, True)
    tie = by_key["model", None, "s2", "answer"]
    assert (tie.passed, tie.tie, tie.n_pass, tie.n_votes, tie.n_samples, tie.core) == (False, True, 1, 2, 3, False)
    cut = by_key["product", None, "s3", "tool"]
    assert (cut.passed, cut.unscored, cut.n_votes) == (False, True, 0)
    assert by_key["product", "final_json", "s1", "answer"].passed is False


def test_a_case_without_an_expectation_is_not_scored() -> None:
    verdicts = case_verdicts(channel_records(), {("formation", "s1"): FORM})
    assert {v.seed for v in verdicts} == {"s1"}


def test_channel_table_and_markdown() -> None:
    core = {("formation", "s1"), ("formation", "s2")}
    rows = channel_table(case_verdicts(channel_records(), EXPECTATIONS), core)
    figures = {(r.channel, r.without, r.dimension): r for r in rows}
    model_tool = figures["model", None, "tool"]
    assert (model_tool.passes, model_tool.applicable, model_tool.ties, model_tool.unscored) == (1, 2, 1, 0)
    assert (model_tool.core_passes, model_tool.core_applicable) == (1, 2)
    product_args = figures["product", None, "args"]
    assert (product_args.passes, product_args.applicable, product_args.unscored) == (1, 2, 1)
    assert (product_args.core_passes, product_args.core_applicable, product_args.core_unscored) == (1, 1, 0)
    assert figures["product", "final_json", "answer"].passes == 0

    table = render_markdown(rows).splitlines()
    assert table[0].startswith("| stack | model | mode | suite | model tool | model args | model answer | product tool")
    assert len(table) == 3  # header, rule, one row: the ablation run is not in the table
    cells = [cell.strip() for cell in table[2].strip("|").split("|")]
    assert cells[:4] == ["llamacpp-jinja", "qwen", "text-tools", "formation"]
    assert cells[4:10] == [
        "1/2 (core 1/2)",
        "1/1 (core 1/1)",
        "0/1 (core 0/1)",
        "2/3 (core 2/2)",
        "1/2 (core 1/1)",
        "2/3 (core 2/2)",
    ]
    assert cells[10] == "model tool 1, model answer 1"
    assert cells[11] == "product tool 1, product args 1, product answer 1"


# ---- release gates ---------------------------------------------------------------------------------------


def verdict(seed: str, passed: bool, **fields: Any) -> CaseVerdict:
    values: dict[str, Any] = {
        "stack_config": "llamacpp-jinja",
        "model": "qwen",
        "tools_mode": "text-tools",
        "channel": "product",
        "without": None,
        "suite": "formation",
        "dimension": "answer",
        "tie": False,
        "n_pass": 3 if passed else 0,
        "n_votes": 3,
        "n_samples": 3,
        "unscored": False,
        "core": False,
    }
    return CaseVerdict(seed=seed, passed=passed, **(values | fields))


def group_of(passing: int, total: int, **fields: Any) -> list[CaseVerdict]:
    return [verdict(f"s{i:02d}", i < passing, **fields) for i in range(total)]


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("prod.all.answer >= 1/2", "unknown channel 'prod'"),
        ("product.some.answer >= 1/2", "unknown set 'some'"),
        ("product.all.reply >= 1/2", "unknown dimension 'reply'"),
        ("product.all.answer => 1/2", "unknown operator '=>'"),
        ("product.all.answer != 1/2", "unknown operator '!='"),
        ("product.all.answer >= 13/0", "zero denominator"),
        ("product.all.answer >= 1.5", "outside [0, 1]"),
        ("product.all.answer >= 120%", "outside [0, 1]"),
        ("product.all.answer >= most", "not a fraction"),
        ("product.answer >= 1/2", "is not <channel>.<set>.<dimension>"),
        ("product.all.answer", "expected '<channel>.<set>.<dimension> <op> <threshold>'"),
    ],
)
def test_bad_gates_name_the_expression_and_the_problem(expression: str, problem: str) -> None:
    with pytest.raises(GateError) as raised:
        parse_gate(expression)
    assert f"'{expression}'" in str(raised.value)
    assert problem in str(raised.value)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(("threshold", "value"), [("12/14", 6 / 7), ("0.85", 0.85), ("85%", 0.85), ("1", 1.0)])
def test_thresholds_read_as_fractions_decimals_or_percentages(threshold: str, value: float) -> None:
    gate = parse_gate(f"model.core.tool>={threshold}")
    assert (gate.channel, gate.case_set, gate.dimension, gate.op) == ("model", "core", "tool", ">=")
    assert float(gate.threshold) == pytest.approx(value)


@pytest.mark.parametrize(
    ("expression", "ok"),
    [
        ("product.all.answer >= 6/7", True),  # 12/14 == 6/7 exactly: no float rounding decides
        ("product.all.answer >= 12/14", True),
        ("product.all.answer == 6/7", True),
        ("product.all.answer > 6/7", False),
        ("product.all.answer >= 0.8572", False),
        ("product.all.answer >= 0.857142857142857143", False),  # above 6/7, though the same as a float
        ("product.all.answer <= 85.8%", True),
        ("product.all.answer < 6/7", False),
    ],
)
def test_gate_compares_the_exact_fraction(expression: str, ok: bool) -> None:
    [result] = evaluate_gates([expression], group_of(12, 14))
    assert (result.passes, result.total, result.ok) == (12, 14, ok)


def test_gates_on_every_group_with_a_failing_one() -> None:
    verdicts = group_of(12, 14) + group_of(11, 14, model="llama") + group_of(0, 14, without="final_json")
    results = evaluate_gates(["product.all.answer >= 12/14"], verdicts)
    assert [(r.model, r.passes, r.ok) for r in results] == [("llama", 11, False), ("qwen", 12, True)]
    assert gates_passed(results) is False
    assert gates_passed(results[1:]) is True
    assert gates_passed([]) is False


def test_ties_and_unscored_cases_count_as_not_passing() -> None:
    verdicts = [*group_of(12, 12), verdict("tie", False, tie=True), verdict("cut", False, unscored=True, n_votes=0)]
    [result] = evaluate_gates(["product.all.answer >= 13/14"], verdicts)
    assert (result.passes, result.total, result.ties, result.unscored, result.ok) == (12, 14, 1, 1, False)
    assert "1 tied, 1 unscored: counted as not passing" in format_gate_results([result])


def test_core_gate_and_its_line() -> None:
    verdicts = group_of(14, 14)[:6] + [verdict(f"c{i}", i < 7, core=True) for i in range(8)]
    [result] = evaluate_gates(["product.core.answer >= 12/14"], verdicts)
    assert (result.passes, result.total, result.value, result.ok) == (7, 8, 0.875, True)
    line = format_gate_results([result])
    assert line == "PASS product.core.answer 7/8 (0.875) >= 12/14 (0.857) on llamacpp-jinja qwen text-tools formation"
    # A core set given to the gate replaces the verdicts' own flags.
    [given] = evaluate_gates(["product.core.answer >= 12/14"], verdicts, core={("formation", "s00")})
    assert (given.passes, given.total) == (1, 1)


def test_a_gate_with_nothing_to_measure_fails() -> None:
    verdicts = group_of(5, 5)
    [no_core] = evaluate_gates(["product.core.answer >= 0"], verdicts)
    assert (no_core.ok, no_core.total, no_core.reason) == (False, 0, "no core case applies to product answer")
    [no_channel] = evaluate_gates(["model.all.tool >= 0"], verdicts)
    assert (no_channel.ok, no_channel.model, no_channel.reason) == (False, None, "no group has the model channel")
    assert format_gate_results([no_core]).startswith("FAIL product.core.answer 0/0 (—) >= 0 (0.000) on ")


def test_all_gates_are_parsed_before_any_is_evaluated() -> None:
    with pytest.raises(GateError, match=re.escape("'model.all.tool >= 2/1'")):
        evaluate_gates(["product.all.answer >= 1/2", "model.all.tool >= 2/1"], group_of(1, 1))


# ---- ablation --------------------------------------------------------------------------------------------


def cases(n: int) -> dict[tuple[str, str], Expectation]:
    return {("formation", f"s{i}"): FORM for i in range(n)}


def row_of(rows: list[AblationRow], guard: str, dimension: str) -> AblationRow:
    [row] = [r for r in rows if r.guard == guard and r.dimension == dimension]
    return row


def test_a_guard_whose_removal_loses_three_of_eight_cases() -> None:
    parent = [
        product_sample(f"s{i}", events=[event("final_json", fired=i < 4, changed=i < 3), event("dedup", fired=False)])
        for i in range(8)
    ]
    parent.append(product_sample("s5", events=[event("final_json", changed=True)], superseded=True, end="server_died"))
    parent += [product_sample(f"s{i}", model="llama", events=[event("final_json", changed=True)]) for i in range(8)]
    off = [product_sample(f"s{i}", answer_right=i >= 3, without="final_json") for i in range(8)]
    rows = ablation_rows(parent, off, cases(8), SETTINGS)
    assert {(r.guard, r.model) for r in rows} == {("final_json", "qwen")}  # llama had no ablation run
    answer = row_of(rows, "final_json", "answer")
    assert (answer.on_pass, answer.off_pass, answer.n_seeds, answer.n_unpaired) == (8, 5, 8, 0)
    assert answer.delta_mean == pytest.approx(0.375)
    assert answer.ci_low is not None and answer.ci_high is not None
    assert 0.0 <= answer.ci_low < 0.375 < answer.ci_high <= 1.0
    # Parent events of this family only, counted records only: 4 fired, 3 changed.
    assert (answer.fired, answer.changed, answer.fired_cases, answer.changed_cases) == (4, 3, 4, 3)
    assert answer.contribution == "changed 3"
    tool = row_of(rows, "final_json", "tool")
    assert (tool.delta_mean, tool.ci_low, tool.ci_high) == (0.0, 0.0, 0.0)  # all-equal deltas: zero width


def test_a_guard_that_fired_but_changed_nothing_contributes_nothing() -> None:
    parent = [product_sample(f"s{i}", answer_right=i != 2, events=[event("dedup", fired=i < 2)]) for i in range(6)]
    off = [product_sample(f"s{i}", answer_right=i != 2, without="dedup") for i in range(6)]
    rows = ablation_rows(parent, off, cases(6), SETTINGS)
    assert {r.dimension for r in rows} == {"tool", "args", "answer"}
    for row in rows:
        assert (row.delta_mean, row.ci_low, row.ci_high) == (0.0, 0.0, 0.0)
        assert (row.fired, row.changed, row.fired_cases) == (2, 0, 2)
        assert row.contribution == "none (fired 2, changed nothing)"
    assert row_of(rows, "dedup", "answer").on_pass == 5


def test_a_guard_that_never_fired() -> None:
    parent = [product_sample(f"s{i}", events=[event("stall", fired=False)]) for i in range(3)]
    off = [product_sample(f"s{i}", without="stall") for i in range(3)]
    [row, *_] = ablation_rows(parent, off, cases(3), SETTINGS)
    assert (row.fired, row.changed, row.contribution) == (0, 0, "none (never fired)")


def test_a_guard_that_hurts_has_a_negative_interval() -> None:
    """The interval is not clipped to [0, 1]: a delta below zero stays below zero."""
    parent = [product_sample(f"s{i}", answer_right=i >= 2, events=[event("repair", changed=True)]) for i in range(4)]
    off = [product_sample(f"s{i}", without="repair") for i in range(4)]
    answer = row_of(ablation_rows(parent, off, cases(4), SETTINGS), "repair", "answer")
    assert answer.delta_mean == pytest.approx(-0.5)
    assert answer.ci_low is not None and answer.ci_high is not None
    assert -1.0 <= answer.ci_low < -0.5 < answer.ci_high <= 0.0


def test_majority_pairing_and_unpaired_cases() -> None:
    parent = [
        product_sample(f"s{i}", sample, events=[event("final_json", changed=True)])
        for i in range(3)
        for sample in range(3)
    ]
    off = [
        # s0: 2 of 3 samples right: a pass.  s1: right, wrong, cut short: a tie, which fails.  s2: all cut short.
        *(product_sample("s0", sample, answer_right=sample != 1, without="final_json") for sample in range(3)),
        product_sample("s1", 0, without="final_json"),
        product_sample("s1", 1, answer_right=False, without="final_json"),
        product_sample("s1", 2, without="final_json", end="retries_exhausted"),
        *(product_sample("s2", sample, without="final_json", end="server_died") for sample in range(3)),
    ]
    answer = row_of(ablation_rows(parent, off, cases(3), SETTINGS), "final_json", "answer")
    assert (answer.n_seeds, answer.n_unpaired, answer.on_pass, answer.off_pass) == (2, 1, 2, 1)
    assert answer.delta_mean == pytest.approx(0.5)
    assert (answer.fired, answer.fired_cases) == (9, 9)  # case runs: one per sample of a case


def test_fewer_than_two_paired_cases_have_no_interval() -> None:
    parent = [product_sample("s0", events=[event("final_json", changed=True)])]
    off = [product_sample("s0", answer_right=False, without="final_json")]
    answer = row_of(ablation_rows(parent, off, cases(1), SETTINGS), "final_json", "answer")
    assert (answer.delta_mean, answer.ci_low, answer.ci_high, answer.n_seeds) == (1.0, None, None, 1)


def test_ablation_json_and_markdown() -> None:
    parent = [product_sample(f"s{i}", events=[event("final_json", changed=i == 0)]) for i in range(4)]
    off = [product_sample(f"s{i}", answer_right=i != 0, without="final_json") for i in range(4)]
    rows = ablation_rows(parent, off, cases(4), SETTINGS)
    data = row_of(rows, "final_json", "answer").as_json()
    expected = {"guard", "stack_config", "model", "mode", "dimension", "delta_mean", "ci_low", "ci_high"}
    assert expected | {"fired", "changed", "n_seeds", "contribution"} <= set(data)
    assert "tools_mode" not in data
    assert (data["mode"], data["delta_mean"], data["fired"], data["changed"]) == ("text-tools", 0.25, 4, 1)
    table = render_ablation_markdown(rows).splitlines()
    assert len(table) == 2 + len(rows)
    answer_line = next(line for line in table if "| answer |" in line)
    assert "| final_json | llamacpp-jinja | qwen | text-tools | answer | 4/4 | 3/4 | +0.250 |" in answer_line
    assert answer_line.endswith("| changed 1 |")
