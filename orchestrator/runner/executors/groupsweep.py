"""One server group run away from the driver (the Ray executor's worker side), and the driver applying what it
sends. Nothing here imports Ray: the executor (runner/executors/rayexecutor.py) moves these events between processes.

The driver stays the single writer of results/<run_id>/. A group runs the ordinary sweep (Sweep.run_server)
against a *shard*: a run directory of the same name on the node's own disk, seeded with the group's cells,
records and streams, so the sweep reads its state (attempts, first configs, stream line numbers) exactly as it
would on one host. Every change it makes is also put on an event queue, in order, as it happens:

- ("turn", json)  ("cell", cell_id, data)  ("supersede", [[cell, seed], ...])  ("stream", cell_id, record, ref)
- ("progress", method, args): the driver's display shows every group;
- ("file", relative path, bytes, mode): server logs, servers.jsonl and MCP tool-call logs, sent when the group
  ends (they are for people reading a run; no figure depends on them);
- ("done", executed seeds, error or None): the last event.

Why streamed, not shards merged at the end: hosts share no file system, and a node that dies takes its disk's
shard with it; streamed, every record the driver received is kept, and `--resume` reruns only the seeds that
did not finish. A driver killed mid-run loses at most the events not yet drained; a seed whose end never
arrived is unfinished, so the resume supersedes and reruns it (nothing duplicated, nothing lost)."""

from __future__ import annotations

import json
import queue
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.core.cell import slug
from orchestrator.core.types import CellStatus, TurnRecord
from orchestrator.runner.config.cellconfig import cell_config
from orchestrator.runner.config.matrix import Matrix, ServerPlan
from orchestrator.runner.store.runpaths import OutsideRunError, owned_path
from orchestrator.runner.store.runstore import RunStore, now, write_json_atomic
from orchestrator.runner.store.streamstore import STREAMS_DIR, StreamStore
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.sweep.cellledger import Seed
from orchestrator.runner.sweep.progress import SweepProgress
from orchestrator.runner.sweep.serverlog import SERVERS_FILE
from orchestrator.runner.sweep.sweep import Sweep
from orchestrator.serving.serverconfig import ServerConfig

Event = tuple[Any, ...]
Emit = Callable[[Event], None]
# Side files and how the driver writes them: appended (a resumed group's new log of the same name follows the old).
SHIPPED = (("logs", "ab"), (SERVERS_FILE, "ab"), ("tool_calls", "ab"))
PROGRESS_CALLS = frozenset({"add_task", "update", "advance", "seed_done", "cell_done", "line"})


class GroupCancelled(BaseException):
    """The driver stopped the group (Ctrl-C): raised past every `except Exception`, like KeyboardInterrupt."""


class ShardStore(RunStore):
    """A group's run directory on its node: written locally (the sweep reads it back) and sent to the driver.
    Every cell file names the node that ran it (`node`), and each launch its node's host name."""

    def __init__(self, run_dir: Path, emit: Emit, node: dict[str, Any]) -> None:
        super().__init__(run_dir)
        self.emit = emit
        self.node = node
        # Launches the cells had before this group (earlier runs, other hosts): never stamped with this node.
        self.earlier = {cell["cell_id"]: len(cell.get("launches") or []) for cell in self.read_cells()}

    def append_turn(self, record: TurnRecord) -> None:
        super().append_turn(record)
        self.emit(("turn", record.model_dump_json()))

    def write_cell(self, cell_id: str, data: dict[str, Any]) -> None:
        for launch in (data.get("launches") or [])[self.earlier.get(cell_id, 0) :]:  # this node's starts only
            launch.setdefault("node", {k: self.node.get(k) for k in ("hostname", "ray_node_name", "ray_node_id")})
        data = {**data, "node": self.node}
        super().write_cell(cell_id, data)
        self.emit(("cell", cell_id, data))

    def mark_superseded(self, keys: set[tuple[str, str]]) -> int:
        marked = super().mark_superseded(keys)
        self.emit(("supersede", sorted(list(key) for key in keys)))
        return marked


class ShardStreams(StreamStore):
    """Streamed attempts' raw events, written on the node and sent with the reference the turn record holds."""

    def __init__(self, run_dir: Path, emit: Emit) -> None:
        super().__init__(run_dir)
        self.emit = emit
        self.in_order = threading.Lock()  # seeds of one cell on threads: events in the order of the lines

    def append(self, cell_id: str, record: dict[str, Any]) -> str:
        with self.in_order:
            ref = super().append(cell_id, record)
            self.emit(("stream", cell_id, record, ref))
        return ref


