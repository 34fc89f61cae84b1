#!/usr/bin/env python
"""Kill the orchestrator with SIGKILL at N seeded-random points of a real small run, resuming after each, and
check the run ends with exactly an uninterrupted run's counted records and no server left running.

    .venv/bin/python scripts/kill-points.py [--points 10] [--rng-seed 14] [--seeds 8] [--workdir DIR]

Needs the cached llama-server and Qwen 0.5B GGUF (`orchestrate assets`). Prints the points, the records on disk
at each kill, the servers each kill left behind, and the comparison; exits 1 on any difference. The CI version
(3 points) is tests/test_kill_points.py."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.serving import assets
from tests import killpoints


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10)
    parser.add_argument("--rng-seed", type=int, default=14)
    parser.add_argument("--seeds", type=int, default=8)  # 15 records: 10 distinct points
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kill-points-"))
    binary = assets.ensure_llama_server(lambda _m: None).path
    matrix = killpoints.write_matrix(work, binary, args.seeds)
    started = time.monotonic()
    reference = killpoints.reference_run(matrix, work / "reference")
    total = len(killpoints.records(reference))
    points = killpoints.choose_points(args.rng_seed, args.points, total)
    print(
        f"reference: {total} records in {time.monotonic() - started:.0f}s; kill points (rng {args.rng_seed}): {points}"
    )
    run, report = killpoints.kill_and_resume(matrix, work / "killed", points, [signal.SIGKILL] * len(points), torn=True)
    result = killpoints.compare(reference, run, report.on_disk)
    print(f"records at each kill: {report.at_kill}")
    print(f"servers left by each kill (removed by the next resume): {report.orphans_after_kill}")
    print(f"torn lines planted: {report.torn_lines}")
    print(
        f"final records: {result['records']}; counted keys: {len(result['counted_keys'])} "
        f"(reference {len(result['reference_keys'])}); duplicates: {result['duplicates']}; "
        f"superseded (seed runs a kill cut short): {len(result['superseded'])}; lost: {len(result['lost'])}; "
        f"same content: {result['same_content']}"
    )
    print(f"servers left at the end: {result['orphans']}; pid records left: {result['pid_records']}")
    ok = (
        result["counted_keys"] == result["reference_keys"]
        and result["duplicates"] == 0
        and not result["lost"]
        and result["same_content"]
        and not result["superseded_not_cut_short"]
        and not result["orphans"]
        and not result["pid_records"]
    )
    print(f"{'OK' if ok else 'DIFFERENT'} in {time.monotonic() - started:.0f}s; run: {run}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
