"""The Ray executor (`orchestrate matrix FILE --executor ray [--address ADDR]`): each server group (one stack
config and the models it serves) is a Ray actor that asks for what its server needs (GPUs from the stack entry
or its stack file on `host: gpu`, custom resources such as `{"host:gpu-a100": 1}` from the stack and model
entries) and runs the ordinary launcher + sweep code on the node Ray places it on. Ray does the scheduling;
this module only moves a group's events to the driver, which writes the run (runner/executors/groupsweep.py says why
records are streamed rather than merged from shards).

Faults: a node or worker lost mid-group marks the group's unfinished cells `worker_lost` (records kept;
`--resume` reruns the missing seeds, on any node); Ctrl-C cancels every group, waits `CANCEL_GRACE_S` for them to
tear their servers down, kills what is left, and removes the run's servers on every node by its labels and PID
records; a driver killed outright leaves that to `--resume`, which cleans every node first.

The only module that imports Ray (an optional extra: `pip install -e '.[ray]'`, pinned)."""

from __future__ import annotations

import contextlib
import queue
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.runner.config.matrix import Matrix, ServerPlan, expand
from orchestrator.runner.executors.groupsweep import (
    Applier,
    Event,
    GroupCancelled,
    GroupSweep,
    ShardStore,
    console_for_group,
    drain,
    group_files,
    mark_lost,
    seed_shard,
    shipped_files,
)
from orchestrator.runner.run.provenance import drift, fingerprint, git_state, host_facts
from orchestrator.runner.sweep.cellledger import Seed
from orchestrator.runner.sweep.progress import SweepProgress
from orchestrator.runner.sweep.sweep import Sweep

CANCEL_GRACE_S = 30.0  # Ctrl-C: how long groups get to stop their servers before their workers are killed
DRAIN_WAIT_S = 1.0  # a worker holds a drain call this long waiting for its next event
PLACEMENT_CHECK_S = 30.0  # how often groups waiting for a node are checked against the live nodes
NAMESPACE = "toolcall-matrix"


def group_resources(plan: ServerPlan) -> dict[str, Any]:
    """The Ray resources a group's actor asks for: one CPU (its own loop), the server's GPUs on a GPU host
    (the stack entry's `gpus`, else the stack file's count), and the custom resources its stack and models
    name (the larger amount where both name one)."""
    stack = plan.stack
    gpus = (stack.gpus or stack.spec.launch.gpu_count) if stack.host == "gpu" else 0  # type: ignore[union-attr]
    custom: dict[str, float] = dict(stack.resources)
    for model in plan.models:
        for name, amount in model.resources.items():
            custom[name] = max(amount, custom.get(name, 0.0))
    return {"num_cpus": 1, "num_gpus": gpus, "resources": custom}


def fits_somewhere(request: dict[str, Any], nodes: list[dict[str, Any]]) -> bool:
    """Whether any live node of the cluster has every resource the group asks for (Ray would wait forever)."""
    wanted = {"CPU": request["num_cpus"], "GPU": request["num_gpus"], **request["resources"]}
    wanted = {name: amount for name, amount in wanted.items() if amount}
    return any(
        all(node.get("Resources", {}).get(name, 0) >= amount for name, amount in wanted.items())
        for node in nodes
        if node.get("Alive")
    )


@ray.remote(max_concurrency=3)  # run, drain and cancel at once
class GroupWorker:
    """A server group on its node: the sweep on a local shard, its events drained by the driver."""

    def __init__(
        self, matrix: Matrix, manifest: dict[str, Any], guards: list[str], expected: dict[str, Any]
    ) -> None:
        self.matrix = matrix  # with the stacks and suites the driver resolved (pickled along), never re-read here
        self.manifest = manifest
        self.expected = expected  # the driver's files (a resume's drift policy already judged them)
        self.guards = frozenset(guards)
        self.events: queue.Queue[Event] = queue.Queue()
        self.sweep: GroupSweep | None = None
        self.cancelled = False
        node_id = ray.get_runtime_context().get_node_id()
        name = next((node.get("NodeName") for node in ray.nodes() if node.get("NodeID") == node_id), None)
        self.node = {
            **host_facts(),
            "ray_node_id": node_id,
            "ray_node_name": name,  # `ray start --node-name`, else the node's address
            "node_ip": ray.util.get_node_ip_address(),
        }

    def run(self, server_id: str, pending: dict[str, list[Seed]], files: dict[str, bytes]) -> None:
        """Run the group; whatever happens, its side files and then ("done", executed, error) are queued last."""
        shard = Path(tempfile.mkdtemp(prefix="toolcall-matrix-shard-")) / self.manifest["run_id"]
        executed, error = 0, None
        try:
            executed = self._run(shard, server_id, pending, files)
        except GroupCancelled as exc:
            error = f"cancelled: {exc}"
        except BaseException as exc:  # everything reaches the driver as the group's error
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        finally:
            try:
                for event in shipped_files(shard):
                    self.events.put(event)
            except OSError as exc:  # the records went already; the logs are lost, and the driver is told
                error = f"{error or ''}\nside files not sent: {exc}".strip()
            finally:
                self.events.put(("done", executed, error))
                shutil.rmtree(shard.parent, ignore_errors=True)

    def _run(self, shard: Path, server_id: str, pending: dict[str, list[Seed]], files: dict[str, bytes]) -> int:
        emit = self.events.put
        emit(("shard", str(shard)))
        differences = drift(self.expected, fingerprint(git_state()))
        if differences:  # another checkout on this node: its results would not be the run's
            raise RuntimeError(f"node {self.node['hostname']} has other files than the driver: {differences}")
        seed_shard(shard, self.manifest, files)
        (plan,) = [plan for plan in expand(self.matrix) if plan.server_id == server_id]
        store = ShardStore(shard, emit, self.node)
        gpus = [str(gpu) for gpu in ray.get_gpu_ids()]
        self.sweep = GroupSweep(self.matrix, store, console_for_group(), guards=self.guards, emit=emit, gpu_ids=gpus)
        try:
            if self.cancelled:
                raise GroupCancelled("cancelled before it started")
            return self.sweep.run_group(plan, pending)
        finally:
            store.close()

    def drain(self, timeout_s: float) -> list[Event]:
        return drain(self.events, timeout_s)

    def cancel(self) -> None:
        self.cancelled = True
        if self.sweep is not None:
            self.sweep.cancel()


