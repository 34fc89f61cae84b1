"""report/index.html and the per-cell drill-down pages, from committed runs and runs made hostile: what the grid
draws for each cell, what the config table highlights, what the drill-down shows and cuts, that model output
is escaped, that sections appear only where the run has them; and (test_report_in_browser) the page opened in
a real headless chromium."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.scalegen import generate
from orchestrator.analysis.report import drilldown, htmlreport
from orchestrator.analysis.report.gridcolumns import column_order
from orchestrator.analysis.report.report import write_report
from orchestrator.runner.store.runstore import RunStore, counted_turns
from orchestrator.runner.store.turnview import OFFSET_KEY
from tests.browser import screenshot_dir, visit
from tests.conftest import committed_runs

EXAMPLES = {run.name.split("-", 1)[1].rsplit("-", 1)[0]: run for run in committed_runs()}
CPU = next(run for run in committed_runs() if run.name == "20261203T131653Z-cpu-87d008")


def reported(source: Path, tmp_path: Path, edit=None) -> Path:  # type: ignore[no-untyped-def]
    run = tmp_path / source.name
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("report"))
    if edit is not None:
        edit(run)
    write_report(RunStore(run))
    return run


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text inside <pre> (what a browser would show)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.pre_text: list[str] = []
        self.section: dict[int, str | None] = {}  # tag index -> the drill-down section (cell) it is in
        self._in_pre = 0
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self._cell = dict(attrs).get("data-cell")
        self.section[len(self.tags)] = self._cell
        self.tags.append((tag, dict(attrs)))
        self._in_pre += tag == "pre"

    def in_section(self, cell_id: str, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for i, (t, a) in enumerate(self.tags)
                if t == tag and cls in (a.get("class") or "").split() and self.section[i] == cell_id]  # fmt: skip

    def handle_endtag(self, tag: str) -> None:
        self._in_pre -= tag == "pre"

    def handle_data(self, data: str) -> None:
        if self._in_pre:
            self.pre_text.append(data)

    def having(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def page_of(run: Path, cell_id: str) -> Path:
    """The drill-down page holding a cell's section, as the grid links it."""
    html = (run / "report" / "index.html").read_text(encoding="utf-8")
    drawn = r'<(?:svg class="bar"|span class="marker [a-z_]+")'
    href = re.search(rf'<a href="([^"#]+)#c\d+">{drawn} data-cell="{re.escape(cell_id)}"', html)
    assert href, f"no grid link to {cell_id}"
    return run / "report" / href.group(1)


def parsed(path: Path) -> Elements:
    elements = Elements()
    elements.feed(path.read_text(encoding="utf-8"))
    return elements


