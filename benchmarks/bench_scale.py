"""Statistics and report at scale, each against baselines measured in the same run.

1. Bootstrap: 1,000 cells x 8 seeds x 10,000 resamples. `bootstrap_mean_intervals` (one batch, what the report
   and `stats` use) vs `scipy.stats.bootstrap` (percentile, vectorised over the cells) vs the one-cell function
   called per cell. The batch's intervals are checked equal to the one-cell function's.
2. `orchestrate stats` and `orchestrate report` over a synthetic run of 1M turn records shaped like the committed
   examples (benchmarks/scalegen.py: real records, real sizes, ~2.4 KB a line: 2.3 GiB), each a subprocess (interpreter
   start and imports included), timed with its peak RSS (os.wait4). Baselines in the same run: the I/O floor
   (reading every byte of turns.jsonl) and the parse floor (msgspec decoding the five key fields of every line,
   the least any reader of the records pays).
3. The full-record reader (every field as a Python dict: what `report --reclassify` reads, and what `report` read
   before) over 100k of the same records, for its memory per turn.

Writes benchmarks/results/scale.json and scale.md.
Run: .venv/bin/python benchmarks/bench_scale.py [--turns 1000000] [--workdir DIR] (about 3 min on 2 cores;
the 2.3 GiB run is generated once per workdir and reused).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.core.stats import BootstrapSettings, bootstrap_mean_interval, bootstrap_mean_intervals  # noqa: E402

ORCHESTRATE = str(Path(sys.executable).with_name("orchestrate"))
REPEATS = 3  # each command's median and maximum are reported
GOALS = {"bootstrap_s": 1.0, "report_s": 10.0, "report_rss_mb": 2048, "stats_s": 10.0, "stats_rss_mb": 2048}


def best_of(fn: Any, repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def bench_bootstrap(cells: int = 1000, seeds: int = 8, repeats: int = 3) -> dict[str, Any]:
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(12)
    values = rng.integers(0, 9, size=(cells, seeds)) / 8  # per-seed fidelities: k valid of 8 eligible turns
    settings = BootstrapSettings()
    groups = list(values)
    batch_s, batch = best_of(lambda: bootstrap_mean_intervals(groups, settings), repeats)
    loop_s, loop = best_of(lambda: [bootstrap_mean_interval(g, settings) for g in groups], 1)

    def scipy_run() -> Any:
        return scipy_stats.bootstrap(
            (values,), np.mean, axis=-1, n_resamples=settings.resamples, method="percentile",
            vectorized=True, random_state=settings.rng_seed,
        )  # fmt: skip

    scipy_s, _ = best_of(scipy_run, repeats)
    return {
        "cells": cells,
        "seeds": seeds,
        "resamples": settings.resamples,
        "batch_s": round(batch_s, 3),
        "scipy_s": round(scipy_s, 3),
        "per_cell_loop_s": round(loop_s, 3),
        "scipy_over_batch": round(scipy_s / batch_s, 2),
        "loop_over_batch": round(loop_s / batch_s, 2),
        "batch_equals_per_cell": batch == loop,
    }


# The timed command runs under this small launcher: a child's peak RSS (ru_maxrss) counts the memory of the process
# it was forked from, so the benchmark's own (the generator, scipy) must not be that process.
LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_pid, status, usage = os.wait4(child.pid, 0)
wall = time.perf_counter() - start
tail = child.stderr.read().decode(errors="replace")[-300:]
print(json.dumps({"wall_s": wall, "maxrss_kb": usage.ru_maxrss, "rc": os.waitstatus_to_exitcode(status), "tail": tail}))
"""


def timed_child(argv: list[str]) -> dict[str, Any]:
    """Wall seconds and peak RSS (MiB) of one command, and its exit status (measured by LAUNCHER)."""
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *argv], capture_output=True, text=True, check=True)
    measured = json.loads(done.stdout)
    return {
        "argv": " ".join(Path(a).name if a.startswith("/") else a for a in argv),
        "wall_s": round(measured["wall_s"], 2),
        "peak_rss_mb": round(measured["maxrss_kb"] / 1024),
        "rc": measured["rc"],
        "stderr_tail": measured["tail"],
    }


