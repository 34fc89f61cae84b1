"""report/cells/NNNN.html: the drill-down, one section per cell (in the long table's order, at most PAGE_CELLS
sections and, where a cell allows, PAGE_ROWS turn rows a page; a grid cell links to its section): each seed's
turns with outcome, detail, HTTP status, latency, tokens and the raw content / raw tool calls (escaped: model
output is untrusted text). Sections share pages because a
file costs: writing 2,000 small files beside a 2 GiB turns.jsonl took 0.4 s on this machine's ext4, 80 files of
the same bytes 0.05 s.

Bounded for any run size: the report holds lean views of the turns (runner/store/turnview.py), so the fields shown
here are read whole only for the turns a page shows, one line each by its byte offset (`read_records_at`,
decoding just `DrillFields`). A page shows whole seeds, in seed order, up to its share of ROW_BUDGET turns
(at least MIN_ROWS, and always the first seed), and says how many it left out; each raw field is cut at
RAW_CHARS characters with the count of the rest. The whole record of every turn stays in turns.jsonl.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import jinja2
import msgspec
from markupsafe import Markup, escape

from orchestrator.core.types import Outcome
from orchestrator.runner.store.runstore import RunStore, counted_turns
from orchestrator.runner.store.turnview import OFFSET_KEY

ROW_BUDGET = 10_000  # turns shown across all of a run's pages
MIN_ROWS = 20  # a cell's page shows at least this many turns (whole seeds) when it has them
RAW_CHARS = 2_000  # per raw field and turn
PAGES_DIR = "cells"
PAGE_CELLS = 25  # cell sections a drill-down page holds at most
PAGE_ROWS = 1_000  # and turn rows (a page of fewer cells with long seeds stays a few MB)
CELL_ROWS = 1_000  # a section's share of ROW_BUDGET is capped (a run of a few cells would show thousands)


class DrillFields(TypedDict):
    """What a drill-down row needs beyond the view, read from the turn's own line."""

    cell_id: NotRequired[Any]  # these four: the line read is the view's own (checked, never assumed)
    seed: NotRequired[Any]
    seed_attempt: NotRequired[Any]
    turn: NotRequired[Any]
    attempt: NotRequired[Any]
    http_status: NotRequired[Any]
    latency_s: NotRequired[Any]
    tokens: NotRequired[Any]
    raw_content: NotRequired[Any]
    raw_tool_calls: NotRequired[Any]
    error: NotRequired[Any]
    finish_reason: NotRequired[Any]


_DECODER = msgspec.json.Decoder(DrillFields)


@dataclass
class CellPage:
    """A cell's section of a drill-down page."""

    cell_id: str
    name: str  # the page file, relative to report/
    anchor: str
    shown: list[dict[str, Any]]  # the turn views the page shows (whole seeds, in order)
    n_turns: int
    n_seeds: int
    seeds_shown: int
    counted_ids: set[int] = field(default_factory=set)  # id() of the shown records that statistics count
    rows: list[Markup] = field(default_factory=list)  # `shown` rendered (fill_rows)
    rows_html: Markup = field(default_factory=Markup)
    text: str = ""  # the cell's figure, as the wide table writes it
    config: list[tuple[str, str]] = field(default_factory=list)


Header = tuple[str, list[tuple[str, str]]]  # a page's figure and config fields, known once the statistics are


def cell_href(page: CellPage) -> str:
    return f"{page.name}#{page.anchor}"


def _shown(turns: list[dict[str, Any]], cap: int) -> tuple[list[dict[str, Any]], int, int]:
    """Whole seeds in seed order up to `cap` turns (the first seed always), each in (seed attempt, turn) order,
    record order kept: (turns shown, seeds shown, seeds). Counted in C (Counter, itemgetter): a cell may hold
    hundreds of thousands of turns of which a page shows a few dozen."""
    sizes = Counter(map(itemgetter("seed"), turns))
    chosen: list[str] = []
    total = 0
    for seed in sorted(sizes, key=str):
        if chosen and total + sizes[seed] > cap:
            break
        chosen.append(seed)
        total += sizes[seed]
    rank = {seed: index for index, seed in enumerate(chosen)}
    shown = [t for t in turns if t["seed"] in rank]
    shown.sort(key=lambda t: (rank[t["seed"]], t.get("seed_attempt") or 0, t["turn"]))
    return shown, len(chosen), len(sizes)


def _cut(value: Any) -> tuple[str, int]:
    """A raw field as text (JSON for structures) cut at RAW_CHARS: (text, characters left out)."""
    if value is None:
        return "", 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text[:RAW_CHARS], max(0, len(text) - RAW_CHARS)


def _row(view: dict[str, Any], whole: dict[str, Any], counted: bool) -> Markup:
    """One turn as a table row, every text escaped here (rows are built in Python, not by the template's loop:
    a million-turn run's pages hold tens of thousands of rows). Numbers are formatted, never inserted raw."""
    content, content_cut = _cut(whole.get("raw_content"))
    calls, calls_cut = _cut(whole.get("raw_tool_calls"))
    tokens = whole.get("tokens") if isinstance(whole.get("tokens"), dict) else {}
    latency = whole.get("latency_s")
    outcome = escape(view["outcome"])
    # Not counted: superseded by a rerun (struck through), or from a seed run whose server died (greyed).
    superseded = " superseded" if view.get("superseded") else "" if counted else " uncounted"
    return Markup(
        f'<tr class="turn{superseded}" data-outcome="{outcome}"><td>{escape(view["seed"])}</td>'
        f"<td>{_number(view.get('seed_attempt') or 0)}</td><td>{_number(view['turn'])}</td>"
        f"<td>{_number(whole.get('attempt'))}</td>"
        f'<td><span class="swatch o-{outcome}"></span>{outcome}</td><td><code>{escape(view.get("detail") or "")}'
        f"</code></td><td>{_number(whole.get('http_status'))}</td><td>{_number(latency, '.2f')}</td>"
        f"<td>{_number(tokens.get('prompt'))}/{_number(tokens.get('completion'))}</td>"
        f"<td>{escape(whole.get('finish_reason') or '')}</td><td>{escape(view.get('end') or '')}</td>"
        f"<td>{escape(' '.join(view.get('flags') or ()))}</td>"
        f"{_raw_cell(content, content_cut)}{_raw_cell(calls, calls_cut)}</tr>\n"
    )