@ray.remote(num_cpus=0)
def clean_node(run_id: str) -> tuple[str, list[str]]:
    """Remove the run's servers left on this node (by labels and PID records), and the shards of its groups
    whose workers were killed before they could remove them."""
    from orchestrator.serving.handle import check_run_id
    from orchestrator.serving.launchers import cleanup

    check_run_id(run_id)  # before the glob: an empty id or a glob character would match every run's shards
    shards = [path for path in Path(tempfile.gettempdir()).glob(f"toolcall-matrix-shard-*/{run_id}") if path.is_dir()]
    for shard in shards:
        shutil.rmtree(shard.parent, ignore_errors=True)
    return host_facts()["hostname"], [*cleanup(run_id), *(f"shard {shard}" for shard in shards)]


def cleanup_nodes(run_id: str, timeout_s: float = 120.0) -> list[str]:
    """The run's servers removed on every live node; returns what was removed, each named with its node."""
    nodes = [node["NodeID"] for node in ray.nodes() if node.get("Alive")]
    pinned = [NodeAffinitySchedulingStrategy(node, soft=False) for node in nodes]
    refs = [clean_node.options(scheduling_strategy=strategy).remote(run_id) for strategy in pinned]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    removed: list[str] = []
    for ref in ready:
        try:
            host, items = ray.get(ref)
        except RayError:
            continue  # the node went away meanwhile: nothing of ours runs on a node that is gone
        removed += [f"{host}: {item}" for item in items]
    return removed


@dataclass
class Group:
    plan: ServerPlan
    actor: Any
    applier: Applier
    request: dict[str, Any]
    run_ref: Any = None


def connect(address: str | None) -> None:
    """Join the cluster at `address` (else RAY_ADDRESS, else Ray's default: the cluster last started on this
    machine, or a new local one), unless connected already."""
    if not ray.is_initialized():
        extra = {} if address else {"include_dashboard": False}
        ray.init(address=address, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=False, **extra)


def kill(actor: Any) -> None:
    with contextlib.suppress(RayError, ValueError):  # already dead: nothing to do
        ray.kill(actor)


