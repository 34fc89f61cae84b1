"""A screenshot of a run's report page as headless chromium (Debian's, driven by playwright) shows it, and what
the browser saw: console messages and requests (none expected), bars and markers in the grid.

Run: .venv/bin/python scripts/report-screenshot.py RESULTS/RUN_ID OUT.png [--width 1500 --height 1100]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import visit  # noqa: E402 (the browser driver the tests use)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    index = args.run_dir / "report" / "index.html"
    if not index.is_file():
        print(f"error: {index}: no report page (run `orchestrate report {args.run_dir}`)", file=sys.stderr)
        return 2
    (seen,) = visit(index, screenshot=args.out)
    problems = f"{len(seen.console_errors)} console errors, {len(seen.foreign_requests)} requests beyond the page"
    print(f"{args.out}: {len(seen.bars)} bars, {len(seen.markers)} markers, load {seen.load_ms:.0f} ms, {problems}")
    return 1 if seen.console_errors or seen.foreign_requests else 0


if __name__ == "__main__":
    sys.exit(main())