FLOOR_IO = """
import sys
with open(sys.argv[1], "rb") as handle:
    while handle.read(16 << 20):
        pass
"""
FLOOR_PARSE = """
import sys
from typing import TypedDict
import msgspec
from orchestrator.core.jsonl import iter_chunks
class Key(TypedDict):
    cell_id: str
    seed: str
    turn: int
    outcome: str
    tools_mode: str
decode, n = msgspec.json.Decoder(Key).decode_lines, 0
with open(sys.argv[1], "rb") as handle:
    for chunk in iter_chunks(handle):
        n += len(decode(chunk.data))
print(n)
"""
FULL_READER = """
import resource, sys, time
from pathlib import Path
from orchestrator.runner.store.runstore import RunStore
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
records = RunStore(Path(sys.argv[1])).read_turns()
print(len(records), time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def bench_run(run_dir: Path) -> dict[str, Any]:
    turns = run_dir / "turns.jsonl"
    python = sys.executable
    timed_child([python, "-c", FLOOR_IO, str(turns)])  # warm the page cache: every arm reads from memory
    arms = {
        "floor_io": [python, "-c", FLOOR_IO, str(turns)],
        "floor_parse": [python, "-c", FLOOR_PARSE, str(turns)],
        "stats": [ORCHESTRATE, "stats", "--json", str(turns)],
        "report": [ORCHESTRATE, "report", str(run_dir)],
    }
    out: dict[str, Any] = {"turn_records": sum(1 for _ in turns.open("rb"))}
    out["file_mb"] = round(turns.stat().st_size / 2**20)
    for name in arms:  # each arm REPEATS times, interleaved: the floors and the commands alike
        out[name] = {"runs": []}
    for _ in range(REPEATS):
        for name, argv in arms.items():
            out[name]["runs"].append(timed_child(argv))
    for name in arms:
        runs = out[name]["runs"]
        walls = sorted(run["wall_s"] for run in runs)
        out[name] |= {"wall_s": walls[len(walls) // 2], "wall_max_s": walls[-1],
                      "peak_rss_mb": max(run["peak_rss_mb"] for run in runs),
                      "rc": max(run["rc"] for run in runs)}  # fmt: skip
    for arm in ("stats", "report"):
        out[arm]["over_parse_floor"] = round(out[arm]["wall_s"] / out["floor_parse"]["wall_s"], 2)
        out[arm]["over_io_floor"] = round(out[arm]["wall_s"] / out["floor_io"]["wall_s"], 2)
    return out


PAGE_LOAD = """
import sys, statistics
sys.path.insert(0, sys.argv[1])
from tests.browser import visit
from pathlib import Path
page, blank = Path(sys.argv[2]), Path(sys.argv[3])
loads = {name: [] for name in ("page", "blank")}
for _ in range(3):
    for name, path in (("page", page), ("blank", blank)):
        (seen,) = visit(path)
        loads[name].append(seen.load_ms)
        if name == "page":
            shown = seen
