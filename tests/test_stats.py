"""Statistics: per-seed mean, bootstrap interval (checked against scipy), pooled figure, flags."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from orchestrator.core.stats import BootstrapSettings, bootstrap_mean_interval, cell_stats, cell_table

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


def test_cell_table_groups_by_stack_model_mode() -> None:
    rows = [
        {"stack": "vllm", "model": "m", "tools_mode": "native", "seed": "1", "turn": 0, "outcome": "rejected_request"},
        {"stack": "llamacpp", "model": "m", "tools_mode": "native", "seed": "1", "turn": 0, "outcome": "valid_call"},
        {
            "stack": "llamacpp",
            "model": "m",
            "tools_mode": "text-tools",
            "seed": "1",
            "turn": 0,
            "outcome": "no_call_prose",
        },
    ]
    table = cell_table(rows).set_index(["stack", "tools_mode"])
    assert table.loc[("vllm", "native"), "status"] == "undefined"
    assert table.loc[("llamacpp", "native"), "per_seed_mean"] == 1.0
    assert table.loc[("llamacpp", "text-tools"), "per_seed_mean"] == 0.0
    assert ((table["per_seed_mean"].dropna() >= 0) & (table["per_seed_mean"].dropna() <= 1)).all()


def test_cell_without_any_turn_is_undefined() -> None:
    cell = cell_stats([], [])
    assert cell.status == "undefined" and cell.n_seeds == 0 and cell.per_seed_mean is None
