"""What the harness costs in wall time, against baselines measured in the same run on the same llama-server.

1. Agent loop vs a raw httpx loop. One llama-server (b11312, a local process) is started once. The same seeds
   run (a) through the sweep's own per-cell path, `Sweep.run_seeds` (build the mode's request, send it, label
   it, the server's prompt count, write the turn record to a real RunStore's turns.jsonl and flush, run the dry
   tools, continue), and (b) as a plain httpx loop replaying byte-identical request bodies, captured from an
   untimed harness pass: every chat request plus the per-seed slot erase (GET /slots, POST erase), so the
   server does the same prompt work in both arms. The harness's own extra requests (POST /apply-template and
   /tokenize per turn: the truncation check) are harness cost and only in (a). Decoding is greedy (temperature
   0, fixed seed); the answers and the server's token counts are checked identical across every pass.
   The arms alternate (H R, R H, H R, ...) so CPU contention from other work on the machine hits both alike;
   reported: each arm's median and min, the ratio of medians, of mins, and the median of per-pair ratios.
2. A small real matrix (`orchestrate matrix`, a subprocess: interpreter start and imports included): its wall
   time against the server's own prompt + generation time (llama.cpp's `timings` in each reply body, kept in the
   turn records' raw_body), and the share of wall time per phase (launch, readiness, probe, seeds, teardown,
   from the run's servers.jsonl); per server: start, readiness (model load) and teardown seconds.

Writes benchmarks/results/overhead.json and overhead.md.
Run: .venv/bin/python benchmarks/overhead.py [--pairs 3] [--model smollm2-135m-instruct] (about 3 min on 2 cores)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from orchestrator.core.types import SCHEMA_VERSION
from orchestrator.runner.config.cellconfig import cell_config
from orchestrator.runner.config.matrix import expand
from orchestrator.runner.config.matrixfile import load_matrix
from orchestrator.runner.run.provenance import host_facts
from orchestrator.runner.store.runstore import RunStore, counted_turns
from orchestrator.runner.sweep.progress import SweepProgress
from orchestrator.runner.sweep.session import ServerSession, launch_config
from orchestrator.runner.sweep.sweep import Sweep
from orchestrator.serving.launchers import start_server
from orchestrator.serving.probe import probe

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = Path(__file__).resolve().parent / "results"
REPLAYED_PATHS = ("/v1/chat/completions", "/v1/completions", "/slots")  # what the raw loop sends too

AB_MATRIX = """\
name: overhead
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process, ctx: 2048}}
models:
  - name: {model}
    sources: {{llamacpp: {{asset: {model}}}}}
modes: [{mode}]
tasks:
  - {{suite: ops, count: {seeds}}}
decoding: {{temperature: 0.0, max_tokens: {max_tokens}, seed: 11}}
turn_cap: {turn_cap}
bootstrap: {{resamples: 200}}
"""

PHASE_MATRIX = """\
name: overhead-phases
stacks:
  - {stack: llamacpp, tool_config: jinja, launcher: process, ctx: 2048}
models:
  - name: qwen2.5-coder-0.5b-instruct
    sources: {llamacpp: {asset: qwen2.5-coder-0.5b-instruct}}
  - name: smollm2-135m-instruct
    sources: {llamacpp: {asset: smollm2-135m-instruct}}
modes: [constrained, text-tools]
tasks:
  - {suite: ops, count: 1}
