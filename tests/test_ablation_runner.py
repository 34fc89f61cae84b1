"""`orchestrate ablate`'s runner side (runner/product/ablationrun.py), on a parent run built by hand in tmp_path: which
parent case runs are reused (copied, not rerun) per guard, under which cell ids; what a run must have to be
ablated; resuming an ablation; and the stack-config check between parent and ablation cells."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.core.types import TurnRecord
from orchestrator.runner.config.cellconfig import config_sha256
from orchestrator.runner.config.matrix import Cell, Matrix, expand
from orchestrator.runner.product.ablationrun import (
    REUSED_FLAG,
    AblationError,
    ablation_dir,
    ablation_matrix,
    config_matches,
    open_ablation,
    reuse_unchanged,
)
from orchestrator.runner.run.provenance import fingerprint, git_state
from orchestrator.runner.run.runs import scored_cases
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.turn.guards import GUARDS
from orchestrator.serving.registry import REPO_ROOT

pytestmark = pytest.mark.slow  # the parent run's provenance asks git for the checkout's state (git_state)

PRODUCT_CPU = REPO_ROOT / "matrices" / "product-cpu.yaml"
SERVED_TAG = "qwen2.5-coder:0.5b"


def matrix_data(**changes: Any) -> dict[str, Any]:
    return {**yaml.safe_load(PRODUCT_CPU.read_text()), **changes}


def ollama_data() -> dict[str, Any]:
    """The same product matrix on a stack that serves the model under its tag (the records' `model`), not under
    the matrix entry's name (the cell id's)."""
    return matrix_data(
        stacks=[{"stack": "ollama", "launcher": "process"}],
        models=[{"name": "qwen-tag", "sources": {"ollama": {"tag": SERVED_TAG}}}],
        decoding={"temperature": 0.7, "seed": 7},
    )


def event(guard: str, fired: bool = True, changed: bool = True) -> dict[str, Any]:
    return {"guard": guard, "fired": fired, "changed": changed, "before": None, "after": None}


def quiet(*guards: str) -> list[dict[str, Any]]:
    """Events of guards that ran and did nothing."""
    return [event(guard, fired=False, changed=False) for guard in guards]


class Parent:
    """A finished run's directory, written the way the runner writes one."""

    def __init__(self, root: Path, data: dict[str, Any], active: list[str], served: str | None = None) -> None:
        self.matrix = Matrix.model_validate(data)
        self.cells = {(c.channel, c.sample): c for plan in expand(self.matrix) for c in plan.cells}
        self.served = served
        self.store = RunStore(root / "20261203T000000Z-product-cpu-abc123")
        self.store.create(
            {
                "schema_version": 2,
                "run_id": self.store.run_id,
                "matrix_file": str(PRODUCT_CPU),
                "matrix_sha256": "0" * 64,
                "matrix": self.matrix.model_dump(mode="json"),
                "provenance": fingerprint(git_state()),
                "guards": {"active": sorted(active), "env": None},
                "cases": scored_cases(self.matrix),
                "finished": "2026-12-03T00:00:00+00:00",
            }
        )

    def cell(self, channel: str, sample: int = 0) -> Cell:
        return self.cells[(channel, sample)]

    def turn(self, seed: str, turn: int, *, channel: str = "product", sample: int = 0, **fields: Any) -> None:
        cell = self.cell(channel, sample)
        record = {
            "run_id": self.store.run_id,
            "cell_id": cell.cell_id,
            "seed": seed,
            "suite": "formation",
            "turn": turn,
            "model": self.served or cell.model.name,
            "stack": cell.stack.stack,
            "stack_config": cell.stack.label,
            "tools_mode": cell.mode.value,
            "hint": True,
            "http_status": 200,
            "parse_path": "harness",
            "outcome": "valid_call",
            "channel": channel,
            "sample": sample,
            "sampling_seed": 1000 + 10 * sample + turn,
            "raw_content": f"{seed} turn {turn}",
            "flags": ["cache:not_cleared"],
            **fields,
        }
        if self.store.read_cell(cell.cell_id) is None:  # every cell its turns name has its file (the one reader's rule)
            self.store.write_cell(cell.cell_id, {
                "cell_id": cell.cell_id, "status": "running",  # f-02 below never finished: not a complete cell
                "stack_label": cell.stack.label, "stack": cell.stack.stack, "model": cell.model.name,
                "tools_mode": cell.mode.value, "channel": channel, "sample": sample,
            })  # fmt: skip
        self.store.append_turn(TurnRecord.model_validate(record))

    def write_case_runs(self) -> None:
        """Six product case runs and a model-channel one; what each guard changed is in the comments."""
        # f-01 (sample 0): the repair changed the call; dedup, short_circuit, final_json and stall ran quietly.
        self.turn("f-01", 0, guard_events=[event("repair"), *quiet("dedup", "short_circuit")])
        self.turn("f-01", 1, guard_events=quiet("final_json", "stall"), end="answered", final_answer="accepted")
        # f-05 (sample 0): the repair fired but changed nothing; the short-circuit answered.
        self.turn(
            "f-05",
            0,
            guard_events=[event("repair", changed=False), *quiet("dedup"), event("short_circuit")],
            end="short_circuit",
            final_answer="5d41402abc4b2a76b9719d911017c592",
        )
        # f-08 (sample 1): dedup held back the repeated call on turn 1.
        self.turn("f-08", 0, sample=1, guard_events=quiet("repair", "dedup", "short_circuit"))
        self.turn("f-08", 1, sample=1, guard_events=[*quiet("repair"), event("dedup"), *quiet("short_circuit")])
        self.turn("f-08", 2, sample=1, guard_events=quiet("final_json", "stall"), end="answered", final_answer="FILED")
        # f-02 (sample 0): unfinished (the run was killed): never reused.
        self.turn("f-02", 0, guard_events=[event("stall")], prompted_by=None)
        # f-10 (sample 0): its server died under the first run (superseded), the rerun answered quietly.
        self.turn("f-10", 0, guard_events=[event("repair")], end="server_died", superseded=True)
        self.turn("f-10", 0, seed_attempt=1, guard_events=quiet("final_json", "stall"), end="answered")
        # f-12 (sample 2): a retried turn (two attempts) that ended with a quiet answer.
        self.turn("f-12", 0, sample=2, outcome="non_response", http_status=503)
        self.turn("f-12", 0, sample=2, attempt=1, guard_events=quiet("final_json", "stall"), end="answered")
        # The model channel is never ablated.
        self.turn("f-01", 0, channel="model", end="first_answer")
        self.store.close()


