"""report/index.html: one self-contained page per run (inline CSS and SVG, no script, no network), for people
who compare cells by eye.

- The cross-stack grid: rows model, columns stack config x mode (and later axes), each defined cell a bar of its
  per-seed mean with the bootstrap interval and one dot per seed; a cell the model never ran in (refused,
  undefined, launch failed) a marker whose hover says why (the refusal's HTTP status and detail).
- Outcome composition per cell: stacked bars over the six outcomes, the two outside the fidelity denominator
  (rejected_request, non_response) hatched after a gap.
- The stack-config table: one column per grid column, the fields that differ between columns highlighted.
- Sections for what the run has (stream pairs, constraints, triage, channels, gate, ablation), absent otherwise.
- A drill-down page per cell beside it (analysis/report/drilldown.py).

Why the bars are SVG written by the template rather than a plotting library: a grid cell is a table cell with
one `<rect>`, a whisker and a dot per seed, so the page needs no script and no inlined charting library, stays a
few MB at 2,000 cells (benchmarks/results/scale.md), and every bar carries its own hover title and drill-down
link; a chart library would draw thousands of artists per chart inside a report whose million-turn budget leaves
under a second.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from orchestrator.analysis.product.productreport import ABLATION_FILE, CHANNELS_FILE, GATE_FILE
from orchestrator.analysis.report.drilldown import TEMPLATES, Header, first_refusals
from orchestrator.analysis.report.gridcolumns import column_labels
from orchestrator.analysis.report.views import cell_state, figure_flags
from orchestrator.core.stats import (
    DEGENERATE_MAX_SEQUENCES,
    DEGENERATE_MIN_SEEDS,
    FEW_SEEDS_THRESHOLD,
    POOLED_GAP_THRESHOLD,
    CellStats,
)
from orchestrator.core.types import INELIGIBLE_OUTCOMES, CellStatus, Outcome
from orchestrator.runner.store.runstore import RunStore

if TYPE_CHECKING:
    from orchestrator.analysis.report.report import RunTurns

INDEX = "index.html"
ELIGIBLE = [o.value for o in Outcome if o not in INELIGIBLE_OUTCOMES]
OUTSIDE = [o.value for o in Outcome if o in INELIGIBLE_OUTCOMES]
# Fields of the stack-config table (the long table's config columns a person compares across columns).
CONFIG_FIELDS = ("stack", "tool_config", "tool_flags", "parser", "launcher", "host", "image", "image_id",
                 "image_repo_digests", "binary_version", "stack_version", "chat_template_sha256", "template_sha256",
                 "tools_sha256", "call_format", "hint", "decoding", "turn_cap", "argv")  # fmt: skip
MODEL_FIELDS = ("model_digest", "quantization")
LEGEND = {"few_seeds": FEW_SEEDS_THRESHOLD, "pooled_gap": round(100 * POOLED_GAP_THRESHOLD),
          "degenerate_min": DEGENERATE_MIN_SEEDS, "degenerate_max": DEGENERATE_MAX_SEQUENCES}  # fmt: skip
# Report files another command writes beside the tables; each becomes a section when present: (title, the
# columns shown, None: all).
TRIAGE_FILE = "triage.json"
SECTION_FILES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    TRIAGE_FILE: ("Triage verdicts", ("cell_id", "per_seed_mean", "ci_low", "ci_high", "verdict", "summary")),
    CHANNELS_FILE: ("Channels (model vs product)", None),
    GATE_FILE: ("Release gate", None),
    ABLATION_FILE: ("Guard ablation", None),
}


@dataclass
class GridCell:
    cell_id: str
    column: str  # the grid column: stack config | mode (| later axes)
    href: str
    text: str  # the wide table's figure, markers included
    hover: str
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    seeds: list[float] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    marker: str | None = None  # why a cell has no figure: rej, overflow, undefined, launch_failed
    composition: list[tuple[str, int]] = field(default_factory=list)  # (outcome, turns) in Outcome order
    n_turns: int = 0

    def segments(self, width: float = 300.0, gap: float = 8.0) -> list[tuple[str, int, float, float]]:
        """(outcome, turns, x, width) of the composition bar: the eligible outcomes, a gap, then the two outside
        the denominator (drawn hatched). Widths are shares of all the cell's counted turns."""
        if not self.n_turns:
            return []
        scale, x, found = (width - gap) / self.n_turns, 0.0, []
        for outcome, count in self.composition:
            if outcome == OUTSIDE[0]:
                x += gap
            if count:
                found.append((outcome, count, round(x, 2), round(count * scale, 2)))
                x += count * scale
        return found


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _marker(row: dict[str, Any]) -> str | None:
    state = cell_state(row)
    return None if state == "figure" else state


