"""Capacity on paper, the GPU half: published rates scaled to the reference GPU (`capacity_rates.yaml`), server
starts, GPU-hours per server and bound, hosts for an overnight window, and `compute`, the whole result.

    requests    = seed runs x requests per seed run        (lower: measured mean; upper: the turn cap)
    GPU seconds = prompt tokens / prefill tok/s + completion tokens / decode tok/s + requests x harness s/request,
                  divided by the stack's published concurrency gain at the matrix's concurrency
    start       = container start + the server's weights read from local disk (capacity_rates.yaml `gpu_start`)
"""

from __future__ import annotations

import hashlib
import math
import subprocess
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from capacity_workload import POOLED, Workload, cpu_rates, read_run, run_dirs, start_times, workloads

from orchestrator.runner.config.matrix import Matrix, expand
from orchestrator.runner.config.matrixfile import load_matrix

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MATRIX = ROOT / "matrices" / "full.yaml"
DEFAULT_RUNS = ROOT / "results" / "examples"
DEFAULT_RATES = Path(__file__).resolve().with_name("capacity_rates.yaml")
DEFAULT_OUT = DEFAULT_RUNS / "capacity-full"
WINDOW_H = 10.0  # an overnight window
GPUS_PER_BIG_HOST = 8
DIGITS = 6  # significant digits kept in the output (a BLAS may differ in the last bits)


def _sig(value: Any) -> Any:
    """Floats to DIGITS significant digits, recursively (the output is compared byte for byte by the test)."""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _sig(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_sig(item) for item in value]
    return value


def _stack_spec(rates: dict[str, Any], stack: str) -> dict[str, Any]:
    spec = rates["stacks"][stack]
    return rates["stacks"][spec["same_as"]] if "same_as" in spec else spec