@pytest.fixture()
def parent(tmp_path: Path) -> Parent:
    made = Parent(tmp_path, matrix_data(), active=list(GUARDS))
    made.write_case_runs()
    return made


def ablation_store(tmp_path: Path) -> RunStore:
    store = RunStore(tmp_path / "abl")
    store.create({"schema_version": 2, "run_id": "abl"})
    return store


def copied_runs(store: RunStore) -> dict[str, list[tuple[str, int, int]]]:
    """cell id -> its records' (seed, turn, attempt), in file order."""
    runs: dict[str, list[tuple[str, int, int]]] = {}
    for record in store.read_turns():
        runs.setdefault(record["cell_id"], []).append((record["seed"], record["turn"], record["attempt"]))
    return runs


# ---- reuse_unchanged ----------------------------------------------------------------------------------------


def test_reuse_copies_exactly_the_case_runs_the_guard_changed_nothing_in(parent: Parent, tmp_path: Path) -> None:
    before = parent.store.turns_path.read_bytes()
    store = ablation_store(tmp_path)
    copied = reuse_unchanged(parent.store, store, ["repair", "dedup", "stall"])
    assert copied == {"repair": 4, "dedup": 4, "stall": 5}
    base = parent.cell("product").cell_id
    sample1, sample2 = parent.cell("product", 1).cell_id, parent.cell("product", 2).cell_id
    assert base.endswith("__channel-product") and sample1.endswith("__channel-product__sample-1")
    f05 = [("f-05", 0, 0)]
    f10, f12 = [("f-10", 0, 0)], [("f-12", 0, 0), ("f-12", 0, 1)]
    f01, f08 = [("f-01", 0, 0), ("f-01", 1, 0)], [("f-08", 0, 0), ("f-08", 1, 0), ("f-08", 2, 0)]
    assert copied_runs(store) == {
        f"{base}__without-repair": [*f05, *f10],  # not f-01: the repair changed its call
        f"{sample1}__without-repair": f08,
        f"{sample2}__without-repair": f12,
        f"{base}__without-dedup": [*f01, *f05, *f10],  # f-08 (dedup changed it) is not copied
        f"{sample2}__without-dedup": f12,
        f"{base}__without-stall": [*f01, *f05, *f10],  # f-02 never finished
        f"{sample1}__without-stall": f08,
        f"{sample2}__without-stall": f12,
    }
    assert parent.store.turns_path.read_bytes() == before  # the parent is untouched