def _percent(value: float | None) -> str:
    return "—" if _is_missing(value) else f"{100 * value:.0f}"


def _hover(row: dict[str, Any], cell: dict[str, Any], refusal: dict[str, Any] | None) -> str:
    lines = [row["cell_id"], str(row.get("text") or "")]
    if row["status"] == CellStatus.LAUNCH_FAILED:
        lines.append(f"launch failed: {cell.get('error') or 'no error recorded'}")
    elif _is_missing(row.get("per_seed_mean")):
        lines.append(f"{row.get('n_rejected', 0)} rejected, {row.get('n_non_response', 0)} non-response turns, "
                     "no eligible turn: no fidelity")  # fmt: skip
    else:
        lines.append(f"per-seed mean {_percent(row['per_seed_mean'])}% [{_percent(row['ci_low'])}, "
                     f"{_percent(row['ci_high'])}] over {row['n_seeds']} seeds, {row['n_eligible_turns']} eligible "
                     f"turns; pooled {_percent(row.get('pooled'))}%")  # fmt: skip
    if refusal:
        lines.append(f"refused: HTTP {refusal.get('http_status')} {refusal.get('detail') or ''}".rstrip())
        if refusal.get("message"):
            lines.append(str(refusal["message"])[:300])
    return "\n".join(lines)


def grid_cells(
    long: pd.DataFrame, cells: dict[str, dict[str, Any]], counted: dict[str, list[dict[str, Any]]],
    refusals: dict[str, dict[str, Any]], pages: dict[str, str], stats: dict[str, CellStats],
) -> dict[str, GridCell]:  # fmt: skip
    """Each cell of the long table as it is drawn in the grid and the composition chart."""
    found = {}
    for row, label in zip(long.to_dict("records"), column_labels(long), strict=True):
        cell_id = row["cell_id"]
        turns = counted.get(cell_id, [])
        marker = _marker(row)
        composition = [(o.value, stats[cell_id].outcome_counts.get(o.value, 0)) for o in Outcome]
        grid = GridCell(cell_id, label, pages[cell_id], str(row.get("text") or ""),
                        _hover(row, cells.get(cell_id, {}), refusals.get(cell_id)), marker=marker,
                        composition=composition, n_turns=len(turns))  # fmt: skip
        grid.flags = figure_flags(row)
        if marker is None:
            grid.mean, grid.low, grid.high = (float(row[k]) for k in ("per_seed_mean", "ci_low", "ci_high"))
            grid.seeds = sorted(stats[cell_id].seed_fidelities)
        found[cell_id] = grid
    return found


def grid_layout(long: pd.DataFrame, order: list[str]) -> tuple[list[str], list[tuple[str, list[str | None]]]]:
    """(column labels, [(model, cell id per column or None)]) in run order. A cell whose slot another cell of
    its model holds (no two cells of a run share model and column: the label carries every later axis) opens a
    second row for the model rather than being hidden."""
    rows: list[tuple[str, dict[str, str]]] = []
    for row, label in zip(long.to_dict("records"), column_labels(long), strict=True):
        model = str(row["model"])
        slot = next((by_column for name, by_column in rows if name == model and label not in by_column), None)
        if slot is None:
            slot = {}
            rows.append((model, slot))
        slot[label] = row["cell_id"]
    return order, [(model, [by_column.get(c) for c in order]) for model, by_column in rows]


def config_table(long: pd.DataFrame, order: list[str]) -> list[tuple[str, bool, list[str]]]:
    """(field, differs between columns, the column's value(s)) for each stack-config field; a column whose cells
    (models) hold different values shows each."""
    fields = [name for name in CONFIG_FIELDS if name in long]
    seen: dict[tuple[str, str], dict[str, None]] = {}
    for row, column in zip(long.to_dict("records"), column_labels(long), strict=True):
        for name in fields:
            seen.setdefault((name, column), {})["—" if _is_missing(row[name]) else str(row[name])] = None
    table = []
    for name in fields:
        values = [" / ".join(sorted(seen.get((name, column), {}))) for column in order]  # sorted: order is no change
        table.append((name, len(set(values)) > 1, values))
    return table


def model_table(long: pd.DataFrame) -> list[tuple[str, list[str]]]:
    fields = [f for f in MODEL_FIELDS if f in long]
    firsts = long.drop_duplicates("model")
    return [(str(row["model"]), ["—" if _is_missing(row[f]) else str(row[f]) for f in fields])
            for row in firsts.to_dict("records")]  # fmt: skip


