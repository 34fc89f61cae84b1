"""OpenTelemetry (`otel`) and the MCP SDK (`mcp`) are extras, as Ray is: imported only where they are used, and
asked for without being installed, one clear error. The CLI and the sweep import neither. A dependency whose
private module the package imports (httpx-sse) is pinned to the exact version installed."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import typer

from orchestrator.cli.execution import check_tracing
from orchestrator.runner.suites.mcperror import MISSING_SDK, McpError
from orchestrator.runner.turn import tracing

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


@pytest.fixture
def without_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry as if not installed: a None in sys.modules makes every import of it fail."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    tracing.disable()


def test_an_endpoint_without_opentelemetry_is_one_clear_error(without_otel: None) -> None:
    with pytest.raises(tracing.TracingUnavailable, match=r"OTEL_EXPORTER_OTLP_ENDPOINT asks for .*\[otel\]"):
        tracing.check_available(ENDPOINT)
    with pytest.raises(tracing.TracingUnavailable):
        tracing.configure_from_env(ENDPOINT)
    assert not tracing.enabled()


def test_without_an_endpoint_opentelemetry_is_not_needed(without_otel: None) -> None:
    tracing.check_available({})
    assert tracing.configure_from_env({"OTEL_SDK_DISABLED": "true", **ENDPOINT}) is False


def test_the_cli_refuses_a_traced_run_without_opentelemetry_before_it_starts(
    without_otel: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT["OTEL_EXPORTER_OTLP_ENDPOINT"])
    with pytest.raises(typer.Exit) as stopped:
        check_tracing()
    assert stopped.value.exit_code == 2


def test_the_mcp_client_without_the_sdk_is_one_mcp_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "orchestrator.runner.suites.mcpclient", raising=False)
    with pytest.raises(McpError, match=r"\[mcp\]") as raised:
        importlib.import_module("orchestrator.runner.suites.mcpclient")
    assert MISSING_SDK in str(raised.value)


# Imports the CLI and the sweep with both extras made unimportable: they must load, and load neither.
PROBE = """
import json, sys
for name in ("opentelemetry", "mcp"):
    sys.modules[name] = None
import orchestrator.cli, orchestrator.cli.execution, orchestrator.cli.product_commands
import orchestrator.runner.sweep.sweep, orchestrator.runner.config.matrix, orchestrator.runner.suites.toolserver
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("opentelemetry", "mcp") and sys.modules[m] is not None)
print(json.dumps(loaded))
"""


@pytest.mark.slow
def test_the_cli_and_the_sweep_import_neither_opentelemetry_nor_mcp() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_httpx_sse_whose_private_decoders_streaming_imports_is_pinned_exactly() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    pins = [spec for spec in pyproject["project"]["dependencies"] if spec.startswith("httpx-sse")]
    assert pins == [f"httpx-sse=={version('httpx-sse')}"]