bad = len(shown.console_errors) + len(shown.foreign_requests)
print(statistics.median(loads["page"]), statistics.median(loads["blank"]), bad, len(shown.bars), len(shown.markers))
"""


def bench_page(run_dir: Path) -> dict[str, Any]:
    """What `report` wrote for a person: index.html and the drill-down pages (sizes, rows), and the time headless
    chromium takes to load index.html (navigation loadEventEnd, median of 3) beside a blank page's."""
    report = run_dir / "report"
    pages = list((report / "cells").glob("*.html"))
    rows = sum(page.read_text(encoding="utf-8").count('<tr class="turn') for page in pages)
    out: dict[str, Any] = {
        "index_mb": round((report / "index.html").stat().st_size / 2**20, 2),
        "cells": len(list((run_dir / "cells").glob("*.json"))),
        "cell_pages": len(pages),
        "cell_pages_mb": round(sum(p.stat().st_size for p in pages) / 2**20, 1),
        "drilldown_rows": rows,
    }
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return out | {"load": "not measured: no chromium"}
    blank = run_dir / "blank.html"
    blank.write_text("<!DOCTYPE html><title>blank</title>")
    done = subprocess.run([sys.executable, "-c", PAGE_LOAD, str(ROOT), str(report / "index.html"), str(blank)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        return out | {"load": f"not measured: {done.stderr.strip().splitlines()[-1:]}"}
    page_ms, blank_ms, bad, bars, markers = done.stdout.split()
    return out | {"load_ms": round(float(page_ms)), "blank_load_ms": round(float(blank_ms)),
                  "console_errors_or_requests": int(bad), "bars": int(bars), "markers": int(markers)}  # fmt: skip


def generate_in_child(run_dir: Path, turns: int) -> None:
    """benchmarks/scalegen.py in a process of its own (this one stays small: see LAUNCHER)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scalegen.py"), str(run_dir), str(turns)], check=True)


def bench_full_reader(workdir: Path, turns: int = 100_000) -> dict[str, Any]:
    run_dir = workdir / f"run-{turns}"
    if not (run_dir / "turns.jsonl").is_file():
        generate_in_child(run_dir, turns)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FULL_READER, str(run_dir)], capture_output=True, text=True, env=env)
    count, seconds, rss_kb = done.stdout.split()
    return {
        "turn_records": int(count),
        "read_s": round(float(seconds), 2),
        "rss_mb": round(int(rss_kb) / 1024),
        "kb_per_turn": round(int(rss_kb) / int(count), 1),
    }


def markdown(result: dict[str, Any]) -> str:
    boot, run, full = result["bootstrap"], result["run"], result["full_reader"]
    lines = [
        "# Statistics and report at scale (benchmarks/bench_scale.py)",
        "",
        f"Machine: {result['machine']}. Every figure below is from one run of the script; baselines beside each.",
        "",
        f"## Bootstrap: {boot['cells']} cells x {boot['seeds']} seeds x {boot['resamples']} resamples",
        "",
        "| arm | seconds (best of 3) | ratio to ours |",
        "|---|---|---|",
        f"| ours: `bootstrap_mean_intervals` (one batch) | {boot['batch_s']} | 1.00 |",
        f"| scipy.stats.bootstrap (percentile, vectorised) | {boot['scipy_s']} | {boot['scipy_over_batch']} |",
        f"| one-cell function per cell | {boot['per_cell_loop_s']} | {boot['loop_over_batch']} |",
        "",
        f"Batch intervals identical to the one-cell function's: {boot['batch_equals_per_cell']}. "
        f"Goal: under {GOALS['bootstrap_s']} s.",
        "",
        f"## `stats` and `report` over {run['turn_records']:,} turn records ({run['file_mb']:,} MiB of JSONL)",
        "",
        f"| command | wall s, median of {REPEATS} | max | peak RSS MiB | over parse floor | over I/O floor | goal |",
        "|---|---|---|---|---|---|---|",
        f"| I/O floor: read every byte | {run['floor_io']['wall_s']} | {run['floor_io']['wall_max_s']} | "
        f"{run['floor_io']['peak_rss_mb']} | | 1.00 | |",
        f"| parse floor: msgspec, 5 key fields | {run['floor_parse']['wall_s']} | {run['floor_parse']['wall_max_s']} "
        f"| {run['floor_parse']['peak_rss_mb']} | 1.00 | | |",
    ]
    for arm in ("stats", "report"):
        row = run[arm]
        goal = f"< {GOALS[arm + '_s']:.0f} s, < {GOALS[arm + '_rss_mb']} MiB"
        lines.append(
            f"| `orchestrate {arm}` (rc {row['rc']}) | {row['wall_s']} | {row['wall_max_s']} | {row['peak_rss_mb']} | "
            f"{row['over_parse_floor']} | {row['over_io_floor']} | {goal} |"
        )
    page = result["page"]
    load = page.get("load")
    if "load_ms" in page:
        load = (f"headless chromium loads it in {page['load_ms']} ms (median of 3; a blank page: "
                f"{page['blank_load_ms']} ms), {page['bars']} bars and {page['markers']} markers drawn, "
                f"{page['console_errors_or_requests']} console errors or requests")  # fmt: skip
    lines += [
        "",
        "The commands run as subprocesses (interpreter start and imports included) over a warm page cache.",
        "",
        f"The report's page ({page['cells']:,} cells): index.html {page['index_mb']} MiB; "
        f"{page['cell_pages']} drill-down pages, "
        f"{page['cell_pages_mb']} MiB, {page['drilldown_rows']:,} turn rows in all; {load}.",
        "",
        f"## The full-record reader ({full['turn_records']:,} records)",
        "",
        f"Every field as a Python dict (what `report --reclassify` reads): {full['read_s']} s, "
        f"{full['rss_mb']} MiB, {full['kb_per_turn']} KiB a turn; `report` reads a view instead "
        "(orchestrator/runner/store/turnview.py).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "toolcall-matrix-scale")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    run_dir = args.workdir / f"run-{args.turns}"
    if not (run_dir / "turns.jsonl").is_file():
        print(f"generating {args.turns:,} turn records in {run_dir}", flush=True)
        generate_in_child(run_dir, args.turns)
    shutil.rmtree(run_dir / "report", ignore_errors=True)
    result = {
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        "goals": GOALS,
        "bootstrap": bench_bootstrap(),
        "run": bench_run(run_dir),
        "page": bench_page(run_dir),
        "full_reader": bench_full_reader(args.workdir),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (args.out / "scale.md").write_text(text)
    print(text)
    failed = [arm for arm in ("stats", "report") if result["run"][arm]["rc"] != 0]
    return 1 if failed or not result["bootstrap"]["batch_equals_per_cell"] else 0


if __name__ == "__main__":
    sys.exit(main())
