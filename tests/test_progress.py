"""The sweep's display off a terminal: plain lines per finished seed and cell with running figures, and a
heartbeat line while one request runs long (runner/sweep/progress.py)."""

from __future__ import annotations

import io
import time

from rich.console import Console

from orchestrator.core.types import Outcome, SeedEnd, ToolsMode, TurnRecord
from orchestrator.runner.sweep import progress as progress_module
from orchestrator.runner.sweep.progress import SweepProgress


def record(turn: int, outcome: Outcome, end: SeedEnd | None = None, seed: str = "s1") -> TurnRecord:
    return TurnRecord(run_id="r", cell_id="cell[/x]", seed=seed, turn=turn, model="m", stack="vllm",
                      tools_mode=ToolsMode.NATIVE, hint=False, http_status=200, parse_path="server", outcome=outcome,
                      end=end)


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200), out


def test_not_a_terminal_gives_one_line_per_seed_and_cell_with_running_figures() -> None:
    console, out = plain_console()
    assert not console.is_terminal
    with SweepProgress(console) as progress:
        assert progress.plain
        task = progress.add_task("server-a", total=2)
        for turn in (record(0, Outcome.VALID_CALL), record(1, Outcome.NON_RESPONSE),
                     record(2, Outcome.NO_CALL_PROSE, SeedEnd.PROSE)):
            progress.on_turn(turn)
        progress.update(task, "  cell s1 turn 2 attempt 0")
        progress.seed_done("cell[/x]", "s1", record(2, Outcome.NO_CALL_PROSE, SeedEnd.PROSE))
        progress.cell_done("cell[/x]", "complete")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("server-a (2 to run)")
    assert "seed s1 of cell[/x]: prose after 3 turn(s); cell so far: valid 1/2 eligible (50%), 1 seeds done" in lines[1]
    assert "cell cell[/x] complete: valid 1/2 eligible (50%), 1 seeds done" in lines[2]
    assert len(lines) == 3  # a turn's progress is not a line of its own


class SteppedClock:
    """A monotonic clock the test moves by hand: the heartbeat's arithmetic is checked without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def heartbeats(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if "still running" in line]


def test_a_long_request_gets_heartbeat_lines() -> None:
    console, out = plain_console()
    clock = SteppedClock()
    period = progress_module.PLAIN_HEARTBEAT_S
    progress = SweepProgress(console, clock=clock)  # not entered: no ticker thread, the test is the ticker
    task = progress.add_task("server-a", total=1)
    progress.update(task, "  cell s1 turn 0 attempt 0")
    clock.now += period - 0.5
    progress.heartbeat()
    assert heartbeats(out) == []  # not yet running a full period
    clock.now += 0.5
    progress.heartbeat()
    [first] = heartbeats(out)
    assert f"still running ({period:.0f}s): cell s1 turn 0 attempt 0" in first
    progress.update(task, "  cell s1 turn 0 attempt 0 streaming: 12 events")
    clock.now += 1
    progress.heartbeat()
    assert len(heartbeats(out)) == 1  # a line at most once a period
    clock.now += period
    progress.heartbeat()
    second = heartbeats(out)[1]
    # the same request: its clock kept running from the first update, the line shows the latest event count
    assert f"still running ({2 * period + 1:.0f}s): cell s1 turn 0 attempt 0 streaming: 12 events" in second
    progress.update(task, "  cell s1 turn 1 attempt 0")  # a new request starts its own clock
    clock.now += period
    progress.heartbeat()
    assert f"still running ({period:.0f}s): cell s1 turn 1 attempt 0" in heartbeats(out)[2]


def test_the_ticker_thread_prints_the_heartbeat(monkeypatch) -> None:
    """The entered display's own thread looks every quarter period; the stepped clock says a period has passed, so
    the line comes at its first look (waited for by polling, not by a fixed sleep that a busy machine outlasts)."""
    monkeypatch.setattr(progress_module, "PLAIN_HEARTBEAT_S", 0.2)
    console, out = plain_console()
    clock = SteppedClock()
    with SweepProgress(console, clock=clock) as progress:
        task = progress.add_task("server-a", total=1)
        progress.update(task, "  cell s1 turn 0 attempt 0")
        clock.now += 1.0
        deadline = time.monotonic() + 30
        while not heartbeats(out) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert heartbeats(out), out.getvalue()
    assert "still running (1s): cell s1 turn 0 attempt 0" in heartbeats(out)[0]


def test_a_terminal_gets_the_live_display() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with SweepProgress(console) as progress:
        assert not progress.plain and progress.live is not None
        task = progress.add_task("server-a", total=1)
        progress.update(task, "  cell s1 turn 0 streaming: 3 events")
        progress.advance(task)
    assert "server-a" in out.getvalue()
