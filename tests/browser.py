"""Open a report page in a real browser: Debian's chromium, driven headless by Playwright (its bundled driver,
the system's browser: nothing is downloaded). What a person would see: console messages, page errors, every
request the page makes, the grid's bars and markers, and a screenshot."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import require

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium_path() -> str:
    found = next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)
    require(found is not None, "no chromium: `apt-get install chromium` (scripts/setup.sh installs it)")
    return str(found)


@dataclass
class PageVisit:
    url: str
    console: list[str] = field(default_factory=list)  # "type: text" of every console message
    errors: list[str] = field(default_factory=list)  # uncaught page errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, itself included
    bars: list[str] = field(default_factory=list)  # data-cell of each grid bar
    markers: dict[str, str] = field(default_factory=dict)  # data-cell -> marker text
    hovers: dict[str, str] = field(default_factory=dict)  # data-cell -> the hover title of its grid cell
    links: list[str] = field(default_factory=list)  # hrefs of the grid cells
    load_ms: float = 0.0

    @property
    def foreign_requests(self) -> list[str]:
        """Every request but the page's own (a #fragment is no request)."""
        return [url for url in self.requests if url != self.url.partition("#")[0]]

    @property
    def console_errors(self) -> list[str]:
        return [line for line in self.console if line.startswith(("error", "warning"))] + self.errors


_GRID_FACTS = """() => {
  const cell = el => el.closest('td');
  return {
    bars: [...document.querySelectorAll('table.grid svg.bar[data-cell]')].map(e => e.dataset.cell),
    markers: Object.fromEntries([...document.querySelectorAll('table.grid .marker[data-cell]')]
      .map(e => [e.dataset.cell, e.textContent])),
    hovers: Object.fromEntries([...document.querySelectorAll('table.grid [data-cell]')]
      .map(e => [e.dataset.cell, cell(e).getAttribute('title')])),
    links: [...document.querySelectorAll('table.grid td.cell a')].map(a => a.getAttribute('href')),
    load: performance.getEntriesByType('navigation')[0].loadEventEnd,
  };
}"""


def visit(page_path: Path, screenshot: Path | None = None, follow: int = 0) -> list[PageVisit]:
    """Open `page_path` (then its first `follow` grid links, each in a page of its own) in headless chromium."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            first = _open(browser, page_path.resolve().as_uri(), screenshot)
            return [first] + [_open(browser, _href_url(page_path, href), None) for href in first.links[:follow]]
        finally:
            browser.close()


def _href_url(page_path: Path, href: str) -> str:
    """A relative link of the page as a file URL (its #fragment kept: it names a section, not a file)."""
    path, _, fragment = href.partition("#")
    url = (page_path.parent / path).resolve().as_uri()
    return f"{url}#{fragment}" if fragment else url


def _open(browser, url: str, screenshot: Path | None) -> PageVisit:  # type: ignore[no-untyped-def]
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    seen = PageVisit(url)
    page.on("console", lambda message: seen.console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: seen.errors.append(str(error)))
    page.on("request", lambda request: seen.requests.append(request.url))
    page.goto(url, wait_until="load")
    facts = page.evaluate(_GRID_FACTS)
    seen.bars, seen.markers, seen.hovers, seen.links = facts["bars"], facts["markers"], facts["hovers"], facts["links"]
    seen.load_ms = float(facts["load"])
    if screenshot is not None:
        page.screenshot(path=str(screenshot))
    page.close()
    return seen


def screenshot_dir(default: Path) -> Path:
    """Where a test leaves its screenshots: $TOOLCALL_MATRIX_SCREENSHOTS if set, else the test's own tmp dir."""
    target = Path(os.environ.get("TOOLCALL_MATRIX_SCREENSHOTS", default))
    target.mkdir(parents=True, exist_ok=True)
    return target