def frame_section(title: str, frame: pd.DataFrame) -> dict[str, Any]:
    rows = [["—" if _is_missing(v) else str(v) for v in row] for row in frame.itertuples(index=False)]
    return {"title": title, "columns": [str(c) for c in frame.columns], "rows": rows, "note": None}


def section_file(run_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a command that explains a run saves for the page: its rows, and the size of turns.jsonl they were
    drawn from (the page marks them stale once the run has grown or been rewritten)."""
    turns = run_dir / "turns.jsonl"
    return {"turns_bytes": turns.stat().st_size if turns.is_file() else None, "rows": rows}


def file_sections(report_dir: Path) -> list[dict[str, Any]]:
    """Sections from the JSON files other commands leave in report/: a list of objects, or `section_file`'s."""
    sections = []
    turns = report_dir.parent / "turns.jsonl"
    size = turns.stat().st_size if turns.is_file() else None
    for name, (title, shown) in SECTION_FILES.items():
        path = report_dir / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a damaged extra file loses its section, never the page
        stale = isinstance(data, dict) and data.get("turns_bytes") not in (None, size)
        rows = data.get("rows") if isinstance(data, dict) else data
        if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
            columns = list(shown or dict.fromkeys(k for r in rows for k in r))
            values = [[_flat(r.get(c)) for c in columns] for r in rows]
            note = f"stale: the run changed after {name} was written; run the command again" if stale else None
            sections.append({"title": title, "columns": columns, "rows": values, "note": note})
    return sections


def _flat(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"  # 0.4167, and a small p-value stays 1.2e-05
    return value if isinstance(value, str) else json.dumps(value, default=str)[:500]


@dataclass(frozen=True)
class Page:
    """What index.html shows, all from the report's own tables (nothing read twice)."""

    run_id: str
    title: str
    settings: str
    columns: list[str]
    rows: list[tuple[str, list[str | None]]]
    cells: dict[str, GridCell]
    config: list[tuple[str, bool, list[str]]]
    models: list[tuple[str, list[str]]]
    sections: list[dict[str, Any]]
    damage: list[str]


def write_index(page: Page, out: Path) -> list[Path]:
    """index.html into `out` (the report's staging folder)."""
    html = TEMPLATES.get_template("index.html.j2").render(
        page=page, eligible=ELIGIBLE, outside=OUTSIDE, model_fields=MODEL_FIELDS, legend=LEGEND
    )
    (out / INDEX).write_text(html, encoding="utf-8")
    return [out / INDEX]


def page_headers(long: pd.DataFrame) -> dict[str, Header]:
    """Each drill-down page's header: the cell's figure (the wide table's text) and its config fields."""
    fields = [f for f in (*CONFIG_FIELDS, *MODEL_FIELDS, "status", "probe_verdict") if f in long]
    return {
        row["cell_id"]: (str(row.get("text") or ""), [(f, "—" if _is_missing(row[f]) else str(row[f])) for f in fields])
        for row in long.to_dict("records")
    }


def build_page(
    store: RunStore, run: RunTurns, long: pd.DataFrame, order: list[str], frames: list[tuple[str, pd.DataFrame]],
    stats: dict[str, CellStats], pages: dict[str, str],
) -> Page:  # fmt: skip
    """index.html's content from the report's tables (`order`: the grid's columns, as the wide table orders
    them; `frames`: titled request-axis tables; `pages`: each cell's drill-down page)."""
    records = long.to_dict("records")
    refused = {row["cell_id"] for row in records if row.get("n_rejected")}
    refusals = first_refusals(store, [row["cell_id"] for row in records], run.by_cell, refused)
    cells = grid_cells(long, run.cells, run.counted, refusals, pages, stats)
    columns, rows = grid_layout(long, order)
    matrix = store.manifest().get("matrix") or {}
    settings = run.settings
    n_turns = sum(len(turns) for turns in run.by_cell.values())
    summary = (f"{len(records)} cells, {n_turns} turn records · {settings.confidence:.0%} bootstrap interval over "
               f"seeds ({settings.resamples} resamples, rng seed {settings.rng_seed})")  # fmt: skip
    sections = [frame_section(title, frame) for title, frame in frames if not frame.empty]
    return Page(store.run_id, f"toolcall-matrix · {matrix.get('name') or store.run_id}", summary, columns, rows,
                cells, config_table(long, order), model_table(long), sections + file_sections(store.dir / "report"),
                [str(d) for d in store.damage])  # fmt: skip
