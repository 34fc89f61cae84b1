"""Capacity on paper: what a matrix (default `matrices/full.yaml`) costs on GPUs, from the committed runs.

The workload (requests per seed run, prompt and completion tokens per request, per stack) is measured in the
runs under `results/examples/*/` on the models the matrix shares with them; GPU time comes from published
single-stream figures in `scripts/capacity_rates.yaml`, scaled to the reference GPU by the rules written there.

    requests    = seed runs x requests per seed run        (lower: measured mean; upper: the turn cap)
    GPU seconds = prompt tokens / prefill tok/s + completion tokens / decode tok/s + requests x harness s/request
                  (+ each server's start),
                  divided by the stack's published concurrency gain at the matrix's concurrency

Usage: python scripts/capacity.py [--matrix M] [--runs DIR] [--rates Y] [--out DIR] [--check]
(writes OUT/capacity.json and OUT/capacity.md; --check compares them with what it computes and exits 1 on a
difference)."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from orchestrator.runner.matrix import Matrix, expand
from orchestrator.runner.matrixfile import load_matrix

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MATRIX = ROOT / "matrices" / "full.yaml"
DEFAULT_RUNS = ROOT / "results" / "examples"
DEFAULT_RATES = Path(__file__).resolve().with_name("capacity_rates.yaml")
DEFAULT_OUT = DEFAULT_RUNS / "capacity-full"
WINDOW_H = 10.0  # an overnight window
GPUS_PER_BIG_HOST = 8
MIN_CAP_FOR_TURNS = 6  # runs capped shorter say little about how long a seed runs: kept out of requests per seed
POOLED = "pooled"  # the workload of a stack no committed run measured: every measured stack together
DIGITS = 6  # significant digits kept in the output (a BLAS may differ in the last bits)


@dataclass(frozen=True)
class Rec:
    """One request of a committed run (a turn record): what the capacity arithmetic reads."""

    run: str
    cell_id: str
    seed: str
    seed_attempt: int
    stack: str
    model: str
    turn: int
    turn_cap: int
    prompt: int | None  # None: refused, nothing reached the model
    completion: int | None
    latency_s: float | None


@dataclass(frozen=True)
class Workload:
    """Per request and per seed run, from the records of one stack (or all: `pooled`)."""

    requests: int
    seed_runs: int  # seed runs of runs capped at MIN_CAP_FOR_TURNS or more
    requests_per_seed: float
    capped_share: float  # share of those seed runs that reached their cap (they would have gone on)
    prompt_per_request: float  # refusals count 0 tokens
    completion_per_request: float
    answered: int
    completion_per_answered: float
    prompt_at_turn0: float  # least squares over answered requests: prompt = a + b x turn
    prompt_growth_per_turn: float


def _sig(value: Any) -> Any:
    """Floats to DIGITS significant digits, recursively (the output is compared byte for byte by the test)."""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _sig(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_sig(item) for item in value]
    return value


def run_dirs(root: Path) -> list[Path]:
    """The committed runs directly under `root` (a directory with manifest.json and turns.jsonl)."""
    return sorted(p for p in root.iterdir() if (p / "turns.jsonl").is_file() and (p / "manifest.json").is_file())


def _caps(manifest: dict[str, Any]) -> dict[str, int]:
    matrix = manifest.get("matrix") or {}
    default = int(matrix.get("turn_cap", 40))
    return {str(m["name"]): int(m.get("turn_cap") or default) for m in matrix.get("models", [])}


def read_run(run_dir: Path, models: set[str], modes: set[str]) -> list[Rec]:
    """The run's requests on `models` in `modes`, agent loop only (no channels), superseded ones left out."""
    caps = _caps(json.loads((run_dir / "manifest.json").read_text()))
    recs: list[Rec] = []
    with (run_dir / "turns.jsonl").open() as lines:
        for line in lines:
            r = json.loads(line)
            if r.get("superseded") or r.get("channel") or r["model"] not in models or r["tools_mode"] not in modes:
                continue
            tokens = r.get("tokens") or {}
            recs.append(
                Rec(
                    run=run_dir.name,
                    cell_id=r["cell_id"],
                    seed=r["seed"],
                    seed_attempt=int(r.get("seed_attempt") or 0),
                    stack=r["stack"],
                    model=r["model"],
                    turn=int(r["turn"]),
                    turn_cap=caps.get(r["model"], 40),
                    prompt=tokens.get("prompt"),
                    completion=tokens.get("completion"),
                    latency_s=r.get("latency_s"),
                )
            )
    return recs


