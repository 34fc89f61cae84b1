"""Call-format recognisers on hostile input: is the cost linear in the text's length?

For every family's hostile markers (tests/test_call_formats_hostile.py MARKERS) the text is the marker repeated
to SMALL and to 4 x SMALL characters; `extract_text_calls` reads each (best of REPEATS). Linear code shows a
4 MB / 1 MB time ratio near 4 (quadratic: near 16). Baseline, measured in the same run: plain prose of the same
sizes, whose ratio shows what "linear" looks like on this machine. Needs nothing but the package.

Run: .venv/bin/python benchmarks/bench_call_formats.py [--small 1000000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.core.textcalls import extract_text_calls
from tests.test_call_formats_hostile import MARKERS

PROSE = "The pods are running and the deployment is healthy; nothing to call here. "
REPEATS = 3


def best_time(text: str) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        extract_text_calls(text)
        times.append(time.perf_counter() - start)
    return min(times)


def repeated(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def measure(unit: str, small: int) -> dict[str, float]:
    t_small, t_large = best_time(repeated(unit, small)), best_time(repeated(unit, 4 * small))
    return {"small_s": round(t_small, 4), "large_s": round(t_large, 4), "ratio": round(t_large / t_small, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1_000_000, help="characters in the small text")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    rows = {"baseline: prose": measure(PROSE, args.small)}
    for family, markers in MARKERS.items():
        worst = max((measure(marker, args.small) for marker in markers), key=lambda row: row["ratio"])
        rows[family] = worst
    print(f"{'input':<20} {'1x (s)':>9} {'4x (s)':>9} {'4x/1x':>7}")
    for name, row in rows.items():
        print(f"{name:<20} {row['small_s']:>9.3f} {row['large_s']:>9.3f} {row['ratio']:>7.2f}")
    worst = max(row["ratio"] for name, row in rows.items() if not name.startswith("baseline"))
    print(
        f"worst family ratio {worst:.2f} (linear ~4, quadratic ~16); prose baseline {rows['baseline: prose']['ratio']}"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
