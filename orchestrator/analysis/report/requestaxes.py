"""The request-semantics axes in the report: streamed vs non-streamed cells side by side, and how often each
stack config honoured tool_choice / parallel_tool_calls. From stored records only.

- **Stream pairs.** Two cells that differ only in `stream` (same stack config, model, mode, channel, sample,
  tool_choice, parallel_tool_calls) send the same first request with the same sampling seed. Per seed, the
  first turn's outcome on each path; `divergence` = the share of compared seeds (both first turns answered:
  a timeout, a cut stream or a refusal on one side is counted apart, `n_failed_one_side`, and so is a seed
  whose start could not clear the server's prompt cache on either side, `n_cache_not_cleared`, or whose
  answered attempts were sent with different sampling seeds, a retry's, `n_other_sampling_seed`) whose first
  outcomes differ, with a seed-level bootstrap interval; `n_same_first_answer` compares content and calls
  (name and arguments: call ids are drawn per request); the fidelity difference (stream − non-stream) with a paired
  seed-level bootstrap interval. Under temperature 0 or a fixed sampling seed a divergence is the stack's
  doing (`stack_finding`), and the wide table marks the streamed cell (`divN/M`).
- **Constraint compliance.** Per cell that asked something (tool_choice other than auto, or
  parallel_tool_calls: false): per seed, the share of judged turns (answers, not refusals or failures) that
  kept to it; the per-seed mean with a seed-level bootstrap interval, the pooled share, and the breaches
  (with the turns cut at max_tokens before a call, which leave required/named unjudged).
"""

from __future__ import annotations

import json
from collections import Counter
from operator import methodcaller
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.compare.diffstats import paired_bootstrap
from orchestrator.core.constraints import CONSTRAINT_FLAGS, UNJUDGED_TRUNCATED, stack_answered
from orchestrator.core.replyfacts import CACHE_NOT_CLEARED_FLAG
from orchestrator.core.stats import BootstrapSettings, bootstrap_mean_interval, per_seed_fidelity
from orchestrator.core.types import Outcome

PAIR_FIELDS = ("stack_label", "model", "tools_mode", "channel", "sample", "without", "tool_choice",
               "parallel_tool_calls")


def _pair_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    defaults = {"channel": "agent", "sample": 0, "tool_choice": "auto"}
    return tuple(cell.get(field, defaults.get(field)) for field in PAIR_FIELDS)


def _rank(turn: dict[str, Any]) -> tuple[int, int]:
    return int(turn.get("seed_attempt") or 0), int(turn.get("attempt") or 0)


