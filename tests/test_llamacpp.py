"""Real llama.cpp b11312, as a local process and in a Docker container from the locally built image,
serving real GGUF models (Qwen2.5-Coder-0.5B, SmolLM2-135M)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.types import Outcome
from orchestrator.serving.build import server_config
from orchestrator.serving.launchers import running_server
from orchestrator.serving.probe import probe
from orchestrator.serving.registry import load_stack

pytestmark = pytest.mark.integration
QWEN = "qwen2.5-coder-0.5b-instruct"
SMOL = "smollm2-135m-instruct"


def config(model: str, tool_config: str, launcher: str, binary: str | None = None):
    return server_config(
        spec=load_stack("llamacpp"), stack="llamacpp",
        tool_config=tool_config,
        launcher=launcher,
        model=model,
        binary=binary,
        network="host",
        ready_timeout_s=180,
        progress=lambda _m: None,
    )


def test_process_qwen_text_only_then_no_jinja_refused(llama_server_binary: str) -> None:
    jinja = config(QWEN, "jinja", "process", llama_server_binary)
    with running_server(jinja, run_id="test-llama") as handle:
        result = probe(handle, jinja)
        described = handle.describe()
        cmdline = Path(f"/proc/{described['pid']}/cmdline").read_bytes().split(b"\0")[:-1]
    # The paper's llama.cpp row for this model: 200, no native tool_calls, the call written as text.
    assert (result.http_status, result.n_native_calls, result.text_call, result.verdict) == (200, 0, True, "text_only")
    assert result.outcome is Outcome.UNPARSEABLE_TEXT
    # What ran is what is recorded: argv, binary version, server-reported version.
    assert [part.decode() for part in cmdline] == described["argv"]
    assert described["argv"][0] == llama_server_binary and "--jinja" in described["argv"]
    assert "build 11312" in described["binary_version"]
    assert result.stack_version == "b11312-0c1e57098"
    assert result.capabilities["/props#chat_template_caps"]["supports_tools"] is True

    no_jinja = config(QWEN, "no-jinja", "process", llama_server_binary)
    with running_server(no_jinja, run_id="test-llama") as handle:
        refused = probe(handle, no_jinja)
    assert (refused.http_status, refused.outcome, refused.detail) == (500, Outcome.REJECTED_REQUEST, "refused:no_jinja")
    assert refused.error_body["error"]["message"] == "tools param requires --jinja flag"
    assert refused.verdict == "rejected"


def test_process_smollm2_prose_without_tool_support(llama_server_binary: str) -> None:
    smol = config(SMOL, "jinja", "process", llama_server_binary)
    with running_server(smol, run_id="test-llama") as handle:
        result = probe(handle, smol)
    assert (result.http_status, result.verdict, result.outcome) == (200, "prose", Outcome.NO_CALL_PROSE)
    assert result.capabilities["/props#chat_template_caps"]["supports_tools"] is False


def test_docker_qwen_text_only_with_recorded_image(docker_client, llama_server_binary: str) -> None:
    image = load_stack("llamacpp").images["cpu"]
    engine_image = docker_client.images.get(image.tagged)
    for tool_config, expected in (("jinja", "text_only"), ("no-jinja", "rejected")):
        cfg = config(QWEN, tool_config, "docker")
        with running_server(cfg, run_id="test-llama-docker") as handle:
            result = probe(handle, cfg)
            described = handle.describe()
            container = docker_client.containers.get(described["container_id"])
            assert container.labels["toolcall-matrix.run-id"] == "test-llama-docker"
            assert container.attrs["Config"]["Cmd"] == described["argv"]
            mounts = container.attrs["Mounts"]
            assert mounts and all(not m["RW"] for m in mounts)  # model volume read-only
        assert result.verdict == expected
        assert described["image_id"] == engine_image.id
        assert result.stack_version == "b11312-0c1e57098"
    assert not docker_client.containers.list(all=True, filters={"label": "toolcall-matrix.run-id=test-llama-docker"})