def _reads_and_steps(rates: dict[str, Any], anchors: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per anchor: seconds to read its weights once at its GPU's peak bandwidth, and its seconds per token."""
    reads = [a["weight_bytes"] / (rates["gpus"][a["gpu"]]["bandwidth_gbs"] * 1e9) for a in anchors]
    return np.array(reads), np.array([1.0 / a["tokens_per_s"] for a in anchors])


def efficiency_fit(rates: dict[str, Any], stack: str) -> float | None:
    """The efficiency a least-squares line through the stack's anchors gives (None: under two anchors, or a
    line that is not physical, falling or flat in weight bytes)."""
    anchors = _stack_spec(rates, stack)["decode_anchors"]
    if len(anchors) < 2:
        return None
    reads, steps = _reads_and_steps(rates, anchors)
    (inverse_eff, _), *_ = np.linalg.lstsq(np.column_stack([reads, np.ones_like(reads)]), steps, rcond=None)
    return 1.0 / float(inverse_eff) if inverse_eff > 0 else None


def decode_fit(rates: dict[str, Any], stack: str) -> tuple[float, float]:
    """(efficiency, step overhead s) of a stack's decode rule. Efficiency: the anchors' fit, at most the ceiling
    (one anchor: the `efficiency_from` stack's); overhead: the largest any anchor needs at that efficiency, so the
    rule predicts no anchor faster than its published figure."""
    spec = _stack_spec(rates, stack)
    ceiling = rates["rules"]["efficiency_ceiling"]["value"]
    if len(spec["decode_anchors"]) >= 2:
        fitted = efficiency_fit(rates, stack)
        efficiency = ceiling if fitted is None else min(fitted, ceiling)
    else:
        efficiency, _ = decode_fit(rates, spec["efficiency_from"])
    reads, steps = _reads_and_steps(rates, spec["decode_anchors"])
    return efficiency, float(np.max(steps - reads / efficiency))


def decode_tps(rates: dict[str, Any], stack: str, weights: float, gpu: str) -> float:
    """Single-stream decode tokens/s of the stack's rule for `weights` bytes on `gpu`."""
    efficiency, overhead = decode_fit(rates, stack)
    return 1.0 / (weights / (efficiency * rates["gpus"][gpu]["bandwidth_gbs"] * 1e9) + overhead)


def weight_bytes(rates: dict[str, Any], stack: str, model: str) -> float:
    entry = rates["models"][model]
    params = entry["params_b"] * 1e9
    if _stack_spec(rates, stack)["weights"] == "bf16":
        return params * rates["rules"]["bf16_bytes_per_param"]["value"]
    return entry["gguf_bytes"] or params * rates["rules"]["gguf_bits_per_weight"]["value"] / 8


def gpu_rates(rates: dict[str, Any], stack: str, model: str) -> dict[str, float]:
    """Single-stream prefill and decode tokens/s of a stack and model on the reference GPU."""
    spec = _stack_spec(rates, stack)
    ref = rates["gpus"][rates["reference_gpu"]]
    efficiency, overhead = decode_fit(rates, stack)
    anchor = (
        _stack_spec(rates, spec["prefill_from"])["prefill_anchor"] if "prefill_from" in spec else spec["prefill_anchor"]
    )
    compute = ref["dense_16bit_tflops"] / rates["gpus"][anchor["gpu"]]["dense_16bit_tflops"]
    prefill = anchor["tokens_per_s"] * anchor["params_b"] / rates["models"][model]["params_b"] * compute
    decode = decode_tps(rates, stack, weight_bytes(rates, stack, model), rates["reference_gpu"])
    return {"prefill_tps": prefill, "decode_tps": decode, "efficiency": efficiency, "step_overhead_s": overhead}


def gpu_start_s(rates: dict[str, Any], stack: str, models: list[str]) -> float:
    """A GPU server's start: its container's start and each of its models' weights read once from local disk."""
    start = rates["gpu_start"]
    weights = sum(weight_bytes(rates, stack, model) for model in dict.fromkeys(models))
    return start["container_s"][stack] + weights / (start["disk_read_gbs"] * 1e9)


def decode_rules(rates: dict[str, Any], stacks: list[str]) -> list[dict[str, Any]]:
    """Per stack: its anchors' own efficiency fit, the efficiency and overhead used, and how each anchor and
    held-out check (`decode_checks`) compares with what the rule predicts for it."""
    rows = []
    for stack in stacks:
        spec = _stack_spec(rates, stack)
        efficiency, overhead = decode_fit(rates, stack)
        figures = [("anchor", a) for a in spec["decode_anchors"]] + [
            ("check", a) for a in spec.get("decode_checks", [])
        ]
        rows.append(
            {
                "stack": stack,
                "efficiency_fit": efficiency_fit(rates, stack),
                "efficiency": efficiency,
                "step_overhead_s": overhead,
                "figures": [
                    {
                        "role": role,
                        "gpu": f["gpu"],
                        "model": f["model"],
                        "published_tps": f["tokens_per_s"],
                        "rule_tps": decode_tps(rates, stack, f["weight_bytes"], f["gpu"]),
                    }
                    for role, f in figures
                ],
            }
        )
    return rows


def concurrency_gain(rates: dict[str, Any], stack: str, concurrency: int) -> float:
    gains = [g for g in _stack_spec(rates, stack).get("concurrency_gain", []) if g["concurrency"] <= concurrency]
    return max((g["gain"] for g in gains), default=1.0)


def plan(matrix: Matrix) -> list[dict[str, Any]]:
    """Servers of the matrix with their cells: (model, seed runs, turn cap) each."""
    return [
        {
            "server_id": server.server_id,
            "stack": server.stack.stack,
            "cells": [(c.model.name, len(c.seeds) * 1, matrix.turn_cap_for(c.model)) for c in server.cells],
        }
        for server in expand(matrix)
    ]


def cell_load(w: Workload, seeds: int, cap: int, upper: bool) -> tuple[float, float, float]:
    """(requests, prompt tokens, completion tokens) of one cell's seeds, lower or upper bound."""
    if upper:
        requests = float(seeds * cap)
        prompt = requests * (w.prompt_at_turn0 + w.prompt_growth_per_turn * (cap - 1) / 2)
        return requests, prompt, requests * w.completion_per_answered
    requests = seeds * min(w.requests_per_seed, cap)
    return requests, requests * w.prompt_per_request, requests * w.completion_per_request


def _stack_workload(loads: dict[str, Workload], stack: str) -> tuple[Workload, str]:
    """The stack's own measured workload when a committed run has its requests per seed run, else pooled."""
    own = loads.get(stack)
    if own is not None and own.seed_runs:
        return own, stack
    return loads[POOLED], POOLED


def estimate(
    servers: list[dict[str, Any]],
    loads: dict[str, Workload],
    rates: dict[str, Any],
    concurrency: int,
) -> list[dict[str, Any]]:
    """Per server and bound: requests, tokens and GPU hours, per model inside it, and the server's start."""
    out = []
    for server in servers:
        stack = server["stack"]
        w, source = _stack_workload(loads, stack)
        gain = concurrency_gain(rates, stack, concurrency)
        start_s = gpu_start_s(rates, stack, [model for model, _, _ in server["cells"]])
        for bound in ("lower", "upper"):
            models: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for model, seeds, cap in server["cells"]:
                requests, prompt, completion = cell_load(w, seeds, cap, bound == "upper")
                speed = gpu_rates(rates, stack, model)
                row = models[model]
                row["seed_runs"] += seeds
                row["requests"] += requests
                row["prompt_tokens"] += prompt
                row["completion_tokens"] += completion
                compute_s = prompt / speed["prefill_tps"] + completion / speed["decode_tps"]
                row["gpu_h"] += (compute_s + requests * rates["harness_overhead_s"][bound]) / gain / 3600
            out.append(
                {
                    "server_id": server["server_id"],
                    "stack": stack,
                    "bound": bound,
                    "workload_from": source,
                    "concurrency_gain": gain,
                    "start_h": start_s / 3600,
                    "models": {model: dict(values) for model, values in models.items()},
                }
            )
    return out


def hosts(server_hours: list[tuple[float, float]], window_h: float = WINDOW_H) -> dict[str, Any]:
    """1-GPU hosts that finish every server within the window (first-fit decreasing, servers whole; one longer
    than the window split into equal parts, each paying its own start), and 8-GPU hosts for as many streams."""
    parts: list[float] = []
    for work_h, start_h in server_hours:
        pieces = 1
        while work_h / pieces + start_h > window_h and pieces < 10_000:
            pieces += 1
        parts.extend([work_h / pieces + start_h] * pieces)
    bins: list[float] = []
    for part in sorted(parts, reverse=True):
        slot = next((i for i, used in enumerate(bins) if used + part <= window_h), None)
        if slot is None:
            bins.append(part)
        else:
            bins[slot] += part
    return {
        "window_h": window_h,
        "gpu_streams": len(bins),
        "hosts_1gpu": len(bins),
        "hosts_8gpu": math.ceil(len(bins) / GPUS_PER_BIG_HOST),
        "longest_stream_h": max(bins, default=0.0),
        "split_servers": sum(1 for work_h, start_h in server_hours if work_h + start_h > window_h),
    }


def summarize(per_server: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows per stack and model (tool configurations summed), totals and hosts, per bound."""
    result: dict[str, Any] = {}
    for bound in ("lower", "upper"):
        servers = [s for s in per_server if s["bound"] == bound]
        rows: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for server in servers:
            for model, values in server["models"].items():
                for key, value in values.items():
                    rows[(server["stack"], model)][key] += value
        table = [{"stack": stack, "model": model, **dict(values)} for (stack, model), values in rows.items()]
        totals = {key: sum(row[key] for row in table) for key in ("seed_runs", "requests", "prompt_tokens")}
        totals["completion_tokens"] = sum(row["completion_tokens"] for row in table)
        totals["gpu_h"] = sum(row["gpu_h"] for row in table)
        totals["start_h"] = sum(s["start_h"] for s in servers)
        work = [(sum(m["gpu_h"] for m in s["models"].values()), s["start_h"]) for s in servers]
        halved = [(2 * work_h, start_h) for work_h, start_h in work]  # every GPU rate half what the rules give
        result[bound] = {"rows": table, "totals": totals, "hosts": hosts(work), "hosts_at_half_rate": hosts(halved)}
    return result


def _git_commit(paths: list[Path]) -> str | None:
    try:
        done = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", *[str(p) for p in paths]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip() or None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rel(path: Path) -> str:
    return str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)


def inputs(matrix_path: Path, rates_path: Path, dirs: list[Path]) -> dict[str, Any]:
    """What the numbers were computed from: file hashes, and the last commit that touched the matrix and runs."""
    read = [matrix_path] + [d / name for d in dirs for name in ("turns.jsonl", "manifest.json", "cells")]
    return {
        "commit": _git_commit(read),
        "matrix": {"path": _rel(matrix_path), "sha256": _sha256(matrix_path)},
        "rates": {"path": _rel(rates_path), "sha256": _sha256(rates_path)},
        "runs": [{"run": d.name, "turns_sha256": _sha256(d / "turns.jsonl")} for d in dirs],
    }


def compute(matrix_path: Path, runs_root: Path, rates_path: Path) -> dict[str, Any]:
    """The whole capacity result (JSON-ready, floats rounded) for a matrix, a runs directory and a rates file."""
    matrix, _ = load_matrix(matrix_path)
    rates = yaml.safe_load(rates_path.read_text())
    dirs = run_dirs(runs_root)
    names, modes = {m.name for m in matrix.models}, {m.value for m in matrix.modes}
    recs = [rec for d in dirs for rec in read_run(d, names, modes)]
    used = sorted({rec.run for rec in recs})
    loads = workloads(recs)
    servers = plan(matrix)
    stacks = sorted({s["stack"] for s in servers})
    result = {
        "inputs": inputs(matrix_path, rates_path, [d for d in dirs if d.name in used]),
        "matrix": {
            "name": matrix.name,
            "servers": len(servers),
            "cells": sum(len(s["cells"]) for s in servers),
            "seed_runs": sum(seeds for s in servers for _, seeds, _ in s["cells"]),
            "turn_caps": sorted({cap for s in servers for *_, cap in s["cells"]}),
            "concurrency": matrix.concurrency,
            "modes": [m.value for m in matrix.modes],
            "models": [{"name": m.name, "params_b": rates["models"][m.name]["params_b"]} for m in matrix.models],
        },
        "reference_gpu": rates["reference_gpu"],
        "workload": {key: asdict(value) for key, value in loads.items()},
        "cpu_rates": cpu_rates(recs),
        "start_times": start_times(dirs),
        "gpu_start": {key: rates["gpu_start"][key] for key in ("container_s", "disk_read_gbs")},
        "decode_rules": decode_rules(rates, stacks),
        "efficiency_ceiling": rates["rules"]["efficiency_ceiling"]["value"],
        "harness_overhead_s": {bound: rates["harness_overhead_s"][bound] for bound in ("lower", "upper")},
        "gpu_rates": [
            {"stack": stack, "model": model, **gpu_rates(rates, stack, model)}
            for stack in stacks
            for model in sorted({m for s in servers if s["stack"] == stack for m, _, _ in s["cells"]})
        ],
        "per_server": estimate(servers, loads, rates, matrix.concurrency),
    }
    result["bounds"] = summarize(result["per_server"])
    if matrix.concurrency < GPUS_PER_BIG_HOST:  # what the published batching gains would buy
        alt = summarize(estimate(servers, loads, rates, GPUS_PER_BIG_HOST))
        result["at_concurrency_8"] = {bound: {"totals": v["totals"], "hosts": v["hosts"]} for bound, v in alt.items()}
        result["at_concurrency_8"]["gains"] = {s: concurrency_gain(rates, s, GPUS_PER_BIG_HOST) for s in stacks}
    return _sig(result)