class RayExecutor:
    """The driver: starts one actor per server group left to run, applies their events, marks lost groups."""

    def __init__(self, sweep: Sweep, address: str | None = None) -> None:
        self.sweep = sweep
        self.address = address
        self.waiting: dict[Any, Group] = {}  # by the drain call awaited
        self.actors: list[Any] = []  # every actor started: all killed at the end, whatever happened
        self.removed: list[str] = []

    def run(self) -> int:
        connect(self.address)
        store, matrix = self.sweep.store, self.sweep.matrix
        self.removed += cleanup_nodes(store.run_id)  # a killed earlier driver's servers, on any node
        done = store.completed_seeds()
        work = [(plan, pending) for plan in expand(matrix) if (pending := self.sweep.ledger.pending_of(plan, done))]
        expected = fingerprint(git_state())
        with SweepProgress(self.sweep.console) as progress:
            self.sweep.progress = progress
            try:
                for plan, pending in work:
                    self.start_group(plan, pending, progress, expected)
                return self.follow()
            except BaseException:
                self.stop_all()
                raise
            finally:
                for actor in self.actors:
                    kill(actor)
                with contextlib.suppress(RayError):  # never hides what ended the run
                    self.removed += cleanup_nodes(store.run_id)
                for item in self.removed:  # what a lost worker or a killed driver had left
                    progress.line(f"removed {item}")
                self.sweep.streams.close()

    def start_group(
        self, plan: ServerPlan, pending: dict[str, list[Seed]], progress: SweepProgress, expected: dict[str, Any]
    ) -> None:
        request = group_resources(plan)
        store = self.sweep.store
        if not fits_somewhere(request, ray.nodes()):
            reason = f"no node of the Ray cluster has what {plan.server_id} needs: {request}"
            progress.line(f"worker_lost {plan.server_id}: {reason}")
            mark_lost(store, self.sweep.matrix, plan, reason, self.sweep.suites)
            return
        actor = GroupWorker.options(  # type: ignore[attr-defined]
            num_cpus=request["num_cpus"], num_gpus=request["num_gpus"], resources=request["resources"]
        ).remote(self.sweep.matrix, store.manifest(), sorted(self.sweep.guards), expected)
        self.actors.append(actor)
        group = Group(plan, actor, Applier(store, self.sweep.streams, progress, plan.server_id), request)
        group.run_ref = actor.run.remote(plan.server_id, pending, group_files(store, plan))
        self.waiting[actor.drain.remote(DRAIN_WAIT_S)] = group

    def follow(self, until_s: float | None = None) -> int:
        """Apply events as they come until every group is done (or `until_s` seconds passed); every
        `PLACEMENT_CHECK_S`, groups not started that no live node can hold any more are marked lost."""
        executed, checked = 0, time.monotonic()
        deadline = None if until_s is None else time.monotonic() + until_s
        while self.waiting and (deadline is None or time.monotonic() < deadline):
            ready, _ = ray.wait(list(self.waiting), num_returns=1, timeout=DRAIN_WAIT_S)
            for ref in ready:
                executed += self.take(ref, self.waiting[ref])
            if time.monotonic() - checked >= PLACEMENT_CHECK_S:
                self.drop_unplaceable()
                checked = time.monotonic()
        return executed

    def take(self, ref: Any, group: Group) -> int:
        """One drained batch of a group applied; the group followed on, or finished, or marked lost."""
        try:
            events = ray.get(ref)
        except RayError as exc:
            self.waiting.pop(ref)
            self.lose(group, f"the worker running {group.plan.server_id} was lost: {type(exc).__name__}: {exc}")
            return 0
        return self.take_events(ref, group, events)

    def take_events(self, ref: Any, group: Group, events: list[Event]) -> int:
        try:
            for event in events:
                group.applier.apply(event)
        except (ValueError, TypeError, KeyError, IndexError) as exc:  # a malformed event: the group, not the run
            self.waiting.pop(ref)
            self.lose(group, f"{group.plan.server_id} sent what the driver cannot apply: {exc}")
            return 0
        self.waiting.pop(ref)
        if group.applier.finished:
            self.finish(group)
            return group.applier.executed
        if not events and ray.wait([group.run_ref], timeout=0)[0]:  # ended: its last events are queued by now
            try:
                events = ray.get(group.actor.drain.remote(0.0))
            except RayError:
                events = []
            if not events:  # ended, yet its last event never came
                self.lose(group, f"{group.plan.server_id} ended without its last event: {self.run_error(group)}")
                return 0
            self.waiting[ref] = group
            return self.take_events(ref, group, events)
        self.waiting[group.actor.drain.remote(DRAIN_WAIT_S)] = group
        return 0

    @staticmethod
    def run_error(group: Group) -> str:
        try:
            ray.get(group.run_ref)
        except RayError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "no error reported"

    def drop_unplaceable(self) -> None:
        """A group that never started (no event yet) and that no live node can hold now (its node died while
        it waited): lost, rather than waited for forever."""
        nodes = ray.nodes()
        for ref, group in list(self.waiting.items()):
            if group.applier.shard_dir is None and not fits_somewhere(group.request, nodes):
                self.waiting.pop(ref)
                self.lose(group, f"no live node of the Ray cluster can hold {group.plan.server_id} any more")

    def lose(self, group: Group, reason: str) -> None:
        reason = reason[:2000]
        group.applier.progress.line(f"worker_lost {reason.splitlines()[0]}")
        mark_lost(self.sweep.store, self.sweep.matrix, group.plan, reason, self.sweep.suites)
        kill(group.actor)

    def finish(self, group: Group) -> None:
        applier = group.applier
        for mismatch in applier.mismatches:
            applier.progress.line(f"warning: {mismatch}")
        if applier.error and not applier.error.startswith("cancelled"):
            self.lose(group, f"{group.plan.server_id} failed on its node: {applier.error.strip()}")
            return
        kill(group.actor)  # its resources go back to the cluster

    def stop_all(self) -> None:
        """Ctrl-C (or any error): cancel every group, apply what they still send for CANCEL_GRACE_S (the run's
        `finally` kills every actor after it)."""
        for group in self.waiting.values():
            group.actor.cancel.remote()
        self.follow(until_s=CANCEL_GRACE_S)
        self.waiting.clear()
