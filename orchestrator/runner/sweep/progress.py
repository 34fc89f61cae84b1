"""What a sweep shows while it runs: a live display on a terminal, plain lines anywhere else.

- On a terminal: rich's live progress (a spinner that keeps moving while a slow model generates, a bar per
  server, the current turn; a streamed turn shows its events arriving).
- Not a terminal (a CI or nightly log): one line per finished seed and per finished cell, each with the cell's
  running figures (valid calls / eligible turns so far, seeds done), and while one request runs longer than
  `PLAIN_HEARTBEAT_S` a line saying what it is waiting on, so a long run is visible in its log.
Both get the same calls from the sweep; neither decides anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from orchestrator.core.types import INELIGIBLE_OUTCOMES, Outcome, TurnRecord

PLAIN_HEARTBEAT_S = 60.0


@dataclass
class CellTally:
    """A cell's running figures, from the records as they are written."""

    valid: int = 0
    eligible: int = 0
    seeds: int = 0

    def text(self) -> str:
        share = f"{100 * self.valid / self.eligible:.0f}%" if self.eligible else "undefined"
        return f"valid {self.valid}/{self.eligible} eligible ({share}), {self.seeds} seeds done"


class SweepProgress:
    """The sweep's display; `plain` when the console is not a terminal."""

    def __init__(
        self, console: Console, *, plain: bool | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.console = console
        self.clock = clock  # injectable so a test can step the heartbeat's time instead of sleeping through it
        self.plain = (not console.is_terminal) if plain is None else plain
        self.tallies: dict[str, CellTally] = {}
        self.lock = threading.Lock()
        self.live: Progress | None = None
        self.waiting: tuple[str, float] | None = None  # plain: what is running, since when
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None
        self.last_heartbeat = clock()  # plain: when the ticker started or last printed a heartbeat line

    def __enter__(self) -> SweepProgress:
        if self.plain:
            self.last_heartbeat = self.clock()
            self.ticker = threading.Thread(target=self._tick, daemon=True, name="progress-heartbeat")
            self.ticker.start()
        else:
            self.live = Progress(
                SpinnerColumn(),  # keeps moving while a slow model generates: the heartbeat
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self.live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop.set()
        if self.live is not None:
            self.live.__exit__(kind, exc, tb)

    def line(self, text: str) -> None:
        self.console.print(escape(text), highlight=False, soft_wrap=True)

    def add_task(self, description: str, total: int) -> Any:
        if self.live is not None:
            return self.live.add_task(f"[bold]{escape(description)}[/]", total=total)
        self.line(f"{time.strftime('%H:%M:%S')} {description} ({total} to run)")
        return description

    def update(self, task: Any, description: str) -> None:
        """What a task is doing now (a turn, a stream's arriving events); plain: remembered for the heartbeat."""
        if self.live is not None:
            self.live.update(task, description=escape(description))
            return
        with self.lock:
            same_request = self.waiting is not None and _request_of(self.waiting[0]) == _request_of(description)
            self.waiting = (description, self.waiting[1] if same_request and self.waiting else self.clock())

    def advance(self, task: Any) -> None:
        if self.live is not None:
            self.live.advance(task)

    def on_turn(self, record: TurnRecord) -> None:
        """Every record as it is written: the running figures of its cell."""
        with self.lock:
            tally = self.tallies.setdefault(record.cell_id, CellTally())
            if record.outcome not in INELIGIBLE_OUTCOMES:
                tally.eligible += 1
                tally.valid += record.outcome is Outcome.VALID_CALL
            if record.end is not None and not record.superseded:
                tally.seeds += 1

    def seed_done(self, cell_id: str, seed: str, final: TurnRecord) -> None:
        if self.plain:
            with self.lock:
                tally = self.tallies.get(cell_id, CellTally())
                self.waiting = None
            end = final.end.value if final.end else "?"
            self.line(f"{time.strftime('%H:%M:%S')} seed {seed} of {cell_id}: {end} after {final.turn + 1} turn(s); "
                      f"cell so far: {tally.text()}")

    def cell_done(self, cell_id: str, status: str) -> None:
        with self.lock:
            tally = self.tallies.get(cell_id, CellTally())
        self.line(f"{time.strftime('%H:%M:%S')} cell {cell_id} {status}: {tally.text()}")

    def _tick(self) -> None:
        """Plain: every PLAIN_HEARTBEAT_S, a line for a request that has been running that long (a silent
        generation, or a long stream: its latest event count)."""
        while not self.stop.wait(PLAIN_HEARTBEAT_S / 4):
            self.heartbeat()

    def heartbeat(self) -> None:
        """One look by the ticker: a line when the request has run PLAIN_HEARTBEAT_S and no line came that recently."""
        with self.lock:
            waiting = self.waiting
        now = self.clock()
        if waiting and now - waiting[1] >= PLAIN_HEARTBEAT_S and now - self.last_heartbeat >= PLAIN_HEARTBEAT_S:
            self.line(f"{time.strftime('%H:%M:%S')} still running ({now - waiting[1]:.0f}s): {waiting[0].strip()}")
            self.last_heartbeat = now


def _request_of(description: str) -> str:
    """The request a heartbeat describes, without its arriving-events count."""
    return description.split(" streaming")[0]