def _number(value: Any, spec: str = "d") -> str:
    """An int (or a float with `spec`) as text; anything else (absent, or not a number in a hand-edited file) —."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return format(value, spec) if spec != "d" or isinstance(value, int) else "—"


def _raw_cell(text: str, cut: int) -> str:
    more = f'<span class="note">… {cut} more characters</span>' if cut else ""
    return f'<td class="raw"><pre>{escape(text)}</pre>{more}</td>'


def _refusal(whole: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    error = whole.get("error") if isinstance(whole.get("error"), dict) else {}
    body = error.get("body")
    message = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(message, dict):
        message = message.get("message", message)
    return {"http_status": whole.get("http_status"), "detail": view.get("detail"), "message": _cut(message)[0]}


def plan_pages(order: list[str], by_cell: dict[str, list[dict[str, Any]]]) -> list[CellPage]:
    """Which turns each cell's section shows (whole seeds within its share of ROW_BUDGET, at most CELL_ROWS
    unless its first seed is longer), in `order`, and which page holds it: PAGE_CELLS sections a page, fewer where
    their rows would pass PAGE_ROWS. The rows statistics do not count are marked: whole seeds are shown, so
    counted_turns over the shown rows is the cell's own verdict on them."""
    cap = min(CELL_ROWS, max(MIN_ROWS, ROW_BUDGET // max(1, len(order))))
    pages: list[CellPage] = []
    page, cells_on_page, rows_on_page = 0, 0, 0
    for index, cell_id in enumerate(order):
        turns = by_cell.get(cell_id, [])
        shown, seeds_shown, n_seeds = _shown(turns, cap)
        if cells_on_page and (cells_on_page == PAGE_CELLS or rows_on_page + len(shown) > PAGE_ROWS):
            page, cells_on_page, rows_on_page = page + 1, 0, 0
        cells_on_page, rows_on_page = cells_on_page + 1, rows_on_page + len(shown)
        section = CellPage(cell_id, f"{PAGES_DIR}/{page:04d}.html", f"c{index}", shown, len(turns), n_seeds,
                           seeds_shown, counted_ids={id(t) for t in counted_turns(shown)})  # fmt: skip
        pages.append(section)
    return pages


def fill_rows(store: RunStore, pages: list[CellPage]) -> None:
    """Each page's rows: its turns' drill fields read by offset, rendered."""
    wholes = _read_wholes(store, [t for page in pages for t in page.shown])
    for page in pages:
        page.rows = [_row(t, wholes.get(id(t), t), id(t) in page.counted_ids) for t in page.shown]


def first_refusals(
    store: RunStore, order: list[str], by_cell: dict[str, list[dict[str, Any]]], with_refusals: set[str]
) -> dict[str, dict[str, Any]]:
    """The first refused turn of each cell in `with_refusals` (those whose counted turns hold one: the others
    are not searched): its HTTP status, detail and the server's message."""
    refused = {}
    for cell_id in order:
        if cell_id in with_refusals:
            turns = by_cell.get(cell_id, [])
            first = next((t for t in turns if t["outcome"] == Outcome.REJECTED_REQUEST), None)
            if first is not None:
                refused[cell_id] = first
    wholes = _read_wholes(store, list(refused.values()))
    return {cell_id: _refusal(wholes.get(id(t), t), t) for cell_id, t in refused.items()}


def _read_wholes(store: RunStore, views: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The drill fields of each view that is a lean view (a whole record, as --reclassify reads, has them)."""
    lean = [v for v in views if OFFSET_KEY in v]
    found = store.read_records_at([v[OFFSET_KEY] for v in lean], decode=_DECODER.decode)
    return {id(v): whole for v in lean if (whole := found.get(v[OFFSET_KEY])) is not None and _same(v, whole)}


def _same(view: dict[str, Any], whole: dict[str, Any]) -> bool:
    """The record read at a view's offset is that view's (else the file changed since: the row shows the view)."""
    return all(whole.get(key) == view.get(key) for key in ("cell_id", "seed", "turn")) and (
        (whole.get("seed_attempt") or 0) == (view.get("seed_attempt") or 0)
    )


# The report's templates (analysis/report/templates/: the page, its drill-down pages, their stylesheet), one
# environment.
TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("orchestrator.analysis.report", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def write_cell_pages(run_id: str, pages: list[CellPage], headers: dict[str, Header], out: Path) -> list[Path]:
    """cells/*.html into `out`: the sections (their rows filled), each on the page plan_pages gave it."""
    template = TEMPLATES.get_template("cell.html.j2")
    (out / PAGES_DIR).mkdir(exist_ok=True)
    by_file: dict[str, list[CellPage]] = {}
    for page in pages:
        page.text, page.config = headers.get(page.cell_id, ("", []))
        page.rows_html = Markup("".join(page.rows))  # each row escaped when built: joined once
        by_file.setdefault(page.name, []).append(page)
    written = []
    for name, sections in by_file.items():
        html = template.render(sections=sections, run_id=run_id, raw_chars=RAW_CHARS)
        (out / name).write_text(html, encoding="utf-8")
        written.append(out / name)
    return written