class RemoteProgress:
    """SweepProgress's calls, sent to the driver's display (task handles are the group's own numbers)."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.tasks = 0

    def add_task(self, description: str, total: int) -> int:
        self.tasks += 1
        self.emit(("progress", "add_task", [self.tasks, description, total]))
        return self.tasks

    def update(self, task: int, description: str) -> None:
        self.emit(("progress", "update", [task, description]))

    def advance(self, task: int) -> None:
        self.emit(("progress", "advance", [task]))

    def on_turn(self, record: TurnRecord) -> None:
        """The driver tallies each turn as it writes it."""

    def seed_done(self, cell_id: str, seed: str, final: TurnRecord) -> None:
        self.emit(("progress", "seed_done", [cell_id, seed, final.model_dump_json()]))

    def cell_done(self, cell_id: str, status: str) -> None:
        self.emit(("progress", "cell_done", [cell_id, status]))

    def line(self, text: str) -> None:
        self.emit(("progress", "line", [text]))


class GroupSweep(Sweep):
    """The ordinary sweep, for one server group, on a shard; stoppable from another thread (`cancel`)."""

    def __init__(self, *args: Any, emit: Emit, gpu_ids: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streams.close()
        self.streams = ShardStreams(self.store.dir, emit)
        self.emit = emit
        self.gpu_ids = gpu_ids

    def server_config(self, plan: ServerPlan) -> ServerConfig:
        """The group's server on the GPUs Ray gave it (a process inherits them as CUDA_VISIBLE_DEVICES)."""
        config = super().server_config(plan)
        return config.model_copy(update={"gpu_ids": self.gpu_ids}) if self.gpu_ids else config

    def run_group(self, plan: ServerPlan, pending: dict[str, list[Seed]]) -> int:
        progress = RemoteProgress(self.emit)
        self.progress = progress  # type: ignore[assignment]  # the same calls as SweepProgress, sent on
        with self.running():  # the node's spans, when its environment names an OTLP endpoint
            self.run_server(plan, pending, progress)  # type: ignore[arg-type]
        return self.executed_seeds

    def run_seeds(self, *args: Any, **kwargs: Any) -> list[Seed]:
        died = super().run_seeds(*args, **kwargs)
        if self.cancelled.is_set():  # cancelled seeds are not finished: the cell must not be written complete
            raise GroupCancelled("the driver stopped the group")
        return died

    def cancel(self) -> None:
        self.cancelled.set()


def seed_shard(shard: Path, manifest: dict[str, Any], files: dict[str, bytes]) -> None:
    """A group's shard: the run's manifest and the group's own files from the driver (cells, records, streams)."""
    if shard.exists():
        shutil.rmtree(shard)
    (shard / "cells").mkdir(parents=True)
    write_json_atomic(shard / "manifest.json", manifest, run_dir=shard)
    (shard / "turns.jsonl").write_bytes(files.get("turns.jsonl", b""))
    for name, data in files.items():
        if name != "turns.jsonl":
            owned_path(shard, shard / name).parent.mkdir(parents=True, exist_ok=True)
            (shard / name).write_bytes(data)


def group_files(store: RunStore, plan: ServerPlan) -> dict[str, bytes]:
    """What a group's shard starts from: its cells' files, their turn records (as stored) and their streams."""
    ids = {cell.cell_id for cell in plan.cells}
    lines = [
        line
        for line in store.turns_path.read_bytes().splitlines(keepends=True)
        if line.strip() and json.loads(line).get("cell_id") in ids
    ]
    files = {"turns.jsonl": b"".join(lines)}
    for cell in plan.cells:
        for name in (f"cells/{cell.cell_id}.json", f"{STREAMS_DIR}/{slug(cell.cell_id)}.jsonl"):
            path = store.dir / name
            if path.is_file():
                files[name] = path.read_bytes()
    return files


def shipped_files(shard: Path) -> list[Event]:
    """The shard's side files as events (written by the driver when the group ends)."""
    events: list[Event] = []
    for name, mode in SHIPPED:
        root = shard / name
        paths = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root] * root.is_file()
        events += [("file", str(path.relative_to(shard)), path.read_bytes(), mode) for path in paths]
    return events