decoding: {temperature: 0.0, max_tokens: 16, seed: 11}
turn_cap: 2
bootstrap: {resamples: 200}
"""


def server_ms(body: Any) -> float:
    timings = body.get("timings") if isinstance(body, dict) else None
    if not isinstance(timings, dict):
        return 0.0
    return float(timings.get("prompt_ms") or 0.0) + float(timings.get("predicted_ms") or 0.0)


def work_of(body: Any) -> tuple[Any, ...]:
    """What the server did for one chat request: its answer and its own token counts."""
    if not isinstance(body, dict):
        return (repr(body),)
    timings = body.get("timings") or {}
    choice = (body.get("choices") or [{}])[0]
    answer = (choice.get("message") or {}).get("content") if "message" in choice else choice.get("text")
    calls = (choice.get("message") or {}).get("tool_calls")
    return (answer, json.dumps(calls), timings.get("prompt_n"), timings.get("cache_n"), timings.get("predicted_n"))


class AgentLoopBench:
    """One server, one cell; the harness arm is the sweep's own `run_seeds` into a fresh RunStore each pass."""

    def __init__(self, matrix_path: Path, work: Path) -> None:
        self.matrix, _ = load_matrix(matrix_path)
        (self.plan,) = expand(self.matrix)
        self.cell = self.plan.cells[0]
        self.work = work
        self.config = launch_config(self.matrix, self.plan)
        self.handle = start_server(self.config, "bench-overhead", log_dir=work / "logs")
        self.base_url = self.handle.base_url
        self.probe = probe(self.handle, self.config)
        self.base = cell_config(
            self.matrix, self.cell, self.handle, self.config, self.probe, resolved=self.matrix.suites()
        )
        # run_seeds reads only the session's handle: the one server started above serves every pass.
        self.session = ServerSession(self.config, "bench-overhead", work / "logs")
        self.session._handle = self.handle
        self.passes = 0

    def close(self) -> None:
        self.handle.stop()

    def harness(self) -> tuple[float, list[dict[str, Any]]]:
        """One timed pass through the sweep's per-cell path; returns its wall seconds and its turn records."""
        self.passes += 1
        store = RunStore(self.work / f"harness-{self.passes}")
        store.create({"schema_version": SCHEMA_VERSION, "run_id": store.dir.name})
        sweep = Sweep(self.matrix, store, Console(file=io.StringIO()))
        with SweepProgress(sweep.console, plain=True) as progress:
            sweep.progress = progress
            task = progress.add_task("bench", total=len(self.cell.seeds))
            start = time.perf_counter()
            died = sweep.run_seeds(self.cell, self.session, self.base, self.config, self.cell.seeds, progress, task)
            wall = time.perf_counter() - start
        store.close()
        sweep.streams.close()
        assert not died, "the server died under the benchmark"
        return wall, store.read_turns()

    def capture(self) -> list[tuple[str, str, bytes]]:
        """An untimed harness pass with every request's method, URL and body bytes recorded off the wire."""
        sent: list[tuple[str, str, bytes]] = []
        original = httpx.Client.send

        def send(client: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            sent.append((request.method, str(request.url), request.read()))
            return original(client, request, **kwargs)

        httpx.Client.send = send  # type: ignore[method-assign]
        try:
            self.harness()
        finally:
            httpx.Client.send = original  # type: ignore[method-assign]
        return [(m, u, b) for m, u, b in sent if u.startswith(self.base_url)]

    @staticmethod
    def raw(requests: list[tuple[str, str, bytes]]) -> tuple[float, list[Any]]:
        """The baseline: the same requests, byte for byte, from a bare httpx loop (replies decoded)."""
        headers = {"Content-Type": "application/json"}
        bodies = []
        start = time.perf_counter()
        with httpx.Client(timeout=600) as client:
            for method, url, content in requests:
                reply = client.request(method, url, content=content or None, headers=headers if content else None)
                body = reply.json()
                if "/slots" not in url:
                    bodies.append(body)
        return time.perf_counter() - start, bodies


def summary(values: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(values), 3), "min_s": round(min(values), 3)}


