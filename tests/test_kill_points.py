"""The orchestrator killed at seeded-random points of a real small run (llama-server, Qwen 0.5B, 3 seeds of
2 turns), resumed after each kill: the run ends with exactly the counted (cell, seed, turn, attempt) records an
uninterrupted run has, none lost, none duplicated (a seed run a kill cut short is kept, superseded, and rerun),
and no server of the run left running. SIGKILL leaves the
server behind until the resume's cleanup removes it; SIGTERM and SIGINT tear it down themselves.
The 10-point version: scripts/kill-points.py."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import killpoints

pytestmark = pytest.mark.integration
SEEDS = 3
RNG_SEED = 14  # chooses the kill points; printed with them


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, llama_server_binary: str) -> tuple[Path, Path]:
    """An uninterrupted run of the matrix: what every killed run must end with."""
    base = tmp_path_factory.mktemp("kill-reference")
    matrix = killpoints.write_matrix(base, llama_server_binary, SEEDS)
    run = killpoints.reference_run(matrix, base / "r")
    return matrix, run


def check(reference_run: Path, run: Path, report: killpoints.KillReport) -> dict[str, object]:
    result = killpoints.compare(reference_run, run, report.on_disk)
    assert result["duplicates"] == 0
    assert result["counted_keys"] == result["reference_keys"], "the counted records differ from an uninterrupted run"
    assert result["lost"] == [], "a record on disk at a kill is gone after the resumes"
    assert result["superseded_not_cut_short"] == [], "only the records of a seed run cut short are superseded"
    assert result["same_content"], "a rerun seed must answer as in the uninterrupted run (its sampling seed)"
    assert result["ended_seeds"] == [f"ops-{i:02d}" for i in range(SEEDS)]
    assert result["orphans"] == [] and result["pid_records"] == []
    return result


def test_sigkill_at_three_random_points_then_resume(
    tmp_path: Path, reference: tuple[Path, Path], fault_counts: Callable[[str], None]
) -> None:
    matrix, reference_run = reference
    total = len(killpoints.records(reference_run))
    points = killpoints.choose_points(RNG_SEED, 3, total)
    started = time.monotonic()
    run, report = killpoints.kill_and_resume(matrix, tmp_path / "r", points, [signal.SIGKILL] * 3, torn=True)
    result = check(reference_run, run, report)
    fault_counts(
        f"kill points (rng {RNG_SEED}): {points} of {total} records; records at each kill: {report.at_kill}; "
        f"servers left by each kill: {report.orphans_after_kill}; torn lines planted: {report.torn_lines}; "
        f"final records: {result['records']}, counted keys: {len(result['counted_keys'])}, "
        f"superseded (cut short by a kill): {len(result['superseded'])}, lost: {len(result['lost'])}, "
        f"same content as the reference: {result['same_content']}; {time.monotonic() - started:.0f}s"
    )
    # A SIGKILL cannot tear down: a kill after the server started leaves it running until the resume's cleanup.
    assert all(n >= 1 for n in report.orphans_after_kill)


def test_sigterm_in_readiness_and_sigint_mid_seed_tear_down_and_resume(
    tmp_path: Path, reference: tuple[Path, Path], fault_counts: Callable[[str], None]
) -> None:
    matrix, reference_run = reference
    total = len(killpoints.records(reference_run))
    mid = killpoints.choose_points(RNG_SEED, 1, total - 1)[0] + 1  # a point after at least one record
    points = [0, mid]
    started = time.monotonic()
    run, report = killpoints.kill_and_resume(
        matrix, tmp_path / "r", points, [signal.SIGTERM, signal.SIGINT], torn=False
    )
    result = check(reference_run, run, report)
    fault_counts(
        f"signals {report.signals} at points {points}; records at each: {report.at_kill}; "
        f"servers left: {report.orphans_after_kill}; final records: {result['records']}; "
        f"{time.monotonic() - started:.0f}s"
    )
    assert report.orphans_after_kill == [0, 0], "SIGTERM / SIGINT must tear the server down before exiting"