class Applier:
    """The driver's side: applies a group's events to the run, in the order they were made."""

    def __init__(self, store: RunStore, streams: StreamStore, progress: SweepProgress, group: str) -> None:
        self.store, self.streams, self.progress, self.group = store, streams, progress, group
        self.tasks: dict[int, Any] = {}
        self.shard_dir: str | None = None  # the node's path of the shard, rewritten to the run's in cell files
        self.executed = 0
        self.error: str | None = None
        self.finished = False
        self.mismatches: list[str] = []

    def apply(self, event: Event) -> None:
        kind = event[0]
        if kind == "turn":
            record = TurnRecord.model_validate_json(event[1])
            self.store.append_turn(record)
            self.progress.on_turn(record)
        elif kind == "cell":
            self.store.write_cell(event[1], self._local_paths(event[2]))
        elif kind == "supersede":
            self.store.mark_superseded({(cell, seed) for cell, seed in event[1]})
        elif kind == "stream":
            ref = self.streams.append(event[1], event[2])
            if ref != event[3]:  # the turn record points at the node's line: say so if the run's differs
                self.mismatches.append(f"{event[1]}: stream line {ref} here, {event[3]} on the node")
        elif kind == "progress":
            self._progress(event[1], event[2])
        elif kind == "file":
            self._file(event[1], event[2], event[3])
        elif kind == "shard":
            self.shard_dir = event[1]
        elif kind == "done":
            self.executed, self.error, self.finished = event[1], event[2], True

    def _local_paths(self, data: dict[str, Any]) -> dict[str, Any]:
        if not self.shard_dir:
            return data
        text = json.dumps(data).replace(json.dumps(self.shard_dir)[1:-1], json.dumps(str(self.store.dir))[1:-1])
        return json.loads(text)

    def _progress(self, method: str, args: list[Any]) -> None:
        if method not in PROGRESS_CALLS:
            return
        if method == "add_task":
            number, description, total = args
            self.tasks[number] = self.progress.add_task(f"{self.group}: {description}", total)
        elif method in ("update", "advance"):
            task = self.tasks.get(args[0])
            if task is not None:
                getattr(self.progress, method)(task, *args[1:])
        elif method == "seed_done":
            self.progress.seed_done(args[0], args[1], TurnRecord.model_validate_json(args[2]))
        else:
            getattr(self.progress, method)(*args)

    def _file(self, name: str, data: bytes, mode: str) -> None:
        try:  # a path from another process: never outside the run
            path = owned_path(self.store.dir, self.store.dir / name)
        except OutsideRunError as exc:
            raise OutsideRunError(f"{self.group}: a shipped file {name!r}: {exc}") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open(mode) as out:
            out.write(data)


def mark_lost(
    store: RunStore, matrix: Matrix, plan: ServerPlan, reason: str, resolved: Mapping[str, Suite]
) -> list[str]:
    """A group whose node or worker was lost: each of its cells not complete is marked `worker_lost` with the
    reason (its records so far kept; `--resume` reruns the seeds that did not finish, on any node). `resolved`:
    the run's suites as offered (the driver's sweep's)."""
    marked = []
    for cell in plan.cells:
        stored = store.read_cell(cell.cell_id) or {}
        if stored.get("status") in (CellStatus.COMPLETE, CellStatus.LAUNCH_FAILED, CellStatus.SERVER_DIED):
            continue  # ended before the loss: its own status says how
        base = stored or cell_config(matrix, cell, None, None, None, resolved=resolved)
        store.write_cell(
            cell.cell_id, {**base, "status": CellStatus.WORKER_LOST.value, "error": reason, "finished": now()}
        )
        marked.append(cell.cell_id)
    return marked


def console_for_group() -> Console:
    """The sweep's own console on a node prints nothing: what it shows goes to the driver as events."""
    import io

    return Console(file=io.StringIO(), width=200)


def drain(events: queue.Queue[Event], timeout_s: float, limit: int = 2000) -> list[Event]:
    """Events waiting now (blocking up to `timeout_s` for the first), in order, at most `limit`."""
    try:
        batch = [events.get(timeout=timeout_s)]
    except queue.Empty:
        return []
    while len(batch) < limit:
        try:
            batch.append(events.get_nowait())
        except queue.Empty:
            break
    return batch