def test_reused_records_are_the_parents_with_the_ablation_fields(parent: Parent, tmp_path: Path) -> None:
    store = ablation_store(tmp_path)
    reuse_unchanged(parent.store, store, ["dedup"])
    originals = {(r["cell_id"], r["seed"], r["turn"], r["attempt"]): r for r in parent.store.read_turns()}
    rewritten = {"cell_id", "run_id", "without", "flags"}
    for copy in store.read_turns():
        source = originals[
            (copy["cell_id"].removesuffix("__without-dedup"), copy["seed"], copy["turn"], copy["attempt"])
        ]
        assert {k: v for k, v in copy.items() if k not in rewritten} == {
            k: v for k, v in source.items() if k not in rewritten
        }
        assert (copy["run_id"], copy["without"], copy["channel"]) == ("abl", "dedup", "product")
        assert copy["flags"] == [*source["flags"], REUSED_FLAG]
        assert not copy["superseded"]
    # The superseded first run of f-10 stays behind: only the rerun that counts is copied.
    assert [r["seed_attempt"] for r in store.read_turns() if r["seed"] == "f-10"] == [1]


@pytest.mark.parametrize("served", [None, SERVED_TAG], ids=["served-as-named", "served-under-its-tag"])
def test_reused_cell_ids_are_the_ablation_matrix_cells(tmp_path: Path, served: str | None) -> None:
    """The sweep skips a reused case only if the copy sits under the cell id the ablation matrix expands to."""
    data = matrix_data() if served is None else ollama_data()
    made = Parent(tmp_path, data, active=list(GUARDS), served=served)
    made.write_case_runs()
    matrix, wanted, _active = ablation_matrix(made.store.manifest(), ["repair", "dedup"], made.store.dir)
    planned = {c.cell_id for plan in expand(matrix) for c in plan.cells}
    store = ablation_store(tmp_path)
    reuse_unchanged(made.store, store, wanted)
    reused = {r["cell_id"] for r in store.read_turns()}
    assert reused and reused <= planned, sorted(reused - planned)


# ---- ablation_matrix ----------------------------------------------------------------------------------------


def test_the_ablation_matrix_is_the_product_channel_once_per_guard_off(parent: Parent) -> None:
    matrix, wanted, active = ablation_matrix(parent.store.manifest(), ["stall", "repair"], parent.store.dir)
    assert (matrix.channels, matrix.without, matrix.gate, matrix.samples) == (["product"], wanted, [], 3)
    assert sorted(wanted) == ["repair", "stall"] and active == frozenset(GUARDS)
    cells = [c for plan in expand(matrix) for c in plan.cells]
    assert sorted((c.without, c.sample) for c in cells) == [(g, s) for g in ("repair", "stall") for s in range(3)]
    assert {c.channel for c in cells} == {"product"}


def test_all_guards_by_default(parent: Parent) -> None:
    _matrix, wanted, _active = ablation_matrix(parent.store.manifest(), None, parent.store.dir)
    assert wanted == sorted(GUARDS)


def test_a_guard_named_twice_is_ablated_once(parent: Parent, tmp_path: Path) -> None:
    matrix, wanted, _active = ablation_matrix(parent.store.manifest(), ["repair", "repair"], parent.store.dir)
    ids = [c.cell_id for plan in expand(matrix) for c in plan.cells]
    assert len(ids) == len(set(ids)) == 3
    store = ablation_store(tmp_path)
    assert reuse_unchanged(parent.store, store, wanted) == {"repair": 4}


def test_a_run_without_a_product_channel_is_refused(tmp_path: Path) -> None:
    made = Parent(tmp_path, matrix_data(channels=["model"]), active=list(GUARDS))
    with pytest.raises(AblationError, match="no product channel"):
        ablation_matrix(made.store.manifest(), None, made.store.dir)


def test_a_guard_that_was_off_is_refused(tmp_path: Path) -> None:
    made = Parent(tmp_path, matrix_data(), active=["dedup", "repair"])
    with pytest.raises(AblationError, match=r"\['stall'\] were off in the run"):
        ablation_matrix(made.store.manifest(), ["repair", "stall"], made.store.dir)
    assert ablation_matrix(made.store.manifest(), None, made.store.dir)[1] == ["dedup", "repair"]


def test_a_run_with_no_guard_on_is_refused(tmp_path: Path) -> None:
    made = Parent(tmp_path, matrix_data(), active=[])
    with pytest.raises(AblationError, match="no guard on"):
        ablation_matrix(made.store.manifest(), None, made.store.dir)


def test_a_manifest_whose_matrix_no_longer_validates_is_refused(parent: Parent) -> None:
    manifest = parent.store.manifest()
    manifest["matrix"]["guards"] = {"retry": True}
    with pytest.raises(AblationError, match="no longer validates"):
        ablation_matrix(manifest, None, parent.store.dir)


# ---- open_ablation ------------------------------------------------------------------------------------------


