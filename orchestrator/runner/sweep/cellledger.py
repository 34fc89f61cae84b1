"""What the run directory says of a sweep's cells: which seeds are left, which cells are done, the config a
resumed cell keeps, the launches earlier runs recorded, and a cell marked `launch_failed`. One place for the
rules a resume depends on: nothing finished is rerun, nothing recorded is replaced."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console

from orchestrator.core.runcontract import RUN_STATE_FIELDS
from orchestrator.core.types import CellStatus
from orchestrator.runner.config.cellconfig import cell_config
from orchestrator.runner.config.matrix import Cell, Matrix, ServerPlan
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.suites.tasks import Suite

if TYPE_CHECKING:
    from orchestrator.runner.sweep.session import LaunchFailed, ServerSession

Seed = tuple[str, str]  # (suite, seed id)


class CellLedger:
    def __init__(self, matrix: Matrix, suites: Mapping[str, Suite], store: RunStore, console: Console) -> None:
        self.matrix = matrix
        self.suites = suites  # as offered to the model (MCP tools listed): what a launch_failed cell records
        self.store = store
        self.console = console

    def pending_of(self, plan: ServerPlan, done: set[tuple[str, str]]) -> dict[str, list[Seed]] | None:
        """Per cell of a server group, its seeds not finished yet; None when the group has nothing left to do
        (every seed finished and every cell complete or launch_failed)."""
        pending = {cell.cell_id: [s for s in cell.seeds if (cell.cell_id, s[1]) not in done] for cell in plan.cells}
        finished = all(not seeds for seeds in pending.values()) and all(
            (self.store.read_cell(c.cell_id) or {}).get("status") in (CellStatus.COMPLETE, CellStatus.LAUNCH_FAILED)
            for c in plan.cells
        )
        return None if finished else pending

    def cell_done(self, cell: Cell, pending: dict[str, list[Seed]]) -> bool:
        """Complete and nothing pending: a resume leaves it exactly as it is."""
        stored = self.store.read_cell(cell.cell_id) or {}
        return not pending[cell.cell_id] and stored.get("status") == CellStatus.COMPLETE

    def unfinished(self, plan: ServerPlan, pending: dict[str, list[Seed]]) -> list[Cell]:
        return [cell for cell in plan.cells if not self.cell_done(cell, pending)]

    def previous_launches(self, cell: Cell) -> list[dict[str, Any]]:
        """The launches earlier runs recorded for this cell: a resumed run appends to them, never replaces."""
        return (self.store.read_cell(cell.cell_id) or {}).get("launches") or []

    def first_config(self, cell: Cell) -> dict[str, Any] | None:
        """A resumed cell keeps the config recorded at its first launch; later starts go to `launches`."""
        previous = self.store.read_cell(cell.cell_id)
        if not previous or not previous.get("argv"):  # never served: nothing recorded to keep
            return None
        return {k: v for k, v in previous.items() if k not in RUN_STATE_FIELDS}

    def mark_launch_failed(self, cells: list[Cell], exc: LaunchFailed, session: ServerSession | None) -> None:
        """Mark cells that could not be served. A cell with turns from an earlier launch keeps that launch's
        config (the failed start is appended to its launches); a complete cell is never touched."""
        if not cells:
            return
        self.console.print(f"[red]launch failed[/] {cells[0].stack.label}: {exc.summary}", highlight=False)
        failed_start = session.launches[-1:] if session and not session.alive() else []
        for cell in cells:
            base = self.first_config(cell) or cell_config(self.matrix, cell, None, None, None, resolved=self.suites)
            self.store.write_cell(
                cell.cell_id,
                {
                    **base,
                    "status": CellStatus.LAUNCH_FAILED.value,
                    "error": exc.error,
                    "log_tail": exc.log_tail,
                    "reproduce": exc.command,
                    "launches": [*self.previous_launches(cell), *failed_start],
                },
            )
