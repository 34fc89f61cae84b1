"""The Ray executor on a real local cluster (tests/raycluster.py: a head and worker nodes on loopback, separate
processes, a custom resource `server-slot` standing in for a GPU) running real llama-server processes:

- two server groups on two nodes give the records a single-host run gives (count and structure);
- a worker node killed mid-group: its cells are marked worker_lost, the other group finishes, `--resume`
  reruns only the seeds that did not finish (on any node), nothing duplicated or lost, no server left;
- the driver SIGKILLed mid-run: `--resume` finishes the run, every record written before the kill kept;
- Ctrl-C on the driver: every group stopped, no server process of the run left on any node.
Plus what needs no cluster: resources asked, the events a driver applies, Ray never imported by a local run."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import REPO, require
from tests.raycluster import ENV, LocalRayCluster

ORCHESTRATE = str(Path(sys.executable).with_name("orchestrate"))
MATRIX = """
name: raysmoke
description: two llama.cpp stack configs (two server groups), each needing the one server-slot of a worker node.
stacks:
  - {stack: llamacpp, tool_config: jinja, launcher: process, ctx: 2048, resources: {server-slot: 1}}
  - {stack: llamacpp, tool_config: no-jinja, launcher: process, ctx: 2048, resources: {server-slot: 1}}
models:
  - name: qwen2.5-coder-0.5b-instruct
    quantization: Q4_K_M
    sources: {llamacpp: {asset: qwen2.5-coder-0.5b-instruct}}
modes: [native, text-tools]
tasks:
  - {suite: ops, count: 2}
decoding: {temperature: 0.0, max_tokens: 48, seed: 1}
turn_cap: 2
bootstrap: {resamples: 200}
"""
KEY = ("cell_id", "seed", "seed_attempt", "turn", "attempt")
SLOT = {"server-slot": 1}


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def require_ray() -> None:
    """Ray missing: a failure in CI, a skip elsewhere (conftest.require, the suite's one rule for it)."""
    require(ray_available(), "Ray not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, llama_server_binary: str) -> Iterator[LocalRayCluster]:
    require_ray()
    made = LocalRayCluster(tmp_path_factory.mktemp("ray-logs"))
    try:
        made.start_head()
        made.add_worker("worker-a", SLOT)
        made.add_worker("worker-b", SLOT)
        yield made
    finally:
        made.stop()


def matrix_file(tmp_path: Path) -> Path:
    path = tmp_path / "raysmoke.yaml"
    path.write_text(MATRIX)
    return path


def orchestrate(*args: str, cwd: Path = REPO) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ORCHESTRATE, "matrix", *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen[str], timeout_s: float = 900) -> str:
    out, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, out[-3000:]
    return out


def run_dir(results: Path) -> Path:
    (found,) = [p for p in results.iterdir() if (p / "manifest.json").is_file()]
    return found


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]


def counted(run: Path) -> list[dict[str, Any]]:
    return [r for r in records(run) if not r.get("superseded")]


def cells(run: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((run / "cells").glob("*.json"))}


def structure(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Per (cell, seed, turn): its record's field names (the count of each such shape)."""
    return Counter((r["cell_id"], r["seed"], r["turn"], tuple(sorted(r))) for r in rows)


def server_pids(run_id: str) -> set[int]:
    """The run's servers alive now, by their PID records."""
    from orchestrator.serving.handle import pid_dir

    records_ = [json.loads(path.read_text()) for path in pid_dir().glob("*.json")]
    return {r["pid"] for r in records_ if r.get("run_id") == run_id and Path(f"/proc/{r['pid']}").exists()}


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists() and b"zombie" not in _status(pid)}


