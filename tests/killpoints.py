"""SIGKILL (or SIGTERM / SIGINT) the orchestrator at points of a real small run chosen by a seeded RNG, resume
after each, and compare what the run ends with against an uninterrupted run of the same matrix.

A point is a count of turn records on disk: process k is signalled once turns.jsonl holds at least p_k lines
(p = 0: once its llama-server is launched, i.e. during the readiness wait). The points grow, so each resumed
process gets further; the last resume runs to the end. Used by tests/test_kill_points.py (3 points) and
scripts/kill-points.py (10)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.runner.store.runstore import counted_turns
from orchestrator.serving.assets import cache_root
from orchestrator.serving.launchers import cleanup

REPO = Path(__file__).resolve().parent.parent
QWEN = "qwen2.5-coder-0.5b-instruct"
MATRIX = """\
name: killpoints
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process, ctx: 1024, binary: {binary}}}
models:
  - name: {model}
    sources: {{llamacpp: {{asset: {model}}}}}
modes: [text-tools]
tasks:
  - {{suite: ops, count: {seeds}}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 40, seed: 3}}
turn_cap: 2
bootstrap: {{resamples: 200}}
"""
Key = tuple[str, str, int, int]  # cell, seed, turn, attempt
Identity = tuple[str, str, int, int, int]  # cell, seed, seed attempt, turn, attempt: one record
RUN_LIMIT_S = 600  # one process (a run or a resume) of the tiny matrix; a hang fails, never blocks


@dataclass
class KillReport:
    points: list[int]
    signals: list[str]
    at_kill: list[int] = field(default_factory=list)  # records on disk when each signal was sent
    orphans_after_kill: list[int] = field(default_factory=list)  # servers the killed process left running
    torn_lines: int = 0
    on_disk: list[set[Identity]] = field(default_factory=list)  # the whole records on disk after each kill


def write_matrix(directory: Path, binary: str, seeds: int) -> Path:
    path = directory / "killpoints.yaml"
    path.write_text(MATRIX.format(binary=binary, model=QWEN, seeds=seeds))
    return path


def orchestrate(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def records(run: Path) -> list[dict]:
    path = run / "turns.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def line_count(run: Path) -> int:
    path = run / "turns.jsonl"
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def keys(rows: list[dict]) -> list[Key]:
    return [(r["cell_id"], r["seed"], r["turn"], r["attempt"]) for r in rows]


def identities(rows: list[dict]) -> set[Identity]:
    return {(r["cell_id"], r["seed"], r.get("seed_attempt") or 0, r["turn"], r["attempt"]) for r in rows}


def run_servers(run: Path) -> list[int]:
    """Live processes started for this run: their stdout is a log file in the run's directory."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            target = os.readlink(f"/proc/{entry}/fd/1")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if target.startswith(str(run)) and state != "Z":
            found.append(int(entry))
    return found


def pid_records(run_id: str) -> list[Path]:
    out = []
    for path in (cache_root() / "pids").glob("*.json"):
        with contextlib.suppress(OSError):
            if f'"{run_id}"' in path.read_text():
                out.append(path)
    return out


def reference_run(matrix: Path, results: Path) -> Path:
    done = subprocess.run(
        orchestrate("matrix", str(matrix), "--results", str(results)),
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"reference run failed: {done.stderr[-3000:]}")
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return run


def choose_points(rng_seed: int, count: int, total: int) -> list[int]:
    """`count` record counts from 0..total-1 (repeats allowed when there are fewer counts), ascending."""
    rng = random.Random(rng_seed)
    population = list(range(total))
    chosen = rng.sample(population, count) if count <= total else [rng.choice(population) for _ in range(count)]
    return sorted(chosen)


