"""Statistics: per-seed mean, bootstrap interval (checked against scipy), pooled figure, flags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from orchestrator.analysis.compare.diffstats import FLOAT_NOISE, paired_bootstrap
from orchestrator.analysis.report.report import long_table
from orchestrator.core.stats import (
    MAX_DRAW_INDICES,
    BootstrapSettings,
    bootstrap_mean_interval,
    bootstrap_mean_intervals,
    cell_stats,
    cell_table,
)
from orchestrator.runner.store.runstore import RunStore
from tests.test_cli_core import run, write_jsonl

DATASETS = {
    "paper-like": np.array([0.0, 0.0, 0.1, 0.2, 0.5, 0.6, 0.4, 1.0]),
    "spread": np.array([0.0, 1.0, 0.5, 0.25, 0.75, 1.0, 0.0, 0.33, 0.9, 0.1]),
    "skewed": np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.0, 1.0]),
    "two-seeds": np.array([0.2, 0.8]),
}


@pytest.mark.parametrize("name", DATASETS)
def test_bootstrap_matches_scipy_percentile(name: str) -> None:
    values = DATASETS[name]
    ours = bootstrap_mean_interval(values, BootstrapSettings(resamples=20_000, rng_seed=1))
    ref = scipy_stats.bootstrap(
        (values,), np.mean, n_resamples=20_000, method="percentile", random_state=np.random.default_rng(2)
    ).confidence_interval
    # Monte-Carlo error of a 2.5% quantile with 20k resamples is well under 0.02 for data in [0, 1].
    assert ours[0] == pytest.approx(ref.low, abs=0.02)
    assert ours[1] == pytest.approx(ref.high, abs=0.02)


def test_bootstrap_is_reproducible_and_seed_sensitive() -> None:
    values = DATASETS["spread"]
    a = bootstrap_mean_interval(values, BootstrapSettings(rng_seed=5))
    assert a == bootstrap_mean_interval(values, BootstrapSettings(rng_seed=5))
    assert a != bootstrap_mean_interval(values, BootstrapSettings(rng_seed=6))


def _one_draw_interval(values: np.ndarray, settings: BootstrapSettings, decimals: int | None) -> tuple[float, float]:
    """The percentile bootstrap written out plainly: one draw of every resample index, one quantile."""
    draws = np.random.default_rng(settings.rng_seed).integers(0, values.size, size=(settings.resamples, values.size))
    means = values[draws].mean(axis=1)
    means = means if decimals is None else np.round(means, decimals)
    tail = (1.0 - settings.confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


@pytest.mark.parametrize("resamples", [3000, MAX_DRAW_INDICES // 64 + 5], ids=["one-block", "several-blocks"])
def test_every_bootstrap_draws_the_same_resamples(resamples: int) -> None:
    # One implementation (core.stats) behind the fidelity interval, the batched report path and diff's paired
    # interval: each equals the plain one-draw computation, whatever the blocks, so recorded reports keep
    # their figures.
    settings = BootstrapSettings(resamples=resamples, rng_seed=11, confidence=0.9)
    differences = np.round(np.random.default_rng(4).uniform(-1, 0.8, size=64), 3)
    shares = (differences + 1) / 2
    assert paired_bootstrap(differences, settings) == _one_draw_interval(differences, settings, FLOAT_NOISE)
    assert paired_bootstrap(differences, settings)[0] < 0  # unclipped: a difference may be negative
    expected = _one_draw_interval(shares, settings, None)
    assert bootstrap_mean_interval(shares, settings) == expected
    assert bootstrap_mean_intervals([shares, np.full(3, 0.5)], settings) == [expected, (0.5, 0.5)]


def test_one_seed_interval_collapses_to_point() -> None:
    cell = cell_stats(["s1"] * 4, ["valid_call", "valid_call", "no_call_prose", "hallucinated_call"])
    assert cell.per_seed_mean == cell.ci_low == cell.ci_high == 0.5
    assert cell.n_seeds == 1 and cell.few_seeds


def test_paper_trap_pooled_dominated_by_one_long_session() -> None:
    # 7 short seeds failing, plus one 41-turn session of valid calls.
    seeds, outcomes = [], []
    for s in range(7):
        seeds += [f"s{s}"] * 2
        outcomes += ["no_call_prose", "unparseable_text"]
    seeds += ["long"] * 41
    outcomes += ["valid_call"] * 41
    cell = cell_stats(seeds, outcomes)
    assert cell.per_seed_mean == pytest.approx(1 / 8)
    assert cell.pooled == pytest.approx(41 / 55)
    assert cell.pooled - cell.per_seed_mean > 0.5
    assert cell.pooled_gap
    assert not cell.few_seeds and cell.n_seeds == 8


def test_rejected_and_non_response_leave_the_denominator() -> None:
    cell = cell_stats(
        ["a", "a", "a", "b", "b", "c"],
        ["valid_call", "rejected_request", "non_response", "hallucinated_call", "valid_call", "rejected_request"],
    )
    # seed a: 1/1, seed b: 1/2, seed c: undefined (left out)
    assert cell.n_seeds == 2
    assert cell.per_seed_mean == pytest.approx(0.75)
    assert cell.pooled == pytest.approx(2 / 3)
    assert (cell.n_rejected, cell.n_non_response, cell.n_eligible_turns) == (2, 1, 3)


def test_all_rejected_cell_is_undefined_never_zero() -> None:
    cell = cell_stats(["a", "b"], ["rejected_request", "rejected_request"])
    assert cell.status == "undefined"
    assert cell.per_seed_mean is None and cell.pooled is None and cell.ci_low is None and cell.ci_high is None
    assert cell.n_rejected == 2 and cell.n_seeds == 0


def test_cell_table_groups_by_stack_config_model_mode() -> None:
    rows = [
        {
            "stack_config": "vllm-hermes",
            "model": "m",
            "tools_mode": "native",
            "seed": "1",
            "turn": 0,
            "outcome": "rejected_request",
        },
        {
            "stack_config": "llamacpp-jinja",
            "model": "m",
            "tools_mode": "native",
            "seed": "1",
            "turn": 0,
            "outcome": "valid_call",
        },
        {
            "stack_config": "llamacpp-jinja",
            "model": "m",
            "tools_mode": "text-tools",
            "seed": "1",
            "turn": 0,
            "outcome": "no_call_prose",
        },
    ]
    table = cell_table(rows).set_index(["stack_config", "tools_mode"])
    assert table.loc[("vllm-hermes", "native"), "status"] == "undefined"
    assert table.loc[("llamacpp-jinja", "native"), "per_seed_mean"] == 1.0
    assert table.loc[("llamacpp-jinja", "text-tools"), "per_seed_mean"] == 0.0
    assert ((table["per_seed_mean"].dropna() >= 0) & (table["per_seed_mean"].dropna() <= 1)).all()


def test_cell_without_any_turn_is_undefined() -> None:
    cell = cell_stats([], [])
    assert cell.status == "undefined" and cell.n_seeds == 0 and cell.per_seed_mean is None


# --- Distinct outcome sequences: seeds that replay one or two trajectories are flagged ---------------------------


def test_distinct_sequences_over_defined_seeds_and_eligible_outcomes() -> None:
    seeds, outcomes = [], []
    for seed, sequence in {
        "a": ["valid_call", "valid_call"],
        "b": ["valid_call", "valid_call"],
        "c": ["valid_call", "no_call_prose"],
        "d": ["rejected_request"],  # undefined: not a sequence
        "e": ["non_response", "valid_call", "valid_call"],  # a retried non-response is no model behaviour: same as a
    }.items():
        seeds += [seed] * len(sequence)
        outcomes += sequence
    cell = cell_stats(seeds, outcomes)
    assert (cell.n_seeds, cell.n_distinct_sequences) == (4, 2)
    assert cell.degenerate_seeds


def test_identical_seeds_give_a_point_interval_and_are_flagged() -> None:
    # The issue's `17 [17,17]`: eight seeds, one trajectory. The interval says nothing about the model.
    seeds = [f"s{i}" for i in range(8) for _ in range(6)]
    outcomes = ["valid_call", *["no_call_prose"] * 5] * 8
    cell = cell_stats(seeds, outcomes)
    assert round(100 * cell.per_seed_mean) == 17 and cell.ci_low == cell.ci_high
    assert cell.n_distinct_sequences == 1 and cell.degenerate_seeds and not cell.few_seeds


def test_varied_seeds_are_not_degenerate() -> None:
    seeds, outcomes = [], []
    for i in range(8):
        sequence = ["valid_call"] * (i + 1) + ["hallucinated_call"] * (i % 2)
        seeds += [f"s{i}"] * len(sequence)
        outcomes += sequence
    cell = cell_stats(seeds, outcomes)
    assert cell.n_distinct_sequences == 8 and not cell.degenerate_seeds


@pytest.mark.parametrize(("n_seeds", "degenerate"), [(1, False), (2, False), (3, True)])
def test_degenerate_needs_three_seeds(n_seeds: int, degenerate: bool) -> None:
    cell = cell_stats([f"s{i}" for i in range(n_seeds)], ["valid_call"] * n_seeds)
    assert cell.n_distinct_sequences == 1 and cell.degenerate_seeds is degenerate


def test_sequences_follow_turn_order_when_turns_are_given() -> None:
    # Seed a's records arrive out of turn order; read in turn order both seeds did valid, then prose.
    seeds = ["a", "a", "b", "b", "c", "c"]
    outcomes = ["no_call_prose", "valid_call", "valid_call", "no_call_prose", "valid_call", "valid_call"]
    turns = [1, 0, 0, 1, 0, 1]
    assert cell_stats(seeds, outcomes).n_distinct_sequences == 3
    ordered = cell_stats(seeds, outcomes, turns=turns)
    assert ordered.n_distinct_sequences == 2 and ordered.degenerate_seeds
    with pytest.raises(ValueError, match="turns"):
        cell_stats(seeds, outcomes, turns=[0])


def test_empty_and_undefined_cells_have_no_sequences() -> None:
    assert cell_stats([], []).n_distinct_sequences == 0
    cell = cell_stats(["a", "b", "c"], ["rejected_request"] * 3)
    assert cell.n_distinct_sequences == 0 and not cell.degenerate_seeds


def test_cell_table_reads_sequences_in_turn_order() -> None:
    rows = [
        {"stack_config": "s", "model": "m", "tools_mode": "native", "seed": seed, "turn": turn, "outcome": outcome}
        for seed, turn, outcome in [
            ("a", 1, "no_call_prose"),
            ("a", 0, "valid_call"),
            ("b", 0, "valid_call"),
            ("b", 1, "no_call_prose"),
            ("c", 0, "valid_call"),
            ("c", 1, "no_call_prose"),
        ]
    ]
    row = cell_table(rows).iloc[0]
    assert row["n_distinct_sequences"] == 1 and bool(row["degenerate_seeds"])


def test_long_table_reports_distinct_sequences(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.create({"run_id": "run", "matrix": {"bootstrap": {"resamples": 200}}})
    base = {"run_id": "run", "cell_id": "c", "model": "m", "stack": "llamacpp", "tools_mode": "native"}
    records = [
        {**base, "seed": seed, "turn": turn, "outcome": outcome, **({"end": "prose"} if turn == 1 else {})}
        for seed in ("s0", "s1", "s2")
        for turn, outcome in ((0, "valid_call"), (1, "no_call_prose"))
    ]
    records[0], records[1] = records[1], records[0]  # s0's turns written out of order
    store.turns_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cell = {"cell_id": "c", "order": 0, "stack_label": "llamacpp-jinja", "stack": "llamacpp", "model": "m"}
    store.write_cell("c", {**cell, "tools_mode": "native", "status": "complete"})
    row = long_table(store).iloc[0]
    assert row["n_distinct_sequences"] == 1 and bool(row["degenerate_seeds"])


def test_stats_command_reports_distinct_sequences(tmp_path: Path) -> None:
    base = {"stack": "ollama", "model": "m", "tools_mode": "native"}
    rows = [
        {**base, "seed": f"s{seed}", "turn": turn, "outcome": outcome}
        for seed in range(4)
        for turn, outcome in ((1, "no_call_prose"), (0, "valid_call"))  # written last turn first
    ]
    path = write_jsonl(tmp_path / "turns.jsonl", rows)
    result = run("stats", str(path), "--json", "--resamples", "200")
    assert result.returncode == 0, result.stderr
    [cell] = json.loads(result.stdout)
    assert (cell["n_seeds"], cell["n_distinct_sequences"], cell["degenerate_seeds"]) == (4, 1, True)
    table = run("stats", str(path), "--resamples", "200")
    assert table.returncode == 0 and "degenerate_seeds" in table.stdout


def test_a_batch_of_cells_gives_each_cell_its_own_figures() -> None:
    """`cells_stats` codes every cell's turns at once: a cell's figures, its per-seed fidelities (seed order) and
    its outcome counts are what it gets alone, whatever cells stand beside it (empty ones included)."""
    from orchestrator.core.stats import cells_stats

    first = (["b", "a", "a", "b", "c"], ["valid_call", "no_call_prose", "valid_call", "rejected_request",
                                         "non_response"], [0, 0, 1, 1, 0])  # fmt: skip
    second = (["s1", "s1", "s2"], ["hallucinated_call", "valid_call", "valid_call"], None)
    empty: tuple[list[str], list[str], None] = ([], [], None)
    settings = BootstrapSettings(resamples=500)
    batch = cells_stats([first, empty, second], settings)
    alone = [cell_stats(seeds, outcomes, settings, turns=turns) for seeds, outcomes, turns in (first, empty, second)]
    assert [s.model_dump() for s in batch] == [s.model_dump() for s in alone]
    # a: 1 of 2 eligible; b: 1 of 1 (its rejected turn is not eligible); c: no eligible turn, no fidelity.
    assert batch[0].seed_fidelities == (0.5, 1.0)
    assert batch[2].seed_fidelities == (0.5, 1.0) and batch[1].seed_fidelities == ()
    assert batch[0].outcome_counts == {"valid_call": 2, "hallucinated_call": 0, "unparseable_text": 0,
                                       "no_call_prose": 1, "rejected_request": 1, "non_response": 1}  # fmt: skip
    assert batch[2].outcome_counts["hallucinated_call"] == 1 and batch[2].outcome_counts["valid_call"] == 2
    assert sum(batch[1].outcome_counts.values()) == 0 and batch[1].status == "undefined"