def _status(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/status").read_bytes().lower()
    except OSError:
        return b"zombie"


def servers_left(run_id: str) -> list[str]:
    """The run's PID records whose process is still alive, anywhere on this machine (every node of the test
    cluster is here). The fault tests also check the PIDs they saw serving are dead (`alive`): a record removed
    without its process killed would pass this check alone."""
    from orchestrator.serving.handle import pid_dir

    left = []
    for record_path in pid_dir().glob("*.json"):
        record = json.loads(record_path.read_text())
        if record.get("run_id") == run_id and Path(f"/proc/{record['pid']}").exists():
            left.append(f"{record['pid']}: {' '.join(record['argv'][:2])}")
    return left


def without_ports(data: Any) -> Any:
    """The data with every loopback port replaced (a canary's error quotes the URL it posted to)."""
    return json.loads(re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", json.dumps(data)))


def wait_for(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def running_group(results: Path) -> tuple[Path, dict[str, Any]] | None:
    """The run and a cell that is running with at least one record written (mid-group)."""
    runs = [p for p in results.iterdir() if (p / "turns.jsonl").is_file()] if results.is_dir() else []
    for run in runs:
        written = {r["cell_id"] for r in records(run)}
        for cell_id, cell in cells(run).items():
            if cell.get("status") == "running" and cell_id in written:
                return run, cell
    return None


@pytest.fixture(scope="module")
def single_host(tmp_path_factory: pytest.TempPathFactory, llama_server_binary: str) -> Path:
    """The same matrix run on one host (the local executor): what a Ray run must equal."""
    tmp = tmp_path_factory.mktemp("single")
    finish(orchestrate(str(matrix_file(tmp)), "--results", str(tmp / "results")))
    return run_dir(tmp / "results")


@pytest.mark.integration
@pytest.mark.ray
def test_two_nodes_run_the_smoke_groups_with_the_records_of_one_host(
    tmp_path: Path, cluster: LocalRayCluster, single_host: Path
) -> None:
    results = tmp_path / "results"
    out = finish(orchestrate(str(matrix_file(tmp_path)), "--executor", "ray", "--address", cluster.address,
                             "--results", str(results)))  # fmt: skip
    run = run_dir(results)
    assert structure(records(run)) == structure(records(single_host))
    assert len(records(run)) == len(records(single_host)) and not [r for r in records(run) if r.get("superseded")]
    ran = cells(run)
    assert set(ran) == set(cells(single_host)) and {c["status"] for c in ran.values()} == {"complete"}
    # Each group on its own node (one server-slot each), named in its cells' config and in each launch.
    nodes = {c["stack_label"]: c["node"]["ray_node_name"] for c in ran.values()}
    assert sorted(set(nodes.values())) == ["worker-a", "worker-b"], nodes
    for cell in ran.values():
        assert [launch["node"]["ray_node_name"] for launch in cell["launches"]] == [cell["node"]["ray_node_name"]]
        assert cell["node"]["hostname"] and cell["node"]["cpus"]
        log = Path(cell["launches"][0]["server"]["log_path"])
        assert log.parent == run / "logs" and log.is_file() and log.stat().st_size > 0  # shipped back
    # The full config equals the single-host run's, apart from where and when it ran; argv, base URL and probe
    # name the port the server happened to get: config_sha256 (compared) digests them without it.
    local = cells(single_host)
    varying = {"node", "launches", "started", "finished", "timings", "argv", "base_url", "probe"}
    for cell_id, cell in ran.items():
        same = {k for k in cell if k not in varying}
        assert "config_sha256" in same and "node" not in local[cell_id]
        assert without_ports({k: cell[k] for k in same}) == without_ports({k: local[cell_id].get(k) for k in same})
    servers = [json.loads(line) for line in (run / "servers.jsonl").read_text().splitlines()]
    assert sorted(s["stack_config"] for s in servers) == ["llamacpp-jinja", "llamacpp-no-jinja"]
    for group in ("llamacpp-jinja__qwen2.5-coder-0.5b-instruct", "llamacpp-no-jinja__qwen2.5-coder-0.5b-instruct"):
        assert f"{group}: {group} starting" in out  # every group's progress shown on the driver
    assert servers_left(run.name) == []



def finished_once(run: Path) -> Counter[tuple[str, str]]:
    """Per (cell, seed): how many counted seed runs ended (each must be exactly one)."""
    return Counter((r["cell_id"], r["seed"]) for r in counted(run) if r.get("end"))


def check_complete_like(run: Path, single_host: Path) -> None:
    """Finished as a single-host run: every cell complete, each seed ended exactly once among counted records,
    no counted record twice, the counted records shaped as the single-host run's."""
    assert {c["status"] for c in cells(run).values()} == {"complete"}
    assert set(finished_once(run).values()) == {1} and finished_once(run).keys() == finished_once(single_host).keys()
    keys = [tuple(r[k] for k in KEY) for r in records(run)]
    assert len(keys) == len(set(keys)), "a record written twice"
    assert structure(counted(run)) == structure(counted(single_host))


@pytest.mark.integration
@pytest.mark.ray
def test_a_worker_node_killed_mid_group_is_survived_and_resume_reruns_only_the_missing_seeds(
    tmp_path: Path, cluster: LocalRayCluster, single_host: Path, fault_counts: Any
) -> None:
    results = tmp_path / "results"
    driver = orchestrate(str(matrix_file(tmp_path)), "--executor", "ray", "--address", cluster.address,
                         "--results", str(results))  # fmt: skip
    run, cell = wait_for(lambda: running_group(results), 600, "a group mid-run")
    victim = cell["node"]["ray_node_name"]
    lost_config = cell["stack_label"]
    serving = server_pids(run.name)
    assert serving  # the groups' llama-servers, recorded
    cluster.kill_node(victim)
    out = finish(driver)
    before = records(run)
    lost = {cid: c for cid, c in cells(run).items() if c["stack_label"] == lost_config}
    assert {c["status"] for c in lost.values()} <= {"worker_lost", "complete"} and any(
        c["status"] == "worker_lost" and "lost" in c["error"] for c in lost.values()
    ), {cid: c["status"] for cid, c in lost.items()}
    assert "worker_lost" in out
    survivor = {c["status"] for c in cells(run).values() if c["stack_label"] != lost_config}
    assert survivor == {"complete"}
    ended_before = {(r["cell_id"], r["seed"]) for r in before if r.get("end") and r["end"] != "server_died"}
    # A new node joins (the lost one's slot); the resume may run on either.
    cluster.add_worker(victim, SLOT)
    finish(orchestrate("--resume", str(run), "--executor", "ray", "--address", cluster.address))
    after = records(run)
    assert after[: len(before)] == [{**r, "superseded": r.get("superseded") or (r["cell_id"], r["seed"]) not in
                                     ended_before} for r in before]  # fmt: skip
    rerun = {(r["cell_id"], r["seed"]) for r in after[len(before):]}
    assert rerun and not rerun & ended_before  # only the seeds that had not finished
    check_complete_like(run, single_host)
    assert servers_left(run.name) == [] and alive(serving) == set()  # the dead node's server too
    fault_counts(f"killed node {victim} after {len(before)} records; resume reran {len(rerun)} seed(s), "
                 f"{len(after) - len(before)} records")  # fmt: skip


@pytest.mark.integration
@pytest.mark.ray
def test_a_driver_killed_outright_is_finished_by_resume_with_nothing_duplicated_or_lost(
    tmp_path: Path, cluster: LocalRayCluster, single_host: Path, fault_counts: Any
) -> None:
    results = tmp_path / "results"
    driver = orchestrate(str(matrix_file(tmp_path)), "--executor", "ray", "--address", cluster.address,
                         "--results", str(results))  # fmt: skip
    run, _cell = wait_for(lambda: running_group(results), 600, "a group mid-run")
    serving = server_pids(run.name)
    driver.kill()  # SIGKILL: no handler runs
    driver.communicate(timeout=60)
    before = records(run)
    finish(orchestrate("--resume", str(run), "--executor", "ray", "--address", cluster.address))
    after = records(run)
    assert [{k: v for k, v in r.items() if k != "superseded"} for r in after[: len(before)]] == [
        {k: v for k, v in r.items() if k != "superseded"} for r in before
    ]  # every record written before the kill kept, as written
    check_complete_like(run, single_host)
    assert serving and servers_left(run.name) == [] and alive(serving) == set()  # orphans removed by the resume
    fault_counts(f"driver SIGKILLed after {len(before)} records; resumed to {len(after)} records")


@pytest.mark.integration
@pytest.mark.ray
def test_ctrl_c_on_the_driver_stops_every_group_and_leaves_no_server(
    tmp_path: Path, cluster: LocalRayCluster, fault_counts: Any
) -> None:
    results = tmp_path / "results"
    driver = orchestrate(str(matrix_file(tmp_path)), "--executor", "ray", "--address", cluster.address,
                         "--results", str(results))  # fmt: skip
    run, _cell = wait_for(lambda: running_group(results), 600, "a group mid-run")
    serving = wait_for(lambda: server_pids(run.name), 60, "the run's servers recorded")
    driver.send_signal(signal.SIGINT)
    began = time.monotonic()
    out, _ = driver.communicate(timeout=300)
    stopped_s = time.monotonic() - began
    assert driver.returncode != 0, out[-2000:]
    assert servers_left(run.name) == [] and alive(serving) == set()
    statuses = {c["status"] for c in cells(run).values()}
    assert statuses != {"complete"} and "worker_lost" not in statuses  # stopped before the end; nothing lost
    fault_counts(f"Ctrl-C: driver stopped in {stopped_s:.1f}s, cells {sorted(statuses)}, no server left")


@pytest.mark.slow
def test_only_the_executor_imports_ray() -> None:
    """Ray is an optional extra: no module but runner/executors/rayexecutor.py imports it (checked in the source), and
    a local run's code path leaves it unimported (checked in a fresh interpreter)."""
    import ast

    importers = []
    for path in (REPO / "orchestrator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.append(path.relative_to(REPO).as_posix())
    assert sorted(set(importers)) == ["orchestrator/runner/executors/rayexecutor.py"]
    code = (
        "import sys\n"
        "import orchestrator.cli\n"
        "from orchestrator.cli.execution import check_executor\n"
        "from orchestrator.runner.sweep import sweep\n"
        "from orchestrator.runner.executors import groupsweep\n"
        "from orchestrator.runner.run import runs\n"
        "from orchestrator.runner.executors.dispatch import ExecutorChoice, connect, record_executor\n"
        "class Store:\n    data = {}\n    def manifest(self): return self.data\n"
        "    def update_manifest(self, **kw): self.data.update(kw)\n"
        "chosen = check_executor(None, None, type('M', (), {'executor': 'local'})(), None)\n"
        "assert chosen == ExecutorChoice('local', None)\n"
        "connect(chosen)\n"
        "store = Store()\n"
        "record_executor(store, chosen, resumed=False)\n"
        "assert store.data == {'executor': {'kind': 'local', 'address': None}}\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------------ what needs no cluster


def plan_of(text: str, tmp_path: Path) -> Any:
    from orchestrator.runner.config.matrix import expand
    from orchestrator.runner.config.matrixfile import load_matrix

    path = tmp_path / "m.yaml"
    path.write_text(text)
    matrix, _ = load_matrix(path)
    return matrix, expand(matrix)


@pytest.mark.ray
def test_a_group_asks_for_its_stacks_gpus_and_the_custom_resources_of_stack_and_models(tmp_path: Path) -> None:
    require_ray()
    from orchestrator.runner.executors.rayexecutor import fits_somewhere, group_resources

    text = MATRIX.replace("resources: {server-slot: 1}}", "resources: {server-slot: 1, host:gpu-a100: 1}}", 1)
    text = text.replace("quantization: Q4_K_M", "quantization: Q4_K_M\n    resources: {server-slot: 2, big: 0.5}")
    _matrix, plans = plan_of(text, tmp_path)
    first, second = (group_resources(plan) for plan in plans)
    assert first == {"num_cpus": 1, "num_gpus": 0, "resources": {"server-slot": 2, "host:gpu-a100": 1, "big": 0.5}}
    assert second == {"num_cpus": 1, "num_gpus": 0, "resources": {"server-slot": 2, "big": 0.5}}
    gpu = text.replace("launcher: process, ctx: 2048, resources", "launcher: docker, host: gpu, gpus: 2, ctx: 2048, "
                       "resources", 1)  # fmt: skip
    _matrix, plans = plan_of(gpu, tmp_path)
    assert group_resources(plans[0])["num_gpus"] == 2
    node = {"Alive": True, "Resources": {"CPU": 1.0, "server-slot": 2.0, "big": 1.0}}
    assert fits_somewhere(second, [node]) and not fits_somewhere(first, [node])  # no node has host:gpu-a100
    assert not fits_somewhere(second, [{**node, "Alive": False}])
    assert not fits_somewhere(group_resources(plans[0]), [node])  # 2 GPUs: none here


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("{GPU: 1}", "Ray's own"),
        ("{slot: 0}", "must be a number in (0, 10000]"),
        ("{slot: -1}", "must be a number"),
        ("{'bad name': 1}", "letters, digits"),
        ("{slot: true}", "must be a number"),
        ("{slot: 1.5}", "above 1 whole numbers"),
        ("{slot: 0.00001}", "steps of 0.0001"),
    ],
)
def test_bad_resources_are_refused_naming_what(tmp_path: Path, resources: str, message: str) -> None:
    from orchestrator.runner.config.matrixfile import MatrixError, load_matrix

    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.replace("resources: {server-slot: 1}", f"resources: {resources}", 1))
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    assert message in str(caught.value) and "stacks" in str(caught.value)


def test_the_driver_applies_a_groups_events_and_refuses_files_outside_the_run(tmp_path: Path) -> None:
    """Events as a worker makes them (a ShardStore and ShardStreams writing a shard) applied by the driver's
    Applier to the run: the same records, cell files with paths moved to the run, stream lines at the same
    references; a file event naming a path outside the run is refused."""
    import io
    import queue

    from rich.console import Console

    from orchestrator.core.types import Outcome, TokenCounts, ToolsMode, TurnRecord
    from orchestrator.runner.executors.groupsweep import Applier, ShardStore, ShardStreams, drain, mark_lost, seed_shard
    from orchestrator.runner.store.runstore import RunStore
    from orchestrator.runner.store.streamstore import StreamStore
    from orchestrator.runner.sweep.progress import SweepProgress

    matrix, plans = plan_of(MATRIX, tmp_path)
    plan = plans[0]
    run = RunStore(tmp_path / "run" / "r1")
    run.create({"run_id": "r1", "matrix": {}})
    events: queue.Queue[Any] = queue.Queue()
    shard_dir = tmp_path / "node" / "r1"
    other = plan.cells[1].cell_id  # a cell an earlier run (another host) served once: that launch stays its own
    earlier = {"cell_id": other, "status": "running", "launches": [{"reason": "initial", "node": None}]}
    seed_shard(shard_dir, {"run_id": "r1", "matrix": {}}, {"turns.jsonl": b"",
                                                            f"cells/{other}.json": json.dumps(earlier).encode()})
    node = {"hostname": "n1", "ray_node_name": "worker-a", "ray_node_id": "abc"}
    shard, streams = ShardStore(shard_dir, events.put, node), ShardStreams(shard_dir, events.put)
    cell = plan.cells[0].cell_id
    events.put(("shard", str(shard_dir)))
    shard.write_cell(cell, {"cell_id": cell, "status": "running", "launches": [{"server": {
        "log_path": str(shard_dir / "logs" / "x.log")}}]})  # fmt: skip
    shard.write_cell(other, {**earlier, "launches": [*earlier["launches"], {"reason": "restart"}]})
    ref = streams.append(cell, {"events": [1, 2]})
    record = TurnRecord(
        run_id="r1", cell_id=cell, seed="ops-00", turn=0, model="m", stack="llamacpp", stack_config="c",
        stack_version="b1", tools_mode=ToolsMode.NATIVE, hint=False, http_status=200, parser="p",
        parse_path="server", outcome=Outcome.VALID_CALL, latency_s=0.1, tokens=TokenCounts(prompt=1, completion=2),
        stream_ref=ref,
    )  # fmt: skip
    shard.append_turn(record)
    shard.mark_superseded({(cell, "ops-00")})
    applier = Applier(run, StreamStore(run.dir), SweepProgress(Console(file=io.StringIO())), plan.server_id)
    for event in drain(events, 1.0):
        applier.apply(event)
    (written,) = run.read_turns()
    assert written["stream_ref"] == ref and written["superseded"] is True and not applier.mismatches
    stored = run.read_cell(cell)
    assert stored is not None and stored["node"] == node
    assert stored["launches"][0]["node"]["ray_node_name"] == "worker-a"
    assert stored["launches"][0]["server"]["log_path"] == str(run.dir / "logs" / "x.log")
    resumed = run.read_cell(other)
    assert resumed is not None and resumed["launches"][0]["node"] is None  # not stamped with this node
    assert resumed["launches"][1]["node"]["ray_node_name"] == "worker-a"
    assert (run.dir / "streams").is_dir() and (shard_dir / "turns.jsonl").read_text().count("\n") == 1
    with pytest.raises(ValueError, match="outside the run"):
        applier.apply(("file", "../../escape.txt", b"x", "wb"))
    assert not (tmp_path / "escape.txt").exists()
    applier.apply(("done", 3, None))
    assert applier.finished and applier.executed == 3
    run.write_cell(other, {**resumed, "status": "server_died"})  # ended before the loss: kept as it is
    marked = mark_lost(run, matrix, plan, "node gone", matrix.suites())
    assert marked == [cell]
    assert run.read_cell(cell)["status"] == "worker_lost" and run.read_cell(other)["status"] == "server_died"  # type: ignore[index]
    run.write_cell(other, {**resumed, "status": "running"})
    (tmp_path / "run" / "r1" / "cells" / f"{cell}.json").unlink()  # never started: a full config is written
    assert mark_lost(run, matrix, plan, "node gone", matrix.suites()) == [cell, other]
    assert run.read_cell(cell)["config_sha256"]  # type: ignore[index]


@pytest.mark.integration
@pytest.mark.ray
def test_a_group_no_node_can_hold_is_marked_at_once_naming_what_it_asked_for(
    tmp_path: Path, cluster: LocalRayCluster
) -> None:
    """Ray would wait forever for a resource no node offers: the group's cells are marked worker_lost at the
    start, naming the request; the other group runs."""
    path = tmp_path / "pinned.yaml"
    path.write_text(MATRIX.replace("resources: {server-slot: 1}}", "resources: {server-slot: 1, host:gpu-a100: 1}}", 1)
                    .replace("modes: [native, text-tools]", "modes: [native]"))  # fmt: skip
    out = finish(orchestrate(str(path), "--executor", "ray", "--address", cluster.address,
                             "--results", str(tmp_path / "results")))  # fmt: skip
    run = run_dir(tmp_path / "results")
    ran = cells(run)
    pinned = {cid: c for cid, c in ran.items() if c["stack_label"] == "llamacpp-jinja"}
    assert {c["status"] for c in pinned.values()} == {"worker_lost"}
    assert all("host:gpu-a100" in c["error"] and "no node" in c["error"] for c in pinned.values())
    assert {c["status"] for cid, c in ran.items() if cid not in pinned} == {"complete"}
    assert not {r["cell_id"] for r in records(run)} & set(pinned) and "worker_lost" in out
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["executor"] == {"kind": "ray", "address": cluster.address}


def test_a_resume_runs_on_the_executor_the_run_last_recorded() -> None:
    """A plain `--resume` of a Ray run stays on Ray (and its address); a given executor wins; a run from before
    executors were recorded falls back to its matrix's."""
    from orchestrator.cli.execution import recorded_executor

    manifest = {"executor": {"kind": "ray", "address": "10.0.0.1:6379"}, "resumes": [{"at": "t"}]}
    assert recorded_executor(manifest) == {"kind": "ray", "address": "10.0.0.1:6379"}
    manifest["resumes"].append({"at": "t2", "executor": {"kind": "local", "address": None}})
    assert recorded_executor(manifest)["kind"] == "local"
    assert recorded_executor({"matrix": {}}) == {}
    import typer

    from orchestrator.cli.execution import check_executor
    from orchestrator.runner.executors.dispatch import ExecutorChoice

    local = ExecutorChoice("local", None)
    ray_matrix, local_matrix = SimpleNamespace(executor="ray"), SimpleNamespace(executor="local")
    ray_run = {"executor": {"kind": "ray", "address": "10.0.0.1:6379"}}
    assert check_executor("local", None, ray_matrix, ray_run) == local  # given: it wins
    assert check_executor(None, None, local_matrix, {"executor": {"kind": "local"}}) == local
    assert check_executor(None, None, local_matrix, {}) == local  # nothing recorded: the matrix's
    for bad in (("slurm", None), ("local", "10.0.0.1:6379")):
        with pytest.raises(typer.Exit):
            check_executor(*bad, local_matrix, None)


def test_the_readme_quotes_the_committed_executor_benchmark() -> None:
    """The README's 'No cost on one host' figures are benchmarks/results/executor.json's, not copied by hand."""
    result = json.loads((REPO / "benchmarks" / "results" / "executor.json").read_text())
    readme = (REPO / "README.md").read_text()
    (bullet,) = [part for part in readme.split("\n- ") if part.startswith("**No cost on one host**")]
    bullet = " ".join(bullet.split())
    median, imports = result["median_s"], result["import_median_s"]
    expected = (
        f"{len(result['runs']['now'])} alternating pairs on {result['cpus']} CPUs: median {median['before']:.3f} s "
        f"before, {median['now']:.3f} s now (ratio {result['ratio_of_medians']:.3f}); `import orchestrator.cli` "
        f"{imports['before']:.3f} s before, {imports['now']:.3f} s now (ratio {result['import_ratio_of_medians']:.3f})"
    )
    assert expected in bullet, bullet
    assert f"({result['base']}, a git worktree)" in bullet
    walls = {arm: [run["wall_s"] for run in runs] for arm, runs in result["runs"].items()}
    spans = f"before {min(walls['before']):.3f}–{max(walls['before']):.3f} s, now {min(walls['now']):.3f}–"
    assert spans in bullet and f"per-pair ratio {result['median_pair_ratio']:.3f}" in bullet
    assert result["ray_imported"] == {"before": [False], "now": [False]} and "never, in either arm" in bullet
