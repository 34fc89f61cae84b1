"""Run a matrix: for each server (stack config, model), start it from its pinned definition, wait for
health, probe, sweep the modes over the seeds, tear down. A stack that fails to start marks its cells
`launch_failed` with the log tail and the sweep goes on. Resumable: finished seeds are never rerun."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from orchestrator.core.types import CellStatus, TurnRecord
from orchestrator.runner.agent import SeedContext, run_seed
from orchestrator.runner.matrix import Cell, Matrix, ModelEntry, ServerPlan, expand
from orchestrator.runner.modes import injects_hint, template_sha256
from orchestrator.runner.store import RunStore, git_state, host_facts, now, package_versions
from orchestrator.runner.tasks import load_suite
from orchestrator.serving.assets import AssetError, resolve_model
from orchestrator.serving.build import server_config
from orchestrator.serving.launchers import LaunchError, ServerHandle, auth_headers, cleanup, running_server
from orchestrator.serving.probe import ProbeResult, probe
from orchestrator.serving.readiness import probe_body
from orchestrator.serving.registry import load_stack
from orchestrator.serving.serverconfig import ModelRef, ServerConfig


def new_run_id(matrix: Matrix) -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{matrix.name}-{uuid.uuid4().hex[:6]}"


def model_ref_for(stack: str, entry: ModelEntry) -> ModelRef:
    source = entry.sources[stack]
    if source.asset:
        resolved = resolve_model(stack, source.asset, progress=lambda _m: None)
        return resolved.model_copy(update={"name": entry.name})
    if source.path:
        return ModelRef(name=entry.name, path=source.path, digest=entry.digest, quantization=entry.quantization)
    if source.hub:
        return ModelRef(
            name=entry.name, path=source.hub, local=False, digest=entry.digest, quantization=entry.quantization
        )
    return ModelRef(name=source.tag or entry.name, quantization=entry.quantization, digest=entry.digest)


def chat_template_sha256(probe_result: ProbeResult | None, model: ModelRef) -> str | None:
    """Hash of the chat template the server uses: from the server when it says, else the model files."""
    if probe_result is not None:
        for key, value in probe_result.capabilities.items():
            if key.endswith("#chat_template") and isinstance(value, str):
                return hashlib.sha256(value.encode()).hexdigest()
    if model.path and (Path(model.path) / "tokenizer_config.json").is_file():
        template = json.loads((Path(model.path) / "tokenizer_config.json").read_text()).get("chat_template")
        if isinstance(template, str):
            return hashlib.sha256(template.encode()).hexdigest()
    return None


def _without_template(capabilities: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in capabilities.items() if not k.endswith("#chat_template")}


class Sweep:
    def __init__(self, matrix: Matrix, store: RunStore, console: Console) -> None:
        self.matrix = matrix
        self.store = store
        self.console = console
        self.lock = threading.Lock()
        self.executed_seeds = 0

    def record(self, turn: TurnRecord) -> None:
        with self.lock:
            self.store.append_turn(turn)

    def run(self) -> int:
        plans = expand(self.matrix)
        done = self.store.completed_seeds()
        with Progress(
            SpinnerColumn(),  # keeps moving while a slow model generates: the heartbeat
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        ) as progress:
            servers = progress.add_task("servers", total=len(plans))
            for plan in plans:
                pending = {
                    cell.cell_id: [s for s in cell.seeds if (cell.cell_id, s[1]) not in done] for cell in plan.cells
                }
                finished = all(not seeds for seeds in pending.values()) and all(
                    (self.store.read_cell(c.cell_id) or {}).get("status")
                    in (CellStatus.COMPLETE, CellStatus.LAUNCH_FAILED)
                    for c in plan.cells
                )
                if not finished:
                    self.run_server(plan, pending, progress)
                progress.advance(servers)
        return self.executed_seeds

    def run_server(self, plan: ServerPlan, pending: dict[str, list[tuple[str, str]]], progress: Progress) -> None:
        stack = plan.stack
        try:
            model = model_ref_for(stack.stack, plan.models[0])
            config = server_config(
                stack=stack.stack,
                tool_config=stack.resolved_tool_config,
                launcher=stack.launcher,
                model=model.name,
                model_ref=model,
                host=stack.host,
                base_url=stack.url,
                binary=stack.binary,
                image=stack.image,
                network=stack.network,
                ctx=stack.ctx,
                extra_args=stack.extra_args,
                ready_timeout_s=self.matrix.timeouts.ready_s,
                progress=lambda _m: None,
            )
            label = f"[bold]{plan.server_id}[/] starting"
            task = progress.add_task(label, total=sum(len(s) for s in pending.values()))
            with running_server(config, self.store.run_id, log_dir=self.store.dir / "logs") as handle:
                progress.update(task, description=f"[bold]{plan.server_id}[/] ready in {handle.ready_s or 0:.0f}s")
                for entry in plan.models:
                    cells = [c for c in plan.cells if c.model.name == entry.name]
                    model_config = (
                        config
                        if entry is plan.models[0]
                        else config.model_copy(update={"model": model_ref_for(stack.stack, entry)})
                    )
                    self.prepare_model(handle, model_config)
                    probe_result = probe(handle, model_config)
                    for cell in cells:
                        self.run_cell(cell, handle, model_config, probe_result, pending[cell.cell_id], progress, task)
        except (LaunchError, AssetError) as exc:
            self.console.print(f"[red]launch failed[/] {plan.server_id}: {str(exc).splitlines()[0]}")
            for cell in plan.cells:
                self.store.write_cell(
                    cell.cell_id,
                    {
                        **self.cell_config(cell, None, None, None),
                        "status": CellStatus.LAUNCH_FAILED.value,
                        "error": str(exc),
                        "log_tail": getattr(exc, "log_tail", None),
                        "reproduce": getattr(exc, "command", None),
                    },
                )

    def prepare_model(self, handle: ServerHandle, config: ServerConfig) -> None:
        spec = load_stack(config.stack)
        if spec.pull is not None:
            httpx.post(
                handle.base_url + spec.pull.path,
                json=probe_body(spec.pull, config.model.name),
                headers=auth_headers(spec),
                timeout=self.matrix.timeouts.ready_s,
            )

    def cell_config(
        self, cell: Cell, handle: ServerHandle | None, config: ServerConfig | None, probe_result: ProbeResult | None
    ) -> dict[str, Any]:
        """The full stack config of a cell: what ran, what the server said, what was sent."""
        spec = load_stack(cell.stack.stack)
        tool_config = spec.tool_config(cell.stack.resolved_tool_config)
        suites = sorted({suite for suite, _ in cell.seeds})
        tools = {suite: load_suite(suite).tools for suite in suites}
        described = handle.describe() if handle else {}
        model = config.model if config else None
        return {
            "cell_id": cell.cell_id,
            "order": cell.order,
            "stack_label": cell.stack.label,
            "stack": cell.stack.stack,
            "tool_config": cell.stack.resolved_tool_config,
            "tool_flags": tool_config.flags,
            "parser": tool_config.parser,
            "launcher": cell.stack.launcher,
            "host": cell.stack.host,
            "image": described.get("image")
            or (spec.images.get(cell.stack.host).tagged if cell.stack.launcher == "docker" else None),
            "image_id": described.get("image_id"),
            "image_repo_digests": described.get("repo_digests"),
            "binary": described.get("binary") or described.get("python"),
            "binary_version": described.get("binary_version"),
            "argv": described.get("argv"),
            "env": described.get("env"),
            "base_url": described.get("base_url"),
            "stack_version": probe_result.stack_version if probe_result else None,
            "capabilities": _without_template(probe_result.capabilities) if probe_result else None,
            "chat_template_sha256": chat_template_sha256(probe_result, model) if model else None,
            "model": cell.model.name,
            "model_path": model.path if model else None,
            "model_digest": model.digest if model else cell.model.digest,
            "quantization": (model.quantization if model else None) or cell.model.quantization,
            "tools_mode": cell.mode.value,
            "hint": injects_hint(cell.mode),
            "template_sha256": template_sha256(cell.mode),
            "suites": suites,
            "tool_count": {suite: len(t) for suite, t in tools.items()},
            "tools_sha256": {suite: load_suite(suite).tools_sha256 for suite in suites},
            "tools": tools,
            "decoding": self.matrix.decoding.model_dump(),
            "turn_cap": self.matrix.turn_cap,
            "seeds": [seed for _, seed in cell.seeds],
            "probe": probe_result.model_dump(mode="json", exclude={"server", "capabilities"}) if probe_result else None,
        }

    def run_cell(
        self,
        cell: Cell,
        handle: ServerHandle,
        config: ServerConfig,
        probe_result: ProbeResult,
        seeds: list[tuple[str, str]],
        progress: Progress,
        task: Any,
    ) -> None:
        base = self.cell_config(cell, handle, config, probe_result)
        self.store.write_cell(cell.cell_id, {**base, "status": CellStatus.RUNNING.value, "started": now()})
        spec = load_stack(cell.stack.stack)

        def one(seed: tuple[str, str]) -> None:
            suite, seed_id = seed
            ctx = SeedContext(
                run_id=self.store.run_id,
                cell_id=cell.cell_id,
                stack_label=cell.stack.label,
                spec=spec,
                parser=base["parser"],
                stack_version=base["stack_version"],
                base_url=handle.base_url,
                model=config.model.name,
                mode=cell.mode,
                suite=load_suite(suite),
                seed_id=seed_id,
                decoding=self.matrix.decoding,
                turn_cap=self.matrix.turn_cap,
                loop_repeats=self.matrix.loop_repeats,
                request_timeout_s=self.matrix.timeouts.request_s,
                max_attempts=self.matrix.retries.max_attempts,
                backoff_s=self.matrix.retries.backoff_s,
                headers=auth_headers(spec),
            )
            run_seed(ctx, self.record, heartbeat=lambda m: progress.update(task, description=f"  {m}"))
            with self.lock:
                self.executed_seeds += 1
            progress.advance(task)

        if self.matrix.concurrency > 1:
            with ThreadPoolExecutor(self.matrix.concurrency) as pool:
                list(pool.map(one, seeds))
        else:
            for seed in seeds:
                one(seed)
        self.store.write_cell(cell.cell_id, {**base, "status": CellStatus.COMPLETE.value, "finished": now()})


def start_run(matrix: Matrix, matrix_path: Path, matrix_sha256: str, results_dir: Path) -> RunStore:
    store = RunStore(results_dir / new_run_id(matrix))
    store.create(
        {
            "run_id": store.run_id,
            "matrix_file": str(matrix_path),
            "matrix_sha256": matrix_sha256,
            "matrix": matrix.model_dump(mode="json"),
            "git": git_state(),
            "packages": package_versions(),
            "host": host_facts(),
            "started": now(),
            "finished": None,
        }
    )
    return store


def resume_run(run_dir: Path) -> RunStore:
    """Reopen a run: remove servers a killed process left behind, drop partial seeds."""
    store = RunStore(run_dir)
    store.manifest()
    cleanup(store.run_id)
    store.drop_incomplete()
    return store
