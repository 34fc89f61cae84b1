"""The sweep's display off a terminal: plain lines per finished seed and cell with running figures, and a
heartbeat line while one request runs long (runner/progress.py)."""

from __future__ import annotations

import io
import time

from rich.console import Console

from orchestrator.core.types import Outcome, SeedEnd, ToolsMode, TurnRecord
from orchestrator.runner import progress as progress_module
from orchestrator.runner.progress import SweepProgress


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


def test_a_long_request_gets_heartbeat_lines(monkeypatch) -> None:
    monkeypatch.setattr(progress_module, "PLAIN_HEARTBEAT_S", 0.2)
    console, out = plain_console()
    with SweepProgress(console) as progress:
        task = progress.add_task("server-a", total=1)
        progress.update(task, "  cell s1 turn 0 attempt 0")
        time.sleep(0.5)
        progress.update(task, "  cell s1 turn 0 attempt 0 streaming: 12 events")
        time.sleep(0.35)
    beats = [line for line in out.getvalue().splitlines() if "still running" in line]
    assert beats, out.getvalue()
    assert "cell s1 turn 0 attempt 0" in beats[0]
    assert any("streaming: 12 events" in line for line in beats)  # the same request: its clock kept running


def test_a_terminal_gets_the_live_display() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with SweepProgress(console) as progress:
        assert not progress.plain and progress.live is not None
        task = progress.add_task("server-a", total=1)
        progress.update(task, "  cell s1 turn 0 streaming: 3 events")
        progress.advance(task)
    assert "server-a" in out.getvalue()
