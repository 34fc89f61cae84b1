"""The nightly's one-line morning summary (scripts/nightly.sh): tonight's run against the previous night, the
cells that failed the gate (each with its change and corrected p), and the images that changed since the
previous night with their release-notes links, as the run's manifest recorded them (`orchestrate images`).

The gate's verdicts are not decided here: `orchestrate diff --json` records them (`gate_failures`,
`power_failure`, from orchestrator/analysis/compare/diffgate.py, the rule the diff's exit status follows), and
`--gate-status DIFF.json` prints the exit status that record owes, for nightly.sh to check the diff's status.

usage: nightly_summary.py RUN_DIR --status N [--diff DIFF.json --previous PREV_DIR]
       nightly_summary.py --gate-status DIFF.json
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATUS_WORDS = {0: "OK", 1: "REGRESSION", 3: "NO POWER"}


def _points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f}"


def gate_status(diff: dict[str, Any]) -> int:
    """The exit status `orchestrate diff --fail-on-regression --require-power` owes this diff, from what the
    diff recorded of its own gate (`gate_failures`, `power_failure`: analysis/compare/diffgate.py, the one rule)."""
    if "gate_failures" not in diff or "power_failure" not in diff:
        raise ValueError("the diff records no gate outcome (gate_failures, power_failure): an older orchestrate?")
    return 1 if diff["gate_failures"] else 3 if diff["power_failure"] else 0


def failed_cells(diff: dict[str, Any]) -> list[str]:
    """Every cell the gate (--fail-on-regression) fails on, as the diff recorded it (`gate_failures`), named,
    with the figure that made it fail."""
    cells = {cell["cell_id"]: cell for cell in diff.get("cells") or []}
    reasons: dict[str, list[dict[str, Any]]] = {}
    for failure in diff.get("gate_failures") or []:
        reasons.setdefault(failure["cell_id"], []).append(failure)
    named = []
    for cell_id, failures in reasons.items():
        if any(failure["reason"] == "missing_in_b" for failure in failures):
            named.append(f"{cell_id} missing tonight")
            continue
        cell = cells[cell_id]
        text = f"{cell_id} {cell['verdict']}"
        if cell.get("delta") is not None:
            interval = f"[{_points(cell.get('ci_low'))}, {_points(cell.get('ci_high'))}]"
            text += f" {_points(cell['delta'])} pts {interval} p_adj {cell.get('p_adjusted'):.3g}"
        lost = sum(failure.get("n_lost_seeds") or 0 for failure in failures if failure["reason"] == "lost_seeds")
        if lost:
            text += f", lost {lost} seed(s)"
        named.append(text)
    return named


def image_notes(manifest: dict[str, Any]) -> str:
    """The images that changed since the previous night (with their release notes), or what could not be told."""
    if "images" not in manifest:
        return "images: none recorded"
    entries = (manifest.get("images") or {}).get("entries") or []
    if not entries:
        return "images: no stack runs in Docker"
    changed, unresolved = [], []
    for entry in entries:
        where = f"{entry['stack']}/{entry['host']} {entry['image']}"
        if entry.get("status") == "unresolved":
            unresolved.append(where)
        elif entry.get("changed"):
            link = entry.get("release_notes") or "release unknown"
            changed.append(f"{where} {entry.get('old_digest')} -> {entry.get('identity')} ({link})")
    parts = [f"images changed: {'; '.join(changed)}" if changed else "images: none changed"]
    if unresolved:
        parts.append(f"not resolved: {'; '.join(unresolved)}")
    return "; ".join(parts)


def summary(run: Path, status: int, diff: dict[str, Any] | None, previous: Path | None) -> str:
    manifest = json.loads((run / "manifest.json").read_text())
    stamp = f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
    word = STATUS_WORDS.get(status, "FAILED")
    head = f"{stamp} nightly {word} (exit {status}): {run.name}"
    if diff is None or previous is None:
        return f"{head}: first night, no previous run to compare; {image_notes(manifest)}"
    head += f" vs {previous.name} ({diff['n_compared']} cells, {diff['correction']})"
    failed = failed_cells(diff)
    cells = f"regressed: {', '.join(failed)}" if failed else "no cell regressed"
    if status == 3:
        cells += f"; {diff.get('power_failure') or 'no cell could show a change'}"
    return f"{head}: {cells}; {image_notes(manifest)}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, nargs="?")
    parser.add_argument("--status", type=int)
    parser.add_argument("--diff", type=Path)
    parser.add_argument("--previous", type=Path)
    parser.add_argument("--gate-status", type=Path, metavar="DIFF.json", help="Print the status the gate owes.")
    args = parser.parse_args(argv)
    if args.gate_status:
        print(gate_status(json.loads(args.gate_status.read_text())))
        return 0
    if args.run is None or args.status is None:
        parser.error("give RUN_DIR --status N (or --gate-status DIFF.json)")
    diff = json.loads(args.diff.read_text()) if args.diff else None
    print(summary(args.run, args.status, diff, args.previous))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
