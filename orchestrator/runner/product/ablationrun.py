"""`orchestrate ablate`: rerun a finished run's product channel with each guard switched off in turn.

The ablation is a run of its own in `RUN_DIR/<run_id>-ablation/` (resumable like any run): the parent's matrix,
stack configs, cases, samples and sampling seeds, its guard set less one guard per cell (`without`), its servers
started once for all the guards. A case run in which the guard changed nothing sends, with the guard off,
exactly the requests it sent with it on (the guard's only effect is what it changes): it is not rerun but
copied from the parent, flagged `ablation:reused`, unless `--no-reuse` asks to rerun everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.core.cell import CellKey, slug
from orchestrator.core.types import ToolsMode, TurnRecord
from orchestrator.runner.config.cellconfig import config_sha256
from orchestrator.runner.config.matrix import Matrix
from orchestrator.runner.config.resolve import RunAssets, validation_context
from orchestrator.runner.run.provenance import drift, fingerprint, git_state
from orchestrator.runner.run.runs import start_run_in
from orchestrator.runner.store.rundir import read_run
from orchestrator.runner.store.runpaths import owned_path
from orchestrator.runner.store.runstore import RunStore, counted_turns, now
from orchestrator.serving.launchers import cleanup


def ablation_dir(run_dir: Path) -> Path:
    """`RUN_DIR/<run_id>-ablation`: the name is the ablation's run id, which labels its servers and processes, so
    it must be unique (a cleanup by run id never touches another run's ablation)."""
    return run_dir / f"{run_dir.name}-ablation"


REUSED_FLAG = "ablation:reused"


class AblationError(ValueError):
    """The run cannot be ablated as asked: the message says why."""


def ablation_matrix(
    parent: dict[str, Any], guards: list[str] | None, run_dir: Path, *, allow_drift: bool = False
) -> tuple[Matrix, list[str], frozenset[str]]:
    """The parent's matrix with the product channel only, one cell per guard off; the guards to ablate and the
    parent's own guard set (what every ablation cell has, less its one guard). The matrix is the parent run's
    own: validated against its snapshot of stacks and suites (runner/config/resolve.py), never today's files."""
    assets = RunAssets.from_run(run_dir, parent.get("provenance"), allow_drift=allow_drift, launch=True)
    try:
        matrix = Matrix.model_validate(parent["matrix"], context=validation_context(assets))
    except Exception as exc:  # a manifest that no longer validates says so, in one line
        raise AblationError(f"the run's matrix no longer validates: {exc}") from None
    if not matrix.channels or "product" not in matrix.channels:
        raise AblationError("the run has no product channel: there are no guards to ablate")
    active = frozenset((parent.get("guards") or {}).get("active") or [])
    wanted = sorted(set(guards)) if guards else sorted(active)
    off = sorted(set(wanted) - active)
    if off:
        raise AblationError(f"guards {off} were off in the run: there is nothing to ablate (on: {sorted(active)})")
    if not wanted:
        raise AblationError("the run had no guard on")
    ablated = matrix.model_copy(update={"channels": ["product"], "without": wanted, "gate": []})
    return Matrix.model_validate(ablated.model_dump(), context=validation_context(assets)), wanted, active


def open_ablation(
    run_dir: Path, guards: list[str] | None, *, reuse: bool, allow_drift: bool
) -> tuple[RunStore, Matrix, frozenset[str]]:
    """The ablation store (created, or reopened to resume) with the reused case runs already in it."""
    parent = RunStore(run_dir)
    manifest = parent.manifest()
    differences = drift(manifest.get("provenance"), fingerprint(git_state()))
    if differences and not allow_drift:
        raise AblationError(
            "the run was made with other files than today's (" + "; ".join(differences) + "): an ablation must "
            "rerun the same code; pass --allow-drift to go on anyway (recorded)"
        )
    matrix, wanted, active = ablation_matrix(manifest, guards, run_dir, allow_drift=allow_drift)
    if not manifest.get("finished"):
        raise AblationError("the run has not finished: finish it first (orchestrate matrix --resume RUN_DIR)")
    directory = owned_path(run_dir, ablation_dir(run_dir))  # written into: never a link out of the run
    if (directory / "manifest.json").is_file():
        store = RunStore(directory)
        recorded = store.manifest().get("ablation", {}).get("guards")
        if recorded != wanted:
            raise AblationError(f"{directory} ablates {recorded}, not {wanted}: move it away to start another")
        cleanup(store.run_id)  # servers a killed ablation left behind
        store.supersede_unfinished()
        store.update_manifest(resumes=[*store.manifest().get("resumes", []), {"at": now(), "drift": differences}])
        return store, matrix, active
    extra = {
        "ablation": {
            "parent_run": manifest.get("run_id"),
            "guards": wanted,
            "parent_guards": sorted(active),
            "reuse": reuse,
            "drift": differences,
        }
    }
    store = start_run_in(
        directory,
        matrix,
        Path(manifest.get("matrix_file", "")),
        manifest.get("matrix_sha256", ""),
        extra=extra,
        guards=active,
    )
    if reuse:
        copied = reuse_unchanged(parent, store, wanted)
        store.update_manifest(ablation={**extra["ablation"], "reused_case_runs": copied})
    return store, matrix, active


def _ablation_cell_id(record: dict[str, Any], guard: str) -> str:
    """The parent cell's id with the guard-off axis (the last of the later axes) appended: built from the cell
    id, not the record's model, which is the served name (an Ollama tag), not the matrix entry's label."""
    return f"{record['cell_id']}__without-{slug(guard)}"


def reuse_unchanged(parent: RunStore, store: RunStore, guards: list[str]) -> dict[str, int]:
    """Copy, per guard, the parent's finished product case runs in which that guard changed nothing."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in counted_turns(read_run(parent).turns):  # the one reader's rule: a lost or copied record refused
        if record.get("channel") == "product" and record.get("without") is None:
            runs.setdefault((record["cell_id"], record["seed"]), []).append(record)
    copied = dict.fromkeys(guards, 0)
    for records in runs.values():
        if not any(r.get("end") for r in records):
            continue
        for guard in guards:
            if any(e["guard"] == guard and e["changed"] for r in records for e in r.get("guard_events") or []):
                continue
            for record in sorted(records, key=lambda r: (r["turn"], r.get("attempt", 0))):
                flags = [*(record.get("flags") or []), REUSED_FLAG]
                copy = {**record, "cell_id": _ablation_cell_id(record, guard), "without": guard}
                store.append_turn(TurnRecord.model_validate({**copy, "run_id": store.run_id, "flags": flags}))
            copied[guard] += 1
    return copied


def config_matches(parent: RunStore, store: RunStore) -> list[str]:
    """Ablation cells whose stack config differs from their parent cell's (other than the guard set)."""
    parents = {c["cell_id"]: c for c in parent.read_cells()}
    mismatched = []
    for cell in store.read_cells():
        if not cell.get("argv"):
            continue  # never served (reused only): nothing launched to compare
        key = CellKey(
            stack_config=cell["stack_label"],
            model=cell["model"],
            tools_mode=ToolsMode(cell["tools_mode"]),
            channel="product",
            sample=cell.get("sample", 0),
        )
        origin = parents.get(key.cell_id)
        if origin is None or config_sha256({**cell, "guards": origin.get("guards")}) != origin.get("config_sha256"):
            mismatched.append(cell["cell_id"])
    return mismatched
