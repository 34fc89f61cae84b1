"""Does the executor choice cost a single-host run anything? `orchestrate matrix` on one small real matrix
(llama-server b11312 as a local process, smollm2-135m, greedy), run by the code before the executor existed
(a git worktree of `--base`, default the commit before issue 16) and by this checkout (executor: local, the
default), in alternating pairs (B N, N B, ...) so contention from other work hits both arms alike.

Measured per arm: wall time of the whole command (interpreter start, imports, manifest, server, seeds, report),
and whether `ray` was in sys.modules when the process ended (printed by an atexit hook; the checkout's local path
must never import it). Reported: medians, mins, the ratio of medians and the median of per-pair ratios.
Also the CLI's import time per arm (`import orchestrator.cli` in a fresh interpreter, alternated, 10 each): the
part of a run the executor's code could add to, measured without a server's noise.
The records of every run are checked to be the same in count (greedy decoding, the same server).

Writes benchmarks/results/executor.json and executor.md.
Run: .venv/bin/python benchmarks/bench_executor.py [--pairs 3] [--base f75eb91] (about 2 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = Path(__file__).resolve().parent / "results"
BASE = "f75eb91"  # the last commit before the executor (issue 16)
MATRIX = """\
name: executor-bench
stacks:
  - {stack: llamacpp, tool_config: jinja, launcher: process, ctx: 2048}
models:
  - name: smollm2-135m-instruct
    sources: {llamacpp: {asset: smollm2-135m-instruct}}
modes: [native, text-tools]
tasks:
  - {suite: ops, count: 2}
decoding: {temperature: 0.0, max_tokens: 24, seed: 11}
turn_cap: 2
bootstrap: {resamples: 200}
"""
# The CLI as `orchestrate` runs it, from the tree on sys.path first; at exit: was Ray ever imported?
RUNNER = (
    "import atexit, sys\n"
    "sys.path.insert(0, sys.argv.pop(1))\n"
    "atexit.register(lambda: print('RAY_IMPORTED=%s' % any(m == 'ray' or m.startswith('ray.') for m in sys.modules),"
    " file=sys.stderr))\n"
    "from orchestrator.cli import app\n"
    "sys.argv[0] = 'orchestrate'\n"
    "app()\n"
)


def run_once(tree: Path, matrix: Path, results: Path) -> dict[str, Any]:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tree), "matrix", str(matrix), "--results", str(results)],
        cwd=tree, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{tree}: orchestrate matrix failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    records = sum(1 for line in (run / "turns.jsonl").read_text().splitlines() if line.strip())
    imported = "RAY_IMPORTED=True" in done.stderr
    return {"wall_s": round(wall, 3), "records": records, "ray_imported": imported, "run": str(run)}


IMPORT = (
    "import sys, time\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "began = time.perf_counter()\n"
    "import orchestrator.cli\n"
    "print(time.perf_counter() - began)\n"
)


def import_time(tree: Path) -> float:
    command = [sys.executable, "-c", IMPORT, str(tree)]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def worktree(base: str, into: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", str(into), base], cwd=REPO, check=True, capture_output=True)
    return into


def summarise(arms: dict[str, list[dict[str, Any]]], imports: dict[str, list[float]]) -> dict[str, Any]:
    walls = {name: [run["wall_s"] for run in runs] for name, runs in arms.items()}
    pairs = [now / before for now, before in zip(walls["now"], walls["before"], strict=True)]
    return {
        "import_median_s": {name: round(statistics.median(values), 4) for name, values in imports.items()},
        "import_ratio_of_medians": round(statistics.median(imports["now"]) / statistics.median(imports["before"]), 4),
        "median_s": {name: statistics.median(values) for name, values in walls.items()},
        "min_s": {name: min(values) for name, values in walls.items()},
        "ratio_of_medians": round(statistics.median(walls["now"]) / statistics.median(walls["before"]), 4),
        "median_pair_ratio": round(statistics.median(pairs), 4),
        "ray_imported": {name: sorted({run["ray_imported"] for run in runs}) for name, runs in arms.items()},
        "records": {name: sorted({run["records"] for run in runs}) for name, runs in arms.items()},
    }


def write(summary: dict[str, Any], arms: dict[str, list[dict[str, Any]]], base: str, commit: str) -> None:
    OUT_DIR.mkdir(exist_ok=True)
    record = {"base": base, "now": commit, "cpus": os.cpu_count(), **summary, "runs": arms}
    (OUT_DIR / "executor.json").write_text(json.dumps(record, indent=1))
    med, low = summary["median_s"], summary["min_s"]
    lines = [
        "# The executor's cost on a single-host run (benchmarks/bench_executor.py)",
        "",
        f"`orchestrate matrix` (subprocess, whole command), llama-server b11312 process, smollm2-135m, 2 cells x "
        f"2 seeds, greedy; {len(arms['now'])} alternating pairs on {os.cpu_count()} CPUs. before: {base} (no "
        f"executor); now: {commit} (executor: local, the default).",
        "",
        "| arm | median s | min s | records per run | ray imported |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {med[name]} | {low[name]} | {summary['records'][name]} | {summary['ray_imported'][name]} |"
            for name in ("before", "now")
        ),
        "",
        f"Ratio now / before: {summary['ratio_of_medians']} (medians), {summary['median_pair_ratio']} "
        "(median of per-pair ratios).",
        "",
        f"`import orchestrator.cli` (fresh interpreter, 10 alternated per arm): before "
        f"{summary['import_median_s']['before']} s, now {summary['import_median_s']['now']} s (median); ratio "
        f"{summary['import_ratio_of_medians']}.",
    ]
    (OUT_DIR / "executor.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--base", default=BASE)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="bench-executor-") as tmp:
        work = Path(tmp)
        before_tree = worktree(args.base, work / "before")
        try:
            matrix = work / "executor-bench.yaml"
            matrix.write_text(MATRIX)
            trees = {"before": before_tree, "now": REPO}
            arms: dict[str, list[dict[str, Any]]] = {"before": [], "now": []}
            imports: dict[str, list[float]] = {"before": [], "now": []}
            for _ in range(10):
                for name in ("before", "now"):
                    imports[name].append(import_time(trees[name]))
            for pair in range(args.pairs):
                order = ("before", "now") if pair % 2 == 0 else ("now", "before")
                for name in order:
                    results = work / f"{name}-{pair}"
                    arms[name].append(run_once(trees[name], matrix, results))
                    print(name, arms[name][-1]["wall_s"], "s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=REPO, capture_output=True)
    summary = summarise(arms, imports)
    write(summary, arms, args.base, commit.stdout.strip())
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