def signal_at(argv: list[str], results: Path, run: Path | None, point: int, signum: int, report: KillReport) -> Path:
    """Start `argv`, send `signum` once the run holds `point` records (0: once its server is launched)."""
    log = results.parent / f"orchestrate-{len(report.at_kill)}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + RUN_LIMIT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if run is None:
                runs = [p for p in results.iterdir() if p.is_dir()] if results.is_dir() else []
                run = runs[0] if runs else None
            if run is not None and line_count(run) >= point and (point > 0 or pid_records(run.name)):
                break
            time.sleep(0.02)
        if proc.poll() is not None:
            raise RuntimeError(
                f"the orchestrator ended before point {point} (rc {proc.returncode}): {log.read_text()[-2000:]}"
            )
        if time.monotonic() >= deadline:
            raise RuntimeError(f"point {point} not reached in {RUN_LIMIT_S}s")
        assert run is not None
        report.at_kill.append(line_count(run))
        proc.send_signal(signum)
        proc.wait(timeout=120)  # SIGTERM / SIGINT tear down within this bound
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return run


def kill_and_resume(
    matrix: Path, results: Path, points: list[int], signals: list[int], torn: bool
) -> tuple[Path, KillReport]:
    """Signal the run at each point, resume after each; the last resume runs to the end."""
    report = KillReport(points=points, signals=[signal.Signals(s).name for s in signals])
    run: Path | None = None
    try:
        for index, (point, signum) in enumerate(zip(points, signals, strict=True)):
            argv = (
                orchestrate("matrix", str(matrix), "--results", str(results))
                if run is None
                else orchestrate("matrix", "--resume", str(run))
            )
            run = signal_at(argv, results, run, point, signum, report)
            time.sleep(0.3)  # a SIGTERM/SIGINT teardown has returned; a SIGKILLed run's server stays
            report.orphans_after_kill.append(len(run_servers(run)))
            report.on_disk.append(identities(records(run)))
            if torn and index == 0:  # what a SIGKILL inside a write leaves: half a line, no newline
                path = run / "turns.jsonl"
                whole = records(run)
                sample = json.dumps(whole[-1]) if whole else '{"cell_id": "x", "seed": "y"}'
                with path.open("a") as handle:
                    handle.write(sample[: len(sample) // 2])
                report.torn_lines += 1
        assert run is not None
        done = subprocess.run(
            orchestrate("matrix", "--resume", str(run)), capture_output=True, text=True, timeout=RUN_LIMIT_S
        )
        if done.returncode != 0:
            raise RuntimeError(f"final resume failed: {done.stderr[-3000:]}")
        return run, report
    finally:
        if run is not None:
            for pid in run_servers(run):  # a failure never leaves this run's servers behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            cleanup(run.name)


def unfinished_runs(rows: list[dict]) -> set[tuple[str, str, int]]:
    """(cell, seed, seed attempt) of the seed runs with no record that ends them: killed mid-seed."""
    runs = {(r["cell_id"], r["seed"], r.get("seed_attempt") or 0) for r in rows}
    return runs - {(r["cell_id"], r["seed"], r.get("seed_attempt") or 0) for r in rows if r.get("end")}


def compare(reference: Path, run: Path, on_disk: list[set[Identity]] | None = None) -> dict[str, object]:
    """What the killed-and-resumed run ends with, against the uninterrupted one: the counted records, the
    superseded ones (each of a seed run the kill cut short) and any record seen on disk at a kill and gone."""
    ref_rows, rows = records(reference), records(run)
    counted = counted_turns(rows)
    counted_keys = keys(counted)
    final = identities(rows)
    cut_short = unfinished_runs(rows)
    superseded = [r for r in rows if r.get("superseded")]
    return {
        "lost": sorted({identity for seen in on_disk or [] for identity in seen} - final),
        "superseded_not_cut_short": [
            r["seed"] for r in superseded if (r["cell_id"], r["seed"], r.get("seed_attempt") or 0) not in cut_short
        ],
        "reference_keys": sorted(keys(counted_turns(ref_rows))),
        "counted_keys": sorted(counted_keys),
        "duplicates": len(counted_keys) - len(set(counted_keys)),
        "superseded": [k for k, r in zip(keys(rows), rows, strict=True) if r.get("superseded")],
        "records": len(rows),
        "ended_seeds": sorted(r["seed"] for r in counted if r.get("end")),
        "orphans": run_servers(run),
        "pid_records": [str(p) for p in pid_records(run.name)],
        "same_content": [r.get("raw_content") for r in counted_turns(ref_rows)]
        == [r.get("raw_content") for r in counted],
    }
