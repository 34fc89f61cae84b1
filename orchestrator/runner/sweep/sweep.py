"""Run a matrix: for each server (stack config, model), start it from its pinned definition, wait for
health, probe, sweep the modes over the seeds, tear down.

- Nothing that goes wrong while starting a server aborts the matrix (missing binary, image not found,
  engine API error, readiness timeout, a failed Ollama pull): the cells it would have served are marked
  `launch_failed` with the error and log tail, and the sweep goes on.
- A server that dies under a cell ends the running seeds as `server_died`; the server is restarted once
  (every start is recorded in the cell's `launches`) and those seeds rerun from the start, their aborted
  records kept and marked superseded. A second death marks the cell `server_died`; `--resume` reruns it.
- Ctrl-C cancels queued seeds at once, tears the server down, and leaves unstarted seeds to `--resume`.
Resumable: finished seeds are never rerun."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console

from orchestrator.core.chattemplate import ChatTemplate, TemplateError, render_chat
from orchestrator.core.modes import mode_of
from orchestrator.core.types import CellStatus, SeedEnd, TurnRecord
from orchestrator.runner.config.cellconfig import cell_config
from orchestrator.runner.config.matrix import Cell, Matrix, ModelEntry, ServerPlan, expand
from orchestrator.runner.config.resolve import listed_suites
from orchestrator.runner.product.channelrun import run_model_case, run_product_case
from orchestrator.runner.store.runpaths import owned_path
from orchestrator.runner.store.runstore import RunStore, now
from orchestrator.runner.store.streamstore import StreamStore
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.sweep.cellledger import CellLedger, Seed
from orchestrator.runner.sweep.progress import SweepProgress
from orchestrator.runner.sweep.seedpool import map_seeds
from orchestrator.runner.sweep.seedsetup import request_policy, served_by
from orchestrator.runner.sweep.serverlog import record_server
from orchestrator.runner.sweep.session import LaunchFailed, ServerSession, launch_config, model_ref_for
from orchestrator.runner.sweep.toolservers import ToolServers
from orchestrator.runner.turn import tracing
from orchestrator.runner.turn.agent import (
    ProductSetup,
    SeedCancelled,
    SeedContext,
    SeedTask,
    run_seed,
)
from orchestrator.runner.turn.bfclturn import run_bfcl_case, seed_tools
from orchestrator.runner.turn.guards import active_guards
from orchestrator.serving.probe import ProbeResult, probe
from orchestrator.serving.serverconfig import ServerConfig
from orchestrator.serving.templates import NoTemplate, model_template

# A raw-template cell's template must render a first prompt (with the suite's tools), or the cell cannot run; a
# template that fails on a later turn (e.g. on `tool` messages) ends that seed as `template_error`, recorded.
TEMPLATE_CHECK: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


class Sweep:
    def __init__(
        self,
        matrix: Matrix,
        store: RunStore,
        console: Console,
        *,
        guards: frozenset[str] | None = None,
        suites: dict[str, Suite] | None = None,
    ) -> None:
        self.matrix = matrix
        self.store = store
        self.console = console
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.executed_seeds = 0
        # The product channel's guards: the matrix's switches, or the environment's set (an ablation passes the
        # set its parent run had, whatever the environment says now).
        self.guards = guards if guards is not None else active_guards(matrix.guards, os.environ)
        # The run's suites as offered to the model, resolved once (MCP suites: their server's tools, listed by the
        # caller before the run directory exists, else now).
        self.suites: dict[str, Suite] = suites if suites is not None else listed_suites(matrix.suites())
        self.tool_servers = ToolServers(self.suites, store.dir, product=matrix.channels not in (None, ["model"]))
        self.ledger = CellLedger(matrix, self.suites, store, console)
        self.streams = StreamStore(store.dir)  # streamed attempts' raw events, one side file per cell
        self.progress: SweepProgress | None = None
        self.phase_s: dict[str, float] = {}  # the server now running: seconds spent per phase (probe, seeds)

    def loop_for(self, cell: Cell) -> Any:
        if cell.category is not None:  # a BFCL category: each case is its first answer, judged by BFCL's checker
            return run_bfcl_case
        return {"model": run_model_case, "product": run_product_case}.get(cell.channel, run_seed)

    def cell_guards(self, cell: Cell) -> frozenset[str]:
        return self.guards - {cell.without} if cell.channel == "product" else frozenset()

    def record(self, turn: TurnRecord) -> None:
        with self.lock:
            self.store.append_turn(turn)
        if self.progress is not None:
            self.progress.on_turn(turn)

    def run(self) -> int:
        with self.running():
            return self.run_plans()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """What a sweep holds while it runs, here or as a Ray group on its node: traces exported (OTLP spans when
        OTEL_EXPORTER_OTLP_ENDPOINT is set, flushed at the end), the run's tool servers, the streams' side files."""
        with tracing.exporting():
            try:
                self.tool_servers.start()
                yield
            finally:
                self.tool_servers.close()
                self.streams.close()

    def run_plans(self) -> int:
        plans = expand(self.matrix)
        done = self.store.completed_seeds()
        with SweepProgress(self.console) as progress:
            self.progress = progress
            servers = progress.add_task("servers", total=len(plans))
            for plan in plans:
                pending = self.ledger.pending_of(plan, done)
                if pending is not None:
                    self.run_server(plan, pending, progress)
                progress.advance(servers)
        return self.executed_seeds

    def server_config(self, plan: ServerPlan) -> ServerConfig:
        return launch_config(self.matrix, plan)

    def run_server(self, plan: ServerPlan, pending: dict[str, list[Seed]], progress: SweepProgress) -> None:
        try:
            config = self.server_config(plan)
        except LaunchFailed as exc:
            self.ledger.mark_launch_failed(self.ledger.unfinished(plan, pending), exc, None)
            return
        logs = owned_path(self.store.dir, self.store.dir / "logs")  # a resumed run's logs/ may be a link out of it
        session = ServerSession(config, self.store.run_id, logs, label=plan.stack.label)
        task = progress.add_task(f"{plan.server_id} starting", total=sum(len(s) for s in pending.values()))
        self.phase_s = {"probe": 0.0, "seeds": 0.0}
        started, begun = now(), time.monotonic()
        try:
            try:
                session.start("initial")
            except LaunchFailed as exc:
                self.ledger.mark_launch_failed(self.ledger.unfinished(plan, pending), exc, session)
                return
            try:
                progress.update(task, description=f"{plan.server_id} ready in {session.ready_s:.0f}s")
                for entry in plan.models:
                    self.run_model(plan, entry, config, session, pending, progress, task)
            finally:
                session.stop()
        finally:
            record_server(self.store.dir, plan, session, self.phase_s, started, time.monotonic() - begun)

    def run_model(
        self,
        plan: ServerPlan,
        entry: ModelEntry,
        config: ServerConfig,
        session: ServerSession,
        pending: dict[str, list[Seed]],
        progress: SweepProgress,
        task: Any,
    ) -> None:
        cells = [c for c in plan.cells if c.model.name == entry.name and not self.ledger.cell_done(c, pending)]
        if not cells:
            return
        try:
            model_config, probe_result = self.prepare_model(plan, entry, config, session)
        except LaunchFailed as exc:  # e.g. an Ollama pull that failed: this model's cells, not the server's
            self.ledger.mark_launch_failed(cells, exc, session)
            return
        for cell in cells:
            try:
                session.ensure_alive("restart: the server had died under an earlier cell")
                template = self.cell_template(cell, model_config, session)
            except LaunchFailed as exc:
                self.ledger.mark_launch_failed([cell], exc, session)
                continue
            self.run_cell(cell, session, model_config, probe_result, pending[cell.cell_id], progress, task, template)

    def cell_template(self, cell: Cell, config: ServerConfig, session: ServerSession) -> ChatTemplate | None:
        """The model's own chat template for a raw-template cell, checked to render the task's first prompt;
        a model without one (or one that does not render) cannot run the cell: LaunchFailed names why."""
        if not mode_of(cell.mode).renders_template:
            return None
        try:
            flags = cell.stack.spec.template_flags
            template = model_template(config.model.path, session.handle.describe().get("argv"), flags)
            for suite in sorted({suite for suite, _ in cell.seeds}):
                render_chat(template, TEMPLATE_CHECK, self.suites[suite].tools)
            return template
        except (NoTemplate, TemplateError) as exc:
            raise LaunchFailed(f"{cell.cell_id}: no chat template the harness can render: {exc}") from exc

    def prepare_model(
        self, plan: ServerPlan, entry: ModelEntry, config: ServerConfig, session: ServerSession
    ) -> tuple[ServerConfig, ProbeResult]:
        """The model's config on a live server, made available (pulled) and probed; any failure: LaunchFailed."""
        session.ensure_alive("restart: the server had died under an earlier model")
        try:
            model_config = (
                config
                if entry is plan.models[0]
                else config.model_copy(update={"model": model_ref_for(plan.stack.stack, entry, plan.stack.spec)})
            )
            begun = time.monotonic()
            try:
                session.prepare_model(model_config, self.matrix.timeouts.ready_s, plan.stack.spec)
                return model_config, probe(session.handle, model_config)
            finally:
                self.phase_s["probe"] = self.phase_s.get("probe", 0.0) + time.monotonic() - begun
        except LaunchFailed:
            raise
        except Exception as exc:  # a missing asset, a probe on a server that just died: the cells, not the run
            raise LaunchFailed(f"{entry.name}: cannot prepare the model: {type(exc).__name__}: {exc}") from exc

    def run_cell(
        self,
        cell: Cell,
        session: ServerSession,
        config: ServerConfig,
        probe_result: ProbeResult,
        seeds: list[Seed],
        progress: SweepProgress,
        task: Any,
        template: ChatTemplate | None = None,
    ) -> None:
        base = self.ledger.first_config(cell) or cell_config(
            self.matrix,
            cell,
            session.handle,
            config,
            probe_result,
            raw_template=template,
            guards=self.cell_guards(cell),
            tool_server=self.tool_servers.record(cell),
            resolved=self.suites,
        )
        previous = self.ledger.previous_launches(cell)
        serving = len(session.launches) - 1  # the start now serving; later restarts belong to this cell too
        started = now()
        self.store.write_cell(
            cell.cell_id,
            {
                **base,
                "status": CellStatus.RUNNING.value,
                "started": started,
                "launches": [*previous, *session.launches[serving:]],
            },
        )
        # Records carry the version that served them: a resumed cell keeps its first config, but this launch's
        # probe says what is running now.
        served = {**base, "stack_version": probe_result.stack_version or base.get("stack_version")}
        begun = time.monotonic()
        died = self.run_seeds(cell, session, served, config, seeds, progress, task, template)
        status, error = CellStatus.COMPLETE, None
        if died:
            try:
                session.start(f"restart: the server died under {len(died)} seed(s) of this cell")
                self.store.mark_superseded({(cell.cell_id, seed_id) for _suite, seed_id in died})  # one rewrite
                died = self.run_seeds(cell, session, served, config, died, progress, task, template)
            except LaunchFailed as exc:
                error = exc.error
            if died or error:
                status = CellStatus.SERVER_DIED
        seeds_s = time.monotonic() - begun  # a restart's start is in it (and in its launch record)
        self.phase_s["seeds"] = self.phase_s.get("seeds", 0.0) + seeds_s
        launches = [*previous, *session.launches[serving:]]
        final = {
            **base,
            "status": status.value,
            "started": started,
            "finished": now(),
            "launches": launches,
            "timings": {"seeds_s": round(seeds_s, 3), "seed_runs": len(seeds)},
        }
        self.store.write_cell(cell.cell_id, {**final, "error": error} if error else final)
        progress.cell_done(cell.cell_id, status.value)

    def run_seeds(
        self,
        cell: Cell,
        session: ServerSession,
        base: dict[str, Any],
        config: ServerConfig,
        seeds: list[Seed],
        progress: SweepProgress,
        task: Any,
        template: ChatTemplate | None = None,
    ) -> list[Seed]:
        """Run seeds (concurrently where the matrix says); returns those whose server died under them."""
        served = served_by(cell, session.handle, base, config, self.matrix.concurrency)
        policy = request_policy(self.matrix, cell)

        def one(seed: Seed) -> Seed | None:
            suite, seed_id = seed
            with self.lock:  # an aborted earlier run was marked superseded already (run_cell, or the resume)
                attempt = self.store.next_seed_attempt((cell.cell_id, seed_id))
            loaded = self.suites[suite]
            ctx = SeedContext(
                run_id=self.store.run_id,
                cell_id=cell.cell_id,
                task=SeedTask(
                    suite=loaded,
                    seed_id=seed_id,
                    mode=cell.mode,
                    turn_cap=self.matrix.turn_cap_for(cell.model),
                    loop_repeats=self.matrix.loop_repeats,
                    sample=cell.sample,
                    seed_attempt=attempt,
                    call_format=base.get("call_format") or cell.call_format,
                    template=template,
                    semantics=cell.semantics(loaded.tools),
                    **seed_tools(loaded, seed_id, cell.mode),
                ),
                server=served,
                policy=policy,
                product=ProductSetup(
                    channel=None if cell.channel == "agent" else cell.channel,
                    without=cell.without,
                    guards=self.cell_guards(cell),
                    execute_call=self.tool_servers.executor(loaded, seed_id) if cell.channel == "product" else None,
                ),
                cancelled=self.cancelled,
                record_stream=lambda record: self.streams.append(cell.cell_id, record),
            )
            loop = tracing.traced_loop(self.loop_for(cell), session.span, session.config.tool_config)
            try:
                final = loop(ctx, self.record, heartbeat=lambda m: progress.update(task, description=f"  {m}"))
                progress.seed_done(cell.cell_id, seed_id, final)
            except SeedCancelled:
                return None
            with self.lock:
                self.executed_seeds += 1
            progress.advance(task)
            return seed if final.end is SeedEnd.SERVER_DIED else None

        return [seed for seed in map_seeds(one, seeds, self.matrix.concurrency, self.cancelled) if seed is not None]