def test_open_ablation_creates_the_store_with_the_reused_runs(parent: Parent) -> None:
    store, matrix, active = open_ablation(parent.store.dir, ["dedup"], reuse=True, allow_drift=False)
    assert store.dir == ablation_dir(parent.store.dir)
    assert (matrix.without, active) == (["dedup"], frozenset(GUARDS))
    recorded = store.manifest()["ablation"]
    assert recorded["parent_run"] == parent.store.run_id
    assert (recorded["guards"], recorded["parent_guards"], recorded["drift"]) == (["dedup"], sorted(GUARDS), [])
    assert recorded["reused_case_runs"] == {"dedup": 4}
    assert all(REUSED_FLAG in r["flags"] for r in store.read_turns())
    assert len(store.read_turns()) == 6  # f-01 (2), f-05, f-10, f-12 (2 attempts)


def test_open_ablation_twice_resumes_the_same_store_without_copying_again(parent: Parent) -> None:
    first, _matrix, _active = open_ablation(parent.store.dir, ["dedup", "stall"], reuse=True, allow_drift=False)
    turns = first.read_turns()
    first.close()
    again, _matrix, _active = open_ablation(parent.store.dir, ["dedup", "stall"], reuse=True, allow_drift=False)
    assert again.dir == first.dir
    assert again.read_turns() == turns and len(turns) == 6 + 9  # dedup: 4 case runs, stall: 5
    assert len(again.manifest()["resumes"]) == 1
    with pytest.raises(AblationError, match="move it away"):
        open_ablation(parent.store.dir, ["dedup"], reuse=True, allow_drift=False)


def test_open_ablation_without_reuse_copies_nothing(parent: Parent) -> None:
    store, _matrix, _active = open_ablation(parent.store.dir, ["dedup"], reuse=False, allow_drift=False)
    assert store.read_turns() == []
    assert "reused_case_runs" not in store.manifest()["ablation"]


def test_open_ablation_refuses_drift_unless_allowed(parent: Parent) -> None:
    manifest = json.loads(parent.store.manifest_path.read_text())
    manifest["provenance"]["seeds"]["formation.yaml"] = "0" * 64
    parent.store.manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(AblationError, match=r"seeds/formation\.yaml changed"):
        open_ablation(parent.store.dir, ["dedup"], reuse=True, allow_drift=False)
    assert not (ablation_dir(parent.store.dir)).exists()
    store, _matrix, _active = open_ablation(parent.store.dir, ["dedup"], reuse=True, allow_drift=True)
    assert store.manifest()["ablation"]["drift"] == ["seeds/formation.yaml changed"]


# ---- config_matches -----------------------------------------------------------------------------------------


def cell_file(cell_id: str, guards: list[str], argv: list[str] | None) -> dict[str, Any]:
    """A cell file with the identity fields config_sha256 reads (the port replaced in the digest)."""
    record = {
        "cell_id": cell_id,
        "status": "complete",  # every cell file says where its cell stands (core/runcontract.py CellFile)
        "stack_label": "llamacpp-jinja",
        "stack": "llamacpp",
        "model": "qwen2.5-coder-0.5b-instruct",
        "tools_mode": "text-tools",
        "channel": "product",
        "sample": 0,
        "guards": guards,
        "argv": argv,
        "base_url": "http://127.0.0.1:8081",
        "decoding": {"temperature": 0.7},
    }
    return {**record, "config_sha256": config_sha256(record)}


def test_config_matches_names_ablation_cells_served_differently(parent: Parent) -> None:
    store, _matrix, _active = open_ablation(parent.store.dir, ["dedup", "stall"], reuse=True, allow_drift=False)
    base = parent.cell("product").cell_id
    argv = ["llama-server", "--port", "8081", "--jinja"]
    parent.store.write_cell(base, cell_file(base, sorted(GUARDS), argv))
    others = sorted(set(GUARDS) - {"dedup"})
    store.write_cell(f"{base}__without-dedup", cell_file(f"{base}__without-dedup", others, argv))
    served_other = [*argv, "--no-jinja"]
    store.write_cell(f"{base}__without-stall", cell_file(f"{base}__without-stall", others, served_other))
    sample1 = parent.cell("product", 1).cell_id
    store.write_cell(f"{sample1}__without-stall", cell_file(f"{sample1}__without-stall", others, None))
    assert config_matches(parent.store, store) == [f"{base}__without-stall"]


def test_open_ablation_refuses_a_run_that_has_not_finished(tmp_path: Path) -> None:
    parent = Parent(tmp_path, matrix_data(), ["stall", "repair"])
    parent.store.update_manifest(finished=None)
    with pytest.raises(AblationError, match="not finished"):
        open_ablation(parent.store.dir, None, reuse=True, allow_drift=False)