def _seed_lengths(recs: list[Rec]) -> list[tuple[int, bool]]:
    """(requests, reached its cap) per seed run, for runs capped at MIN_CAP_FOR_TURNS or more."""
    runs: dict[tuple[str, str, str, int], list[Rec]] = defaultdict(list)
    for rec in recs:
        if rec.turn_cap >= MIN_CAP_FOR_TURNS:
            runs[(rec.run, rec.cell_id, rec.seed, rec.seed_attempt)].append(rec)
    return [(len(group), max(r.turn for r in group) + 1 >= group[0].turn_cap) for group in runs.values()]


def workload(recs: list[Rec]) -> Workload:
    """Requests per seed run and tokens per request of a set of records (at least one answered)."""
    seeds = _seed_lengths(recs)
    answered = [r for r in recs if r.prompt is not None and r.completion is not None]
    turns = np.array([r.turn for r in answered], dtype=float)
    prompts = np.array([r.prompt for r in answered], dtype=float)
    if len(set(turns.tolist())) > 1:
        slope, intercept = np.polyfit(turns, prompts, 1)
    else:
        slope, intercept = 0.0, float(prompts.mean())
    return Workload(
        requests=len(recs),
        seed_runs=len(seeds),
        requests_per_seed=statistics.fmean(n for n, _ in seeds) if seeds else math.nan,
        capped_share=statistics.fmean(1.0 if capped else 0.0 for _, capped in seeds) if seeds else math.nan,
        prompt_per_request=sum(r.prompt or 0 for r in recs) / len(recs),
        completion_per_request=sum(r.completion or 0 for r in recs) / len(recs),
        answered=len(answered),
        completion_per_answered=sum(r.completion or 0 for r in answered) / len(answered),
        prompt_at_turn0=float(intercept),
        prompt_growth_per_turn=float(slope),
    )


def workloads(recs: list[Rec]) -> dict[str, Workload]:
    by_stack: dict[str, list[Rec]] = defaultdict(list)
    for rec in recs:
        by_stack[rec.stack].append(rec)
    found = {stack: workload(group) for stack, group in sorted(by_stack.items())}
    return {**found, POOLED: workload(recs)}


def cpu_rates(recs: list[Rec]) -> list[dict[str, Any]]:
    """Prefill and decode tokens/s per stack and model on the machine the runs ran on: least squares of
    latency_s = prompt / prefill + completion / decode over answered requests."""
    groups: dict[tuple[str, str], list[Rec]] = defaultdict(list)
    for rec in recs:
        if rec.prompt and rec.completion and rec.latency_s:
            groups[(rec.stack, rec.model)].append(rec)
    rows = []
    for (stack, model), group in sorted(groups.items()):
        design = np.array([[r.prompt, r.completion] for r in group], dtype=float)
        latency = np.array([r.latency_s for r in group], dtype=float)
        (per_prompt, per_completion), *_ = np.linalg.lstsq(design, latency, rcond=None)
        rows.append(
            {
                "stack": stack,
                "model": model,
                "requests": len(group),
                "prefill_tps": 1 / per_prompt if per_prompt > 0 else None,
                "decode_tps": 1 / per_completion if per_completion > 0 else None,
                "completion_tps_wall": sum(r.completion or 0 for r in group) / float(latency.sum()),
            }
        )
    return rows