def first_turns(counted: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(cell_id, seed) -> the counted turn 0 of its final attempt (the latest seed run, then attempt)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for turn in counted:
        if turn.get("turn") != 0:
            continue
        key = (turn["cell_id"], str(turn["seed"]))
        if key not in found or _rank(turn) >= _rank(found[key]):
            found[key] = turn
    return found


def uncleared_seeds(counted: list[dict[str, Any]]) -> set[tuple[str, str, int]]:
    """(cell_id, seed, seed_attempt) whose start could not clear the server's prompt cache: the flag sits on the
    seed run's first record only, but every attempt of that run computed on whatever cache an earlier seed left."""
    return {
        (turn["cell_id"], str(turn["seed"]), _rank(turn)[0])
        for turn in counted
        if CACHE_NOT_CLEARED_FLAG in (turn.get("flags") or [])
    }


def _interval(values: list[float], settings: BootstrapSettings) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    array = np.asarray(values, dtype=float)
    low, high = bootstrap_mean_interval(array, settings)
    return float(array.mean()), low, high


def _answered(turn: dict[str, Any]) -> bool:
    """The stack answered the first turn (no refusal, no transport failure, no cut stream)."""
    return stack_answered(Outcome(turn["outcome"]), turn.get("error"))


def _answer_of(turn: dict[str, Any]) -> tuple[Any, ...]:
    """What the model answered, without the ids a stack draws per request (they differ on every call)."""
    calls = [(c.get("name"), json.dumps(c.get("arguments"), sort_keys=True)) for c in turn.get("calls") or []]
    return (turn.get("raw_content") or None, calls)


def _deterministic(cell: dict[str, Any]) -> bool:
    """Temperature 0 or a fixed sampling seed: the same request should give the same answer on both paths."""
    decoding = cell.get("decoding") or {}
    return decoding.get("temperature") == 0 or decoding.get("seed") is not None


def _fidelity_delta(
    plain: list[dict[str, Any]], streamed: list[dict[str, Any]], settings: BootstrapSettings
) -> dict[str, Any]:
    a = per_seed_fidelity([str(t["seed"]) for t in plain], [t["outcome"] for t in plain])
    b = per_seed_fidelity([str(t["seed"]) for t in streamed], [t["outcome"] for t in streamed])
    seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
    if not seeds:
        return {"n_seeds_fidelity": 0, "delta": None, "delta_lo": None, "delta_hi": None}
    differences = np.asarray([b[s] - a[s] for s in seeds], dtype=float)  # type: ignore[operator]
    low, high = paired_bootstrap(differences, settings)
    return {"n_seeds_fidelity": len(seeds), "delta": float(differences.mean()), "delta_lo": low, "delta_hi": high}


def stream_timing(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time to first token and tokens per second over the streamed turns."""
    facts = [t.get("stream_facts") or {} for t in filter(methodcaller("get", "stream"), turns)]
    ttft = [f["ttft_s"] for f in facts if isinstance(f.get("ttft_s"), int | float)]
    rate = [f["tokens_per_s"] for f in facts if isinstance(f.get("tokens_per_s"), int | float)]
    return {
        "ttft_median_s": float(np.median(ttft)) if ttft else None,
        "tokens_per_s_median": float(np.median(rate)) if rate else None,
    }


def stream_pairs(
    cells: dict[str, dict[str, Any]], by_cell: dict[str, list[dict[str, Any]]], settings: BootstrapSettings
) -> pd.DataFrame:
    """One row per (stack config, model, mode, ...) that ran both streamed and not; `by_cell`: counted turns."""
    groups: dict[tuple[Any, ...], dict[bool, str]] = {}
    for cell_id, cell in cells.items():
        groups.setdefault(_pair_key(cell), {})[bool(cell.get("stream"))] = cell_id
    rows = []
    for key, pair in groups.items():
        if set(pair) != {False, True}:
            continue
        plain, streamed = by_cell.get(pair[False], []), by_cell.get(pair[True], [])
        firsts_a, firsts_b = first_turns(plain), first_turns(streamed)
        seeds = sorted({s for _, s in firsts_a} & {s for _, s in firsts_b})
        uncleared = uncleared_seeds(plain) | uncleared_seeds(streamed)
        diverged, same_answer, failed, uncontrolled, reseeded = [], 0, 0, 0, 0
        for seed in seeds:
            a, b = firsts_a[(pair[False], seed)], firsts_b[(pair[True], seed)]
            if not (_answered(a) and _answered(b)):  # a timeout or refusal is not a path's answer: apart
                failed += 1
                continue
            if any((t["cell_id"], seed, _rank(t)[0]) in uncleared for t in (a, b)):
                uncontrolled += 1  # an earlier seed's cache changes the numerics: not the same request any more
                continue
            if a.get("sampling_seed") != b.get("sampling_seed"):
                reseeded += 1  # a retried attempt samples with another seed: not the same request either
                continue
            diverged.append(float(a["outcome"] != b["outcome"]))
            same_answer += _answer_of(a) == _answer_of(b)
        mean, low, high = _interval(diverged, settings)
        deterministic = _deterministic(cells[pair[True]])
        rows.append(
            {
                **dict(zip(PAIR_FIELDS, key, strict=True)),
                "cell_id_plain": pair[False],
                "cell_id_stream": pair[True],
                "n_seeds_paired": len(seeds),
                "n_seeds_compared": len(diverged),
                "n_failed_one_side": failed,
                "n_cache_not_cleared": uncontrolled,
                "n_other_sampling_seed": reseeded,
                "n_diverged": int(sum(diverged)),
                "divergence": mean,
                "divergence_lo": low,
                "divergence_hi": high,
                "n_same_first_answer": same_answer,
                **_fidelity_delta(plain, streamed, settings),
                "deterministic": deterministic,
                "stack_finding": bool(deterministic and sum(diverged) > 0),
                **stream_timing(streamed),
            }
        )
    return pd.DataFrame(rows)


def _compliance_row(cell: dict[str, Any], turns: list[dict[str, Any]], settings: BootstrapSettings) -> dict[str, Any]:
    judged = [t for t in turns if t.get("constraint_honoured") is not None]
    per_seed: dict[str, list[bool]] = {}
    for turn in judged:
        per_seed.setdefault(str(turn["seed"]), []).append(bool(turn["constraint_honoured"]))
    rates = [sum(v) / len(v) for v in per_seed.values()]
    mean, low, high = _interval(rates, settings)
    breaches = Counter(f for t in turns for f in t.get("flags") or [] if f in CONSTRAINT_FLAGS)
    unjudged = sum(UNJUDGED_TRUNCATED in (t.get("flags") or []) for t in turns)
    return {
        "cell_id": cell["cell_id"],
        "stack_label": cell.get("stack_label"),
        "model": cell.get("model"),
        "tools_mode": cell.get("tools_mode"),
        "stream": bool(cell.get("stream")),
        "tool_choice": cell.get("tool_choice") or "auto",
        "parallel_tool_calls": cell.get("parallel_tool_calls"),
        "n_turns_judged": len(judged),
        "n_seeds_judged": len(per_seed),
        "n_turns_unjudged_truncated": unjudged,
        "honoured": mean,
        "honoured_lo": low,
        "honoured_hi": high,
        "honoured_pooled": (sum(bool(t["constraint_honoured"]) for t in judged) / len(judged)) if judged else None,
        "breaches": " ".join(f"{name}:{n}" for name, n in sorted(breaches.items())) or "",
    }


def constraint_table(
    cells: dict[str, dict[str, Any]], by_cell: dict[str, list[dict[str, Any]]], settings: BootstrapSettings
) -> pd.DataFrame:
    """One row per cell that asked something of the stack; `by_cell`: counted turns."""
    rows = [
        _compliance_row(cell, by_cell.get(cell_id, []), settings)
        for cell_id, cell in sorted(cells.items(), key=lambda item: item[1].get("order", 0))
        if (cell.get("tool_choice") or "auto") != "auto" or cell.get("parallel_tool_calls") is not None
    ]
    return pd.DataFrame(rows)


def divergence_markers(pairs: pd.DataFrame) -> dict[str, str]:
    """cell_id of a streamed cell -> its wide-table marker, where the paths diverged under fixed sampling."""
    if pairs.empty:
        return {}
    found = pairs[pairs["stack_finding"]]
    return {row.cell_id_stream: f" div{row.n_diverged}/{row.n_seeds_compared}" for row in found.itertuples()}
