"""Capacity on paper, the workload half: what the committed runs measured (requests per seed run, tokens per
request, CPU rates, server readiness), read from their turn records and cell files."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MIN_CAP_FOR_TURNS = 6  # runs capped shorter say little about how long a seed runs: kept out of requests per seed
POOLED = "pooled"  # the workload of a stack no committed run measured: every measured stack together


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
