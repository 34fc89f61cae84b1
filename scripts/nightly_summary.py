"""The nightly's one-line morning summary (scripts/nightly.sh): tonight's run against the previous night, the
cells that failed the gate (each with its change and corrected p), and the images that changed since the
previous night with their release-notes links, as the run's manifest recorded them (`orchestrate images`).

usage: nightly_summary.py RUN_DIR --status N [--diff DIFF.json --previous PREV_DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATUS_WORDS = {0: "OK", 1: "REGRESSION", 3: "NO POWER"}
GATE_VERDICTS = ("regression", "became_undefined")


def _points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f}"


def failed_cells(diff: dict[str, Any]) -> list[str]:
    """Every cell the gate (--fail-on-regression) fails on, named, with the figure that made it fail."""
    named = []
    for cell in diff.get("cells") or []:
        lost = cell.get("n_lost_seeds") or 0
        if cell.get("verdict") not in GATE_VERDICTS and not lost:
            continue
        text = f"{cell['cell_id']} {cell['verdict']}"
        if cell.get("delta") is not None:
            interval = f"[{_points(cell.get('ci_low'))}, {_points(cell.get('ci_high'))}]"
            text += f" {_points(cell['delta'])} pts {interval} p_adj {cell.get('p_adjusted'):.3g}"
        if lost:
            text += f", lost {lost} seed(s)"
        named.append(text)
    named += [f"{cell_id} missing tonight" for cell_id in diff.get("only_in_a") or []]
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
            link = entry.get("release_notes") or "no release notes link"
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
        cells += f"; {diff.get('min_seeds_note') or 'no cell could show a change'}"
    return f"{head}: {cells}; {image_notes(manifest)}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--status", type=int, required=True)
    parser.add_argument("--diff", type=Path)
    parser.add_argument("--previous", type=Path)
    args = parser.parse_args(argv)
    diff = json.loads(args.diff.read_text()) if args.diff else None
    print(summary(args.run, args.status, diff, args.previous))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