def start_times(dirs: list[Path]) -> dict[str, dict[str, float]]:
    """Server readiness (launch to ready, seconds) per stack over every launch the runs' cell files record."""
    seen: dict[tuple[str, str, str, str], tuple[str, float]] = {}
    for run_dir in dirs:
        for cell_file in sorted((run_dir / "cells").glob("*.json")):
            cell = json.loads(cell_file.read_text())
            for launch in cell.get("launches") or []:
                if launch.get("ready_s") is not None:
                    key = (run_dir.name, cell["stack_label"], cell["model"], str(launch.get("started")))
                    seen[key] = (cell["stack"], float(launch["ready_s"]))
    by_stack: dict[str, list[float]] = defaultdict(list)
    for stack, ready in seen.values():
        by_stack[stack].append(ready)
    return {
        stack: {"launches": len(values), "median_s": statistics.median(values), "max_s": max(values)}
        for stack, values in sorted(by_stack.items())
    }


def _stack_spec(rates: dict[str, Any], stack: str) -> dict[str, Any]:
    spec = rates["stacks"][stack]
    return rates["stacks"][spec["same_as"]] if "same_as" in spec else spec


def decode_fit(rates: dict[str, Any], stack: str) -> tuple[float, float]:
    """(efficiency, step overhead s) of a stack's decode rule, solved from its published anchors."""
    spec = _stack_spec(rates, stack)
    anchors = spec["decode_anchors"]
    reads = [a["weight_bytes"] / (rates["gpus"][a["gpu"]]["bandwidth_gbs"] * 1e9) for a in anchors]
    steps = [1.0 / a["tokens_per_s"] for a in anchors]
    if len(anchors) >= 2:
        (inverse_eff, overhead), *_ = np.linalg.lstsq(np.array([[r, 1.0] for r in reads]), np.array(steps), rcond=None)
        return 1.0 / float(inverse_eff), float(overhead)
    efficiency, _ = decode_fit(rates, spec["efficiency_from"])
    return efficiency, steps[0] - reads[0] / efficiency


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
    step = weight_bytes(rates, stack, model) / (efficiency * ref["bandwidth_gbs"] * 1e9) + overhead
    anchor = (
        _stack_spec(rates, spec["prefill_from"])["prefill_anchor"] if "prefill_from" in spec else spec["prefill_anchor"]
    )
    compute = ref["dense_16bit_tflops"] / rates["gpus"][anchor["gpu"]]["dense_16bit_tflops"]
    prefill = anchor["tokens_per_s"] * anchor["params_b"] / rates["models"][model]["params_b"] * compute
    return {"prefill_tps": prefill, "decode_tps": 1.0 / step, "efficiency": efficiency, "step_overhead_s": overhead}


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
    starts: dict[str, dict[str, float]],
    concurrency: int,
) -> list[dict[str, Any]]:
    """Per server and bound: requests, tokens and GPU hours, per model inside it."""
    fallback_start = max((s["max_s"] for s in starts.values()), default=0.0)
    out = []
    for server in servers:
        stack = server["stack"]
        w, source = _stack_workload(loads, stack)
        gain = concurrency_gain(rates, stack, concurrency)
        start_s = starts[stack]["median_s"] if stack in starts else fallback_start
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
    starts = start_times(dirs)
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
        },
        "reference_gpu": rates["reference_gpu"],
        "workload": {key: asdict(value) for key, value in loads.items()},
        "cpu_rates": cpu_rates(recs),
        "start_times": starts,
        "gpu_rates": [
            {"stack": stack, "model": model, **gpu_rates(rates, stack, model)}
            for stack in stacks
            for model in sorted({m for s in servers if s["stack"] == stack for m, _, _ in s["cells"]})
        ],
        "per_server": estimate(servers, loads, rates, starts, matrix.concurrency),
    }
    result["bounds"] = summarize(result["per_server"])
    if matrix.concurrency < GPUS_PER_BIG_HOST:  # what the published batching gains would buy
        alt = summarize(estimate(servers, loads, rates, starts, GPUS_PER_BIG_HOST))
        result["at_concurrency_8"] = {bound: {"totals": v["totals"], "hosts": v["hosts"]} for bound, v in alt.items()}
    return _sig(result)


