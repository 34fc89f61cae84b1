"""A run's life outside the sweep: its directory and manifest at the start, its end, and a resume that
refuses to mix results made with other files (drift)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.core.redact import redact_matrix
from orchestrator.core.types import SCHEMA_VERSION
from orchestrator.runner.config.matrix import Matrix
from orchestrator.runner.config.resolve import RunAssets, validation_context
from orchestrator.runner.run.provenance import (
    drift,
    fingerprint,
    git_state,
    host_facts,
    package_versions,
    snapshot_stacks,
)
from orchestrator.runner.store.runstore import RunStore, now
from orchestrator.runner.suites.bfclcases import PROVENANCE_KEY as BFCL_PROVENANCE_KEY
from orchestrator.runner.turn.guards import GUARDS_ENV, active_guards
from orchestrator.serving.handle import check_run_id
from orchestrator.serving.launchers import cleanup


def new_run_id(matrix: Matrix) -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{matrix.name}-{uuid.uuid4().hex[:6]}"


def start_run(matrix: Matrix, matrix_path: Path, matrix_sha256: str, results_dir: Path) -> RunStore:
    return start_run_in(results_dir / new_run_id(matrix), matrix, matrix_path, matrix_sha256)


def start_run_in(
    directory: Path,
    matrix: Matrix,
    matrix_path: Path,
    matrix_sha256: str,
    *,
    extra: dict[str, Any] | None = None,
    guards: frozenset[str] | None = None,
) -> RunStore:
    """Create a run in `directory`: its manifest (matrix, code, packages, host, guards) and the snapshots of
    the stacks and of the suites it resolved (`seeds/`, byte for byte: what a resume and the analysis read)."""
    store = RunStore(directory)
    git = git_state()
    store.create(
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": store.run_id,
            "matrix_file": str(matrix_path),
            "matrix_sha256": matrix_sha256,
            "matrix": redact_matrix(matrix.model_dump(mode="json")),  # `--api-key VALUE`: never stored
            "git": git,
            "provenance": fingerprint(git),
            "packages": package_versions(),
            "host": host_facts(),
            # The product channel's guards: the matrix's switches, or TOOLCALL_MATRIX_GUARDS when it is set.
            "guards": {
                "active": sorted(active_guards(matrix.guards, os.environ) if guards is None else guards),
                "env": os.environ.get(GUARDS_ENV),
            },
            # What each scored case declares is right, and the core set: the channels' scores and gates read these.
            "cases": scored_cases(matrix),
            "started": now(),
            "finished": None,
            **(extra or {}),
        }
    )
    snapshot_stacks(store.dir)
    store.update_manifest(suites_snapshot=matrix.assets.snapshot_suites(store.dir))  # {file: sha256}
    bfcl = matrix.assets.snapshot_bfcl(store.dir)
    if bfcl is not None:  # the BFCL cases as run: a resume and the analysis read them, never today's package
        store.update_manifest(provenance={**store.manifest()["provenance"], BFCL_PROVENANCE_KEY: bfcl})
    return store


def recorded_matrix(
    run_dir: Path, manifest: dict[str, Any], *, allow_drift: bool = False, launch: bool = False
) -> Matrix:
    """A recorded run's matrix, validated against the run's own stacks and suites (its snapshot), never
    today's files: a resume and the analysis see what the run ran with (`allow_drift`, `launch`: RunAssets.from_run)."""
    assets = RunAssets.from_run(run_dir, manifest.get("provenance"), allow_drift=allow_drift, launch=launch)
    return Matrix.model_validate(manifest.get("matrix"), context=validation_context(assets))


def recorded_guards(store: RunStore) -> frozenset[str]:
    """The guard set a run recorded at its start: a resume runs its remaining cases under the same set."""
    return frozenset((store.manifest().get("guards") or {}).get("active") or [])


def scored_cases(matrix: Matrix) -> dict[str, Any]:
    """Per scored suite of the matrix: its core set and each case's expectation (as recorded for the run)."""
    cases: dict[str, Any] = {}
    for suite in matrix.suites().values():
        if suite.scored:
            expect = {seed.id: seed.expect.model_dump(mode="json") for seed in suite.seeds if seed.expect}
            cases[suite.suite] = {"version": suite.version, "core": suite.core, "expect": expect}
    return cases


def finish_run(store: RunStore, *, wall_s: float, resumed: bool) -> None:
    """Record the end of a run. A resume records its own end and wall time in its `resumes` entry: the first
    run's `finished` and `wall_s` stay what they were."""
    manifest = store.manifest()
    if resumed and manifest.get("resumes"):
        resumes = [*manifest["resumes"][:-1], {**manifest["resumes"][-1], "finished": now(), "wall_s": wall_s}]
        store.update_manifest(resumes=resumes)
    else:
        store.update_manifest(finished=now(), wall_s=wall_s)


class DriftError(ValueError):
    """A resume would mix results made with different stacks, seeds, templates or code."""


def resume_run(run_dir: Path, *, allow_drift: bool = False) -> RunStore:
    """Reopen a run: refuse (or record) drift, mark partial seeds' records superseded (repairing a torn last line
    or a damaged cell file, recorded in the resume entry), remove servers a killed process left behind. A directory
    whose name is no run id (its servers' label) is a RunIdError before anything changes."""
    check_run_id(run_dir.name)
    store = RunStore(run_dir)
    manifest = store.manifest()
    differences = drift(manifest.get("provenance"), fingerprint(git_state()))
    if differences and not allow_drift:
        listed = "\n  ".join(differences)
        raise DriftError(
            f"{run_dir}: the run was made with other files than today's:\n  {listed}\n"
            "resume with --allow-drift to go on anyway (the drift is recorded in the manifest)"
        )
    store.supersede_unfinished()  # a damaged line is an error before anything changes; what it repairs is recorded
    entry = {"at": now(), "drift": differences, "allowed": bool(differences)}
    repaired = [str(damage) for damage in store.damage]
    resumes = [*manifest.get("resumes", []), {**entry, "repaired": repaired} if repaired else entry]
    store.update_manifest(resumes=resumes)
    cleanup(store.run_id)
    return store