def test_grid_draws_a_bar_per_defined_cell_and_a_marker_per_undefined_one(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    long = pd.read_csv(run / "report" / "cells_long.csv")
    page = parsed(run / "report" / "index.html")
    bars = {a["data-cell"] for a in page.having("svg", "bar")}
    markers = {a["data-cell"]: a["class"] for a in page.having("span", "marker") if "data-cell" in a}
    defined = set(long.loc[long["per_seed_mean"].notna(), "cell_id"])
    assert bars == defined and len(page.having("svg", "bar")) == len(defined)
    assert set(markers) == set(long["cell_id"]) - defined and markers
    # Refused cells read `rej` (the wide table's text), never `undefined`.
    refused = set(long.loc[long["text"].str.startswith("rej"), "cell_id"])
    assert refused and all(markers[c] == "marker rej" for c in refused)
    # One composition bar per cell, its segments adding up to the counted turns.
    assert {a["data-cell"] for a in page.having("svg", "stack")} == set(long["cell_id"])


_NO_FIGURE = {"status": "ok", "per_seed_mean": float("nan"), "n_non_response": 0}


@pytest.mark.parametrize(
    ("counts", "marker"),
    [
        ({"n_rejected": 4, "n_context_overflow": 4}, "overflow"),
        ({"n_rejected": 4, "n_context_overflow": 1}, "rej"),
        ({"n_rejected": 0, "n_non_response": 3}, "undefined"),
        ({"status": "launch_failed", "n_rejected": 0}, "launch_failed"),
        ({"per_seed_mean": 0.5, "n_rejected": 4}, None),
    ],
    ids=["overflow", "rej", "undefined", "launch-failed", "figure"],
)
def test_a_cells_marker_is_decided_from_its_statistics_not_its_text(counts: dict, marker: str | None) -> None:
    # The display text says otherwise in every case: the marker must not read it.
    row = {**_NO_FIGURE, **counts, "text": "undef rej9 nr9" if marker == "rej" else "rej n9"}
    assert htmlreport._marker(row) == marker


def test_hover_of_a_refused_cell_names_the_http_status_and_detail(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    html = (run / "report" / "index.html").read_text(encoding="utf-8")
    cell = "llamacpp-no-jinja__qwen2.5-coder-0.5b-instruct__native"
    marker = rf'<a href="[^"]*"><span class="marker rej" data-cell="{re.escape(cell)}"'
    title = re.search(r'<td class="cell" title="([^"]*)">\s*' + marker, html)
    assert title, "the refused cell has no hover title"
    assert "HTTP 500 refused:no_jinja" in title.group(1) and "tools param requires --jinja flag" in title.group(1)


def test_bar_geometry_is_the_per_seed_mean_and_its_interval(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    long = pd.read_csv(run / "report" / "cells_long.csv").set_index("cell_id")
    html = (run / "report" / "index.html").read_text(encoding="utf-8")
    for cell_id, row in long[long["per_seed_mean"].notna()].iterrows():
        svg = html[html.index(f'<svg class="bar" data-cell="{cell_id}"') :]
        svg = svg[: svg.index("</svg>")]
        width = float(re.search(r'class="fill" x="4" y="4" width="([\d.]+)"', svg).group(1))
        low, high = (float(v) for v in re.search(r'class="ci" x1="([\d.]+)" x2="([\d.]+)" y1="9"', svg).groups())
        assert width == pytest.approx(112 * row["per_seed_mean"], abs=0.01)
        assert low == pytest.approx(4 + 112 * row["ci_low"], abs=0.01)
        assert high == pytest.approx(4 + 112 * row["ci_high"], abs=0.01)
        assert svg.count('class="seed"') == row["n_seeds"]


def test_config_table_highlights_exactly_the_fields_that_differ(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    table = page[page.index('<table class="config">') : page.index("</table>", page.index('<table class="config">'))]
    highlighted = set(re.findall(r'<tr class="differs"><th scope="row">([a-z_0-9]+)</th>', table))
    plain = set(re.findall(r'<tr><th scope="row">([a-z_0-9]+)</th>', table))
    # Two stacks, two tool configs each: the stack, its flags and version differ; the turn cap is one for all.
    assert {"stack", "tool_config", "tool_flags", "stack_version", "argv"} <= highlighted
    assert "turn_cap" in plain and "turn_cap" not in highlighted


def test_sections_only_for_what_the_run_has(tmp_path: Path) -> None:
    plain = (reported(CPU, tmp_path / "a") / "report" / "index.html").read_text(encoding="utf-8")
    stream = next(run for run in committed_runs() if "stream" in run.name)
    streamed = (reported(stream, tmp_path / "b") / "report" / "index.html").read_text(encoding="utf-8")
    product = next(run for run in committed_runs() if "product" in run.name)
    product_run = reported(product, tmp_path / "c", edit=lambda r: shutil.copytree(product / "report", r / "report"))
    channels = (product_run / "report" / "index.html").read_text(encoding="utf-8")
    assert 'class="section"' not in plain
    assert ">Stream vs non-stream</h2>" in streamed and ">Channels" not in streamed
    assert ">Channels (model vs product)</h2>" in channels and ">Stream vs non-stream" not in channels


def _hostile(run: Path) -> None:
    lines = (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["raw_content"] = "</pre><script>alert(1)</script><img src=x onerror=alert(2)>" + "x" * 5000
    record["raw_tool_calls"] = [{"function": {"name": "<b>bold</b>", "arguments": "\"'&"}}]
    record["detail"] = "parse:<i>detail</i>"
    lines[0] = json.dumps(record)
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_model_output_is_escaped_and_cut(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path, edit=_hostile)
    first = json.loads((run / "turns.jsonl").read_text(encoding="utf-8").splitlines()[0])
    page = page_of(run, first["cell_id"])
    elements = parsed(page)
    assert not [a for t, a in elements.tags if t in ("script", "img", "b", "i")]  # shown as text, never as tags
    shown = "".join(elements.pre_text)
    assert "</pre><script>alert(1)</script><img src=x onerror=alert(2)>" in shown
    assert '<b>bold</b>' in shown
    text = page.read_text(encoding="utf-8")
    cut = len(first["raw_content"]) - drilldown.RAW_CHARS
    assert f"… {cut} more characters" in text
    assert "x" * (drilldown.RAW_CHARS - 60) in shown and "x" * (drilldown.RAW_CHARS + 1) not in shown


def test_drilldown_shows_whole_seeds_within_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drilldown, "ROW_BUDGET", 10)
    monkeypatch.setattr(drilldown, "MIN_ROWS", 2)
    run = reported(CPU, tmp_path)
    records = [json.loads(line) for line in (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
    cell = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__native_hint"
    page = page_of(run, cell)
    rows = parsed(page).in_section(cell, "tr", "turn")
    mine = sorted((r for r in records if r["cell_id"] == cell), key=lambda r: r["seed"])
    seeds = sorted({r["seed"] for r in mine})
    first_seed = [r for r in mine if r["seed"] == seeds[0]]
    # The budget (2 rows a cell) holds less than one seed here: the first seed is shown whole, no more.
    assert len(rows) == len(first_seed) > 2
    section = page.read_text(encoding="utf-8").split(f'data-cell="{cell}"')[1].split("</section>")[0]
    assert f"shown:\nthe first 1 seeds ({len(first_seed)} records)" in section
    in_order = sorted(first_seed, key=lambda r: (r.get("seed_attempt", 0), r["turn"]))
    assert [row["data-outcome"] for row in rows] == [r["outcome"] for r in in_order]


def test_a_second_report_leaves_no_stale_pages(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    stale = run / "report" / "cells" / "9999.html"
    stale.write_text("old")
    retired = run / "report" / "cells_long.html"  # what an older version wrote: gone, never shown as current
    retired.write_text("old")
    write_report(RunStore(run))
    assert not stale.exists() and not retired.exists()
    n_cells = len(list((run / "cells").glob("*.json")))
    pages = sorted((run / "report" / "cells").glob("*.html"))
    assert len(pages) == -(-n_cells // drilldown.PAGE_CELLS) == 2  # 32 cells, 25 a page
    sections = [a["data-cell"] for page in pages for t, a in parsed(page).tags if t == "section"]
    assert sorted(sections) == sorted(p.stem for p in (run / "cells").glob("*.json"))


def test_a_thousand_cell_page_stays_small(tmp_path: Path) -> None:
    run = tmp_path / "run-1000"
    generate(run, turns=1000 * 2 * 3, seeds=2, turns_per_seed=3)
    write_report(RunStore(run))
    index = run / "report" / "index.html"
    assert len(list((run / "cells").glob("*.json"))) == 1000
    assert index.stat().st_size < 10 * 1024 * 1024
    assert len(parsed(index).having("td", "cell")) == 1000


@pytest.mark.browser
def test_report_in_browser(tmp_path: Path) -> None:
    """A real chromium opens the committed CPU run's page: no console error, no request beyond the page itself,
    one bar per defined cell and one marker per undefined one; a drill-down page opens clean too."""
    run = reported(CPU, tmp_path, edit=_hostile)
    long = pd.read_csv(run / "report" / "cells_long.csv")
    shot = screenshot_dir(tmp_path) / "report-cpu.png"
    index, *cells = visit(run / "report" / "index.html", screenshot=shot, follow=3)
    check_visit(index, long)
    assert shot.stat().st_size > 10_000
    for page in cells:
        assert not page.console_errors and not page.foreign_requests, (page.console_errors, page.foreign_requests)


def check_visit(seen, long: pd.DataFrame) -> None:  # type: ignore[no-untyped-def]
    """What every browser test asserts of an index page (the smoke run's too)."""
    assert not seen.console_errors, seen.console_errors
    assert not seen.foreign_requests, seen.foreign_requests
    defined = set(long.loc[long["per_seed_mean"].notna(), "cell_id"])
    assert sorted(seen.bars) == sorted(defined)
    assert set(seen.markers) == set(long["cell_id"]) - defined
    assert all(seen.hovers[c] and c in seen.hovers[c] for c in long["cell_id"])


def test_composition_bars_count_and_measure_the_counted_turns(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    records = [json.loads(line) for line in (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
    counted: dict[str, Counter[str]] = {}
    for record in counted_turns(records):
        counted.setdefault(record["cell_id"], Counter())[record["outcome"]] += 1
    html = (run / "report" / "index.html").read_text(encoding="utf-8")
    for cell_id, outcomes in counted.items():
        svg = html[html.index(f'viewBox="0 0 300 14" data-cell="{cell_id}">') :]
        svg = svg[: svg.index("</svg>")]
        segment = r'class="o-([a-z_]+)" x="([\d.]+)" y="1" width="([\d.]+)".*?<title>\1: (\d+) of (\d+)</title>'
        segments = re.findall(segment, svg)
        total = sum(outcomes.values())
        assert {name: int(n) for name, _x, _w, n, _t in segments} == {o: n for o, n in outcomes.items() if n}
        assert all(int(t) == total for *_rest, t in segments)
        for name, _x, width, n, _t in segments:  # each a share of the bar less the gap before the ineligible ones
            assert float(width) == pytest.approx(292 * int(n) / total, abs=0.01), (cell_id, name)


def test_config_highlight_is_exactly_the_fields_whose_values_differ(tmp_path: Path) -> None:
    run = reported(CPU, tmp_path)
    long = pd.read_csv(run / "report" / "cells_long.csv", dtype=str, keep_default_na=False)
    long["column"] = long["stack_label"] + " | " + long["tools_mode"]
    by_column = long.groupby("column")
    as_set = lambda column: frozenset(x or "—" for x in column)  # noqa: E731
    values = {field: by_column[field].agg(as_set) for field in htmlreport.CONFIG_FIELDS}
    expected = {field for field, per_column in values.items() if per_column.nunique() > 1}
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    table = page[page.index('<table class="config">') : page.index("</table>", page.index('<table class="config">'))]
    highlighted = set(re.findall(r'<tr class="differs"><th scope="row">([a-z_0-9]+)</th>', table))
    assert highlighted == expected and {"tool_flags", "stack_version"} <= highlighted and "turn_cap" not in highlighted


def test_rows_of_a_seed_run_whose_server_died_are_marked_uncounted(tmp_path: Path) -> None:
    cell = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__native_hint"

    def died(run: Path) -> None:
        records = [json.loads(line) for line in (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
        last = max((i for i, r in enumerate(records) if r["cell_id"] == cell and r["seed"] == "ops-00"))
        records[last]["end"] = "server_died"
        (run / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    run = reported(CPU, tmp_path, edit=died)
    rows = parsed(page_of(run, cell)).in_section(cell, "tr", "turn")
    records = [json.loads(line) for line in (run / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
    seed0 = [r for r in records if r["cell_id"] == cell and r["seed"] == "ops-00"]
    marked = [row for row in rows if "uncounted" in (row.get("class") or "").split()]
    assert len(marked) == len(seed0) > 0 and len(rows) > len(marked)


def test_pages_hold_fewer_cells_when_their_rows_would_run_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drilldown, "PAGE_ROWS", 60)
    run = reported(CPU, tmp_path)
    pages = sorted((run / "report" / "cells").glob("*.html"))
    sections = [parsed(page) for page in pages]
    cells = [a["data-cell"] for elements in sections for t, a in elements.tags if t == "section"]
    assert sorted(cells) == sorted(p.stem for p in (run / "cells").glob("*.json"))  # each cell once
    assert len(pages) > 2  # 32 cells at 25 a page would be 2
    for elements in sections:
        in_page = sum(1 for t, a in elements.tags if t == "section")
        rows = len(elements.having("tr", "turn"))
        assert rows <= 60 or in_page == 1


def test_a_column_whose_models_list_the_same_values_in_another_order_is_no_difference() -> None:
    long = pd.DataFrame({
        "cell_id": ["a1", "a2", "b1", "b2"], "model": ["m1", "m2", "m2", "m1"],
        "stack_label": ["s-x", "s-x", "s-y", "s-y"], "tools_mode": ["native"] * 4,
        "parser": ["p1", "p2", "p2", "p1"], "turn_cap": ["6", "6", "6", "7"],
    })  # fmt: skip
    table = {name: (differs, values) for name, differs, values in htmlreport.config_table(long, column_order(long))}
    assert table["parser"] == (False, ["p1 / p2", "p1 / p2"])  # same values, rows in another order
    assert table["turn_cap"] == (True, ["6", "6 / 7"])


def test_a_row_whose_line_moved_shows_the_view_not_another_record(tmp_path: Path) -> None:
    """The drill-down reads a turn's line by the offset its view was read at; if the file changed in between and
    another record now starts there, the page must not show that record as this turn."""
    run = tmp_path / CPU.name
    shutil.copytree(CPU, run, ignore=shutil.ignore_patterns("report"))
    store = RunStore(run)
    views = store.read_turns(view=True)
    pages = drilldown.plan_pages([views[0]["cell_id"]], {views[0]["cell_id"]: views})
    drilldown.fill_rows(store, pages)
    lines = (run / "turns.jsonl").read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    index = next(i for i, r in enumerate(records) if r["turn"] > 0 and r["raw_content"])  # a view without content
    other = next(j for j, r in enumerate(records) if len(lines[j]) < len(lines[index]) and r["raw_content"]
                 and r["seed"] != records[index]["seed"])  # fmt: skip
    offset = sum(map(len, lines[:index]))
    position = next(k for k, view in enumerate(pages[0].shown) if view[OFFSET_KEY] == offset)
    record = records[index]
    assert f"<td>{record['http_status']}</td><td>{record['latency_s']:.2f}</td>" in pages[0].rows[position]
    # The same bytes at every offset, but another record's line (padded with spaces) where this turn's was.
    lines[index] = lines[other].rstrip(b"\n").ljust(len(lines[index]) - 1) + b"\n"
    (run / "turns.jsonl").write_bytes(b"".join(lines))
    drilldown.fill_rows(store, pages)
    row = pages[0].rows[position]
    assert "<td>—</td><td>—</td><td>—/—</td>" in row  # HTTP, latency, tokens unknown: the view alone
    assert '<td class="raw"><pre></pre>' in row  # not the other record's content