def agent_loop_vs_raw(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    matrix_path = work / "ab.yaml"
    matrix_path.write_text(
        AB_MATRIX.format(
            model=args.model, mode=args.mode, seeds=args.seeds, max_tokens=args.max_tokens, turn_cap=args.turn_cap
        )
    )
    bench = AgentLoopBench(matrix_path, work)
    try:
        wire = bench.capture()
        replayed = [r for r in wire if any(p in r[1] for p in REPLAYED_PATHS)]
        harness_only = sorted({httpx.URL(u).path for _, u, _ in wire} - {httpx.URL(u).path for _, u, _ in replayed})
        reference: list[tuple[Any, ...]] | None = None
        harness_s: list[float] = []
        raw_s: list[float] = []
        server_s: dict[str, list[float]] = {"harness": [], "raw": []}
        turns = 0
        for pair in range(args.pairs):
            order = ("harness", "raw") if pair % 2 == 0 else ("raw", "harness")
            for arm in order:
                if arm == "harness":
                    wall, records = bench.harness()
                    bodies = [r["raw_body"] for r in records]
                    harness_s.append(wall)
                    turns = len(records)
                else:
                    wall, bodies = bench.raw(replayed)
                    raw_s.append(wall)
                server_s[arm].append(sum(server_ms(b) for b in bodies) / 1000)
                work_done = [work_of(b) for b in bodies]
                reference = reference or work_done
                if work_done != reference:
                    raise SystemExit(f"{arm} pass {pair}: the server did other work than the first pass (not greedy?)")
                print(f"  pair {pair + 1} {arm:7s} {wall:7.3f} s", flush=True)
        pair_ratios = [h / r for h, r in zip(harness_s, raw_s, strict=True)]
        return {
            "model": args.model,
            "mode": args.mode,
            "seeds": args.seeds,
            "turns_per_pass": turns,
            "chat_requests_per_pass": len([r for r in replayed if "/slots" not in r[1]]),
            "replayed_requests_per_pass": len(replayed),
            "harness_only_requests_per_pass": len(wire) - len(replayed),
            "harness_only_paths": harness_only,
            "pairs": args.pairs,
            "order": "alternating: H R, R H, ...",
            "identical_server_work": True,
            "harness": {**summary(harness_s), "runs_s": [round(v, 3) for v in harness_s]},
            "raw": {**summary(raw_s), "runs_s": [round(v, 3) for v in raw_s]},
            "server_time_s": {arm: round(statistics.median(v), 3) for arm, v in server_s.items()},
            "ratio_of_medians": round(statistics.median(harness_s) / statistics.median(raw_s), 4),
            "ratio_of_mins": round(min(harness_s) / min(raw_s), 4),
            "median_pair_ratio": round(statistics.median(pair_ratios), 4),
            "pair_ratios": [round(v, 4) for v in pair_ratios],
            "goal": "<= 1.02",
        }
    finally:
        bench.close()


def matrix_phases(work: Path) -> dict[str, Any]:
    matrix_path = work / "phases.yaml"
    matrix_path.write_text(PHASE_MATRIX)
    results = work / "phase-runs"
    command = [sys.executable, "-m", "orchestrator", "matrix", str(matrix_path), "--results", str(results)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"orchestrate matrix failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    store = RunStore(run)
    servers = [json.loads(line) for line in (run / "servers.jsonl").read_text().splitlines() if line.strip()]
    records = counted_turns(store.read_turns())
    server_compute = sum(server_ms(r.get("raw_body")) for r in records) / 1000
    phases = {
        name: round(sum(s["phases_s"][name] for s in servers), 3)
        for name in ("launch", "readiness", "probe", "seeds", "teardown")
    }
    in_seeds_harness = phases["seeds"] - server_compute
    other = wall - sum(phases.values())
    shares = {name: round(value / wall, 4) for name, value in phases.items()}
    shares["seeds: server prompt+generation"] = round(server_compute / wall, 4)
    shares["seeds: harness (HTTP, labelling, records, prompt count, cache reset, tools)"] = round(
        in_seeds_harness / wall, 4
    )
    shares["outside servers (interpreter, imports, manifest, provenance, matrix load)"] = round(other / wall, 4)
    cells = store.read_cells()
    return {
        "matrix": PHASE_MATRIX,
        "wall_s": round(wall, 3),
        "manifest_wall_s": store.manifest().get("wall_s"),
        "turns": len(records),
        "cells": len(cells),
        "server_prompt_plus_generation_s": round(server_compute, 3),
        "wall_over_server_time": round(wall / server_compute, 3) if server_compute else None,
        "seeds_over_server_time": round(phases["seeds"] / server_compute, 3) if server_compute else None,
        "phases_s": phases,
        "shares_of_wall": shares,
        "startup": [
            {
                "stack_config": s["stack_config"],
                "models": s["models"],
                "launches": len(s["launches"]),
                "start_s": s["launches"][0].get("start_s"),
                "ready_s": round(s["launches"][0].get("ready_s") or 0.0, 3),
                "teardown_s": s["launches"][0].get("teardown_s"),
                "probe_s": s["phases_s"]["probe"],
                "cells": len(s["cells"]),
            }
            for s in servers
        ],
        "launches_per_server_group": {s["server_id"]: len(s["launches"]) for s in servers},
    }


def markdown(result: dict[str, Any]) -> str:
    ab, ph = result["agent_loop_vs_raw"], result["matrix_phases"]
    host = result["host"]
    lines = [
        "# Harness overhead (benchmarks/overhead.py)",
        "",
        f"Machine: {host['cpus']} CPUs, no GPU, {host['platform']}; shared with other work, so the arms were "
        "interleaved (H R, R H, ...) and both medians and minimums are given.",
        "",
        "## Agent loop vs raw httpx loop, same llama-server, byte-identical request bodies",
        "",
        f"{ab['model']}, mode {ab['mode']}, {ab['seeds']} seeds, {ab['turns_per_pass']} turns and "
        f"{ab['chat_requests_per_pass']} chat requests per pass, {ab['pairs']} pairs; greedy decoding, the server's "
        "answers and token counts identical in every pass. The raw loop replays the chat requests and the per-seed "
        f"slot erase ({ab['replayed_requests_per_pass']} requests); the harness also sends "
        f"{ab['harness_only_requests_per_pass']} requests of its own ({', '.join(ab['harness_only_paths'])}: the "
        "per-turn prompt count).",
        "",
        "| arm | median s | min s | server prompt+gen s (median) |",
        "|---|---|---|---|",
        f"| harness (Sweep.run_seeds -> turns.jsonl) | {ab['harness']['median_s']} | {ab['harness']['min_s']} | "
        f"{ab['server_time_s']['harness']} |",
        f"| raw httpx loop (baseline) | {ab['raw']['median_s']} | {ab['raw']['min_s']} | "
        f"{ab['server_time_s']['raw']} |",
        "",
        f"Ratio harness / raw: {ab['ratio_of_medians']} (medians), {ab['ratio_of_mins']} (mins), "
        f"{ab['median_pair_ratio']} (median of per-pair ratios); goal {ab['goal']}.",
        "",
        "## A small real matrix: wall time by phase",
        "",
        f"`orchestrate matrix` (subprocess), {ph['cells']} cells, {ph['turns']} turns: wall {ph['wall_s']} s "
        f"(manifest wall_s {ph['manifest_wall_s']}); the server's own prompt+generation time "
        f"{ph['server_prompt_plus_generation_s']} s; wall / server time {ph['wall_over_server_time']}, "
        f"seeds phase / server time {ph['seeds_over_server_time']}.",
        "",
        "| phase | seconds | share of wall |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {ph['phases_s'][name]} | {ph['shares_of_wall'][name]:.1%} |" for name in ph["phases_s"]]
    extra = [(name, share) for name, share in ph["shares_of_wall"].items() if name not in ph["phases_s"]]
    lines += [f"| {name} | | {share:.1%} |" for name, share in extra]
    lines += [
        "",
        "Startup per server group (each started once):",
        "",
        "| stack config | model | starts | launch s | readiness (model load) s | probe s | teardown s | cells |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['stack_config']} | {', '.join(s['models'])} | {s['launches']} | {s['start_s']} | {s['ready_s']} | "
        f"{s['probe_s']} | {s['teardown_s']} | {s['cells']} |"
        for s in ph["startup"]
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--mode", default="constrained")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--turn-cap", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        work = Path(tmp)
        print("agent loop vs raw httpx loop:", flush=True)
        ab = agent_loop_vs_raw(args, work)
        print(
            f"harness median {ab['harness']['median_s']} s (min {ab['harness']['min_s']}), raw median "
            f"{ab['raw']['median_s']} s (min {ab['raw']['min_s']}): ratio x{ab['ratio_of_medians']} (medians), "
            f"x{ab['ratio_of_mins']} (mins), x{ab['median_pair_ratio']} (median pair); goal {ab['goal']}",
            flush=True,
        )
        print("small matrix by phase:", flush=True)
        phases = matrix_phases(work)
    result = {"host": host_facts(), "agent_loop_vs_raw": ab, "matrix_phases": phases}
    print(
        f"matrix wall {phases['wall_s']} s, server prompt+generation {phases['server_prompt_plus_generation_s']} s "
        f"(wall x{phases['wall_over_server_time']})"
    )
    for name, share in phases["shares_of_wall"].items():
        print(f"  {name}: {share:.1%}")
    for s in phases["startup"]:
        print(
            f"  {s['stack_config']} {'+'.join(s['models'])}: {s['launches']} start(s), launch {s['start_s']} s, "
            f"ready {s['ready_s']} s, probe {s['probe_s']} s, teardown {s['teardown_s']} s"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "overhead.md").write_text(markdown(result))
    print(f"wrote {args.out / 'overhead.json'} and {args.out / 'overhead.md'}")


if __name__ == "__main__":
    main()