def _n(value: float) -> str:
    """A count or token total as the README shows it (k / M), a rate to 3 significant digits."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _stack_sum(rows: list[dict[str, Any]], stack: str) -> dict[str, float]:
    keys = ("seed_runs", "requests", "prompt_tokens", "completion_tokens", "gpu_h")
    return {key: sum(row[key] for row in rows if row["stack"] == stack) for key in keys}


def _table(result: dict[str, Any]) -> list[str]:
    lower, upper = result["bounds"]["lower"], result["bounds"]["upper"]
    rates = {(r["stack"], r["model"]): r for r in result["gpu_rates"]}
    lines = [
        "| stack | model | seed runs | requests | prompt tokens | completion tokens | prefill / decode tok/s | GPU-h |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for low, high in zip(lower["rows"], upper["rows"], strict=True):
        rate = rates[(low["stack"], low["model"])]
        lines.append(
            f"| {low['stack']} | {low['model']} | {_n(low['seed_runs'])} | {_n(low['requests'])}–{_n(high['requests'])}"
            f" | {_n(low['prompt_tokens'])}–{_n(high['prompt_tokens'])}"
            f" | {_n(low['completion_tokens'])}–{_n(high['completion_tokens'])}"
            f" | {_n(rate['prefill_tps'])} / {_n(rate['decode_tps'])} | {low['gpu_h']:.3f}–{high['gpu_h']:.3f} |"
        )
    lines += ["", "Per stack (tool configurations and models summed):", "", *lines[:2]]
    for stack in dict.fromkeys(row["stack"] for row in lower["rows"]):
        low, high = (_stack_sum(bound["rows"], stack) for bound in (lower, upper))
        lines.append(
            f"| {stack} | | {_n(low['seed_runs'])} | {_n(low['requests'])}–{_n(high['requests'])}"
            f" | {_n(low['prompt_tokens'])}–{_n(high['prompt_tokens'])}"
            f" | {_n(low['completion_tokens'])}–{_n(high['completion_tokens'])}"
            f" | | {low['gpu_h']:.3f}–{high['gpu_h']:.3f} |"
        )
    lt, ut = lower["totals"], upper["totals"]
    lines.append(
        f"| **total** | | {_n(lt['seed_runs'])} | {_n(lt['requests'])}–{_n(ut['requests'])}"
        f" | {_n(lt['prompt_tokens'])}–{_n(ut['prompt_tokens'])} | {_n(lt['completion_tokens'])}–"
        f"{_n(ut['completion_tokens'])} | | {lt['gpu_h']:.2f}–{ut['gpu_h']:.2f} (+{lt['start_h']:.2f} starts) |"
    )
    return lines


def _workload_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        "| measured on | requests | seed runs (cap >= 6) | requests / seed run | reached cap | prompt / request"
        " | completion / request | prompt = a + b x turn |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, w in sorted(result["workload"].items(), key=lambda item: (item[0] == POOLED, item[0])):
        lines.append(
            f"| {name} | {w['requests']} | {w['seed_runs']} | {w['requests_per_seed']:.2f} | {w['capped_share']:.0%}"
            f" | {w['prompt_per_request']:.0f} | {w['completion_per_request']:.1f}"
            f" | {w['prompt_at_turn0']:.0f} + {w['prompt_growth_per_turn']:.1f} x turn |"
        )
    return lines


def _cpu_lines(result: dict[str, Any]) -> list[str]:
    lines = ["| stack | model | requests | prefill tok/s | decode tok/s | completion tok/s of wall time |"]
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in result["cpu_rates"]:
        prefill = "—" if r["prefill_tps"] is None else f"{r['prefill_tps']:.3g}"
        decode = "—" if r["decode_tps"] is None else f"{r['decode_tps']:.3g}"
        lines.append(
            f"| {r['stack']} | {r['model']} | {r['requests']} | {prefill} | {decode} | {r['completion_tps_wall']:.3g} |"
        )
    starts = ", ".join(
        f"{stack} median {s['median_s']:.1f} s (max {s['max_s']:.1f} s, {s['launches']} launches)"
        for stack, s in result["start_times"].items()
    )
    return [*lines, "", f"Server start (launch to ready) on that CPU: {starts}."]


def _hosts_line(name: str, bound: dict[str, Any]) -> str:
    h, half = bound["hosts"], bound["hosts_at_half_rate"]
    return (
        f"- {name}: {bound['totals']['gpu_h'] + bound['totals']['start_h']:.2f} GPU-h with starts; "
        f"{h['hosts_1gpu']} one-GPU host(s) ({h['hosts_8gpu']} eight-GPU host), longest stream "
        f"{h['longest_stream_h']:.2f} h of {h['window_h']:.0f} h; at half the derived GPU rates: "
        f"{half['hosts_1gpu']} one-GPU host(s), longest stream {half['longest_stream_h']:.2f} h"
    )


def render(result: dict[str, Any]) -> str:
    """capacity.md: the numbers of capacity.json as tables."""
    m, inp = result["matrix"], result["inputs"]
    lines = [
        f"# Capacity on paper: `{inp['matrix']['path']}`",
        "",
        f"Generated by `python scripts/capacity.py` from {inp['matrix']['path']} (sha256 "
        f"{inp['matrix']['sha256'][:12]}), {inp['rates']['path']} (sha256 {inp['rates']['sha256'][:12]}) and the "
        f"committed runs {', '.join(r['run'] for r in inp['runs'])} (last commit touching these inputs: "
        f"{inp['commit']}).",
        "",
        f"Matrix `{m['name']}`: {m['servers']} servers, {m['cells']} cells, {_n(m['seed_runs'])} seed runs, turn cap "
        f"{', '.join(map(str, m['turn_caps']))}, concurrency {m['concurrency']}. Reference GPU: "
        f"{result['reference_gpu']}, one server at a time per GPU.",
        "",
        "## Workload per request, measured (models the matrix shares with the runs)",
        "",
        *_workload_lines(result),
        "",
        "## CPU rates measured (2 cores; least squares of latency on prompt and completion tokens)",
        "",
        *_cpu_lines(result),
        "",
        "## GPU-hours per stack and model (lower bound – upper bound)",
        "",
        "Lower: measured requests per seed run and tokens per request. Upper: every seed run to the turn cap,",
        "prompts growing by the fitted tokens per turn, every request answered.",
        "GPU s = prompt tokens / prefill tok/s + completion tokens / decode tok/s + requests x harness s/request",
        "(rates and the harness's per-request time, lower/upper: capacity_rates.yaml).",
        "",
        *_table(result),
        "",
        "## Hosts for an overnight window",
        "",
        _hosts_line("lower bound", result["bounds"]["lower"]),
        _hosts_line("upper bound", result["bounds"]["upper"]),
    ]
    alt = result.get("at_concurrency_8")
    if alt:
        lines.append(
            f"- at concurrency 8 (published gains: vLLM, SGLang only): {alt['lower']['totals']['gpu_h']:.2f}–"
            f"{alt['upper']['totals']['gpu_h']:.2f} GPU-h before starts"
        )
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (out / "capacity.md").write_text(render(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--rates", type=Path, default=DEFAULT_RATES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="compare with the files in --out; write nothing")
    args = parser.parse_args(argv)
    result = compute(args.matrix, args.runs, args.rates)
    if args.check:
        same = (args.out / "capacity.json").read_text() == json.dumps(result, indent=1, sort_keys=True) + "\n"
        same = same and (args.out / "capacity.md").read_text() == render(result)
        print("capacity output up to date" if same else f"capacity output in {args.out} differs: regenerate it")
        return 0 if same else 1
    write(result, args.out)
    print((args.out / "capacity.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
