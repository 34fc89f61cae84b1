"""Ollama and SGLang through the real launcher, readiness loop and probe, against replay servers
(tests/replay/*, which replay shared/reference/stacks.md; neither stack can run on this machine)."""

from __future__ import annotations

import httpx
import pytest

from orchestrator.core.types import Outcome
from orchestrator.serving.build import server_config
from orchestrator.serving.launchers import running_server
from orchestrator.serving.probe import probe
from orchestrator.serving.registry import load_stack
from tests import bodies as b
from tests.conftest import REPLAY_DIR

pytestmark = pytest.mark.server


def ollama_config(model: str):
    return server_config(
        spec=load_stack("ollama"), stack="ollama",
        tool_config=None,
        launcher="process",
        model=model,
        binary=str(REPLAY_DIR / "ollama"),
        ready_timeout_s=30,
    )


@pytest.mark.parametrize(
    ("model", "verdict", "outcome", "status"),
    [
        ("phi3:latest", "rejected", Outcome.REJECTED_REQUEST, 400),
        ("gemma3:270m", "rejected", Outcome.REJECTED_REQUEST, 400),
        ("qwen2.5-coder:0.5b", "text_only", Outcome.UNPARSEABLE_TEXT, 200),
        ("llama3.2:latest", "native_ok", Outcome.VALID_CALL, 200),
    ],
)
def test_ollama_probe_verdicts(model: str, verdict: str, outcome: Outcome, status: int) -> None:
    config = ollama_config(model)
    with running_server(config, run_id="test-ollama") as handle:
        result = probe(handle, config)
    assert (result.verdict, result.outcome, result.http_status) == (verdict, outcome, status)
    assert result.stack_version == "0.30.8"
    capabilities = result.capabilities["/api/show#capabilities"]
    assert ("tools" in capabilities) == (verdict != "rejected")
    if verdict == "rejected":
        assert result.detail == "refused:model_lacks_tools"
        assert result.error_body == {"error": f"registry.ollama.ai/library/{model} does not support tools"}


def test_ollama_v1_refusal_envelope_and_stream_default() -> None:
    config = ollama_config("phi3")
    with running_server(config, run_id="test-ollama") as handle:
        # An empty message list gets other answers (/v1: 400 "[] is too short"; /api/chat: the load reply).
        messages = [{"role": "user", "content": "Status of api-1?"}]
        v1 = httpx.post(
            handle.base_url + "/v1/chat/completions", json={"model": "phi3", "messages": messages, "tools": b.TOOLS}
        )
        streamed = httpx.post(handle.base_url + "/api/chat", json={"model": "phi3", "messages": messages})
    assert v1.status_code == 400 and v1.json() == b.ollama_v1_refusal()
    assert streamed.headers["content-type"].startswith("application/x-ndjson")


def sglang_config(tool_config: str | None, replay_env: dict[str, str], python_exe: str):
    return server_config(
        spec=load_stack("sglang"), stack="sglang",
        tool_config=tool_config,
        launcher="process",
        model="qwen2.5-coder-0.5b",
        model_path="/models/qwen2.5-coder-0.5b",
        python=python_exe,
        extra_env=replay_env,
        ready_timeout_s=60,
    )


def test_sglang_default_is_text_only_and_parser_is_native(replay_env: dict[str, str], python_exe: str) -> None:
    default = sglang_config(None, replay_env, python_exe)
    with running_server(default, run_id="test-sglang") as handle:
        # readiness waited through connection refused (load) and 503 (warm-up)
        assert handle.ready_s is not None and handle.ready_s >= 2.5
        result = probe(handle, default)
    assert (result.verdict, result.http_status, result.n_native_calls, result.text_call) == ("text_only", 200, 0, True)
    assert result.capabilities["/model_info#tool_call_parser"] is None
    assert result.stack_version == "0.5.23"
    configured = sglang_config("parser:qwen", replay_env, python_exe)
    with running_server(configured, run_id="test-sglang") as handle:
        result = probe(handle, configured)
        assert "--tool-call-parser" in handle.describe()["argv"]
    assert (result.verdict, result.outcome, result.n_native_calls) == ("native_ok", Outcome.VALID_CALL, 1)
    assert result.capabilities["/model_info#tool_call_parser"] == "qwen"
