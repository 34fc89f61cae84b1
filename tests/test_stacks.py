"""Stack definitions, argv building, compose rendering (no drift) and the import direction."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.serving import compose
from orchestrator.serving.registry import UnknownStackError, load_stack, stack_names
from orchestrator.serving.serverconfig import ModelRef, ServerConfig, server_argv
from orchestrator.serving.stackspec import render_args


def test_every_stack_loads_with_its_tool_configs() -> None:
    assert set(stack_names()) == {"llamacpp", "vllm", "sglang", "ollama", "openai"}
    assert load_stack("vllm").tool_config("hermes").flags == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    assert load_stack("vllm").tool_config("default").flags == []
    assert load_stack("llamacpp").tool_config("no-jinja").flags == ["--no-jinja"]
    assert load_stack("sglang").tool_config("parser:qwen").flags == ["--tool-call-parser", "qwen"]
    for name in stack_names():
        spec = load_stack(name)
        assert spec.default_tool_config in spec.tool_configs
        for image in spec.images.values():
            assert image.tag and "latest" not in image.tag  # pinned tags only


def test_unknown_stack_suggests_a_name() -> None:
    with pytest.raises(UnknownStackError, match="did you mean 'llamacpp'"):
        load_stack("llamacp")


def test_argv_in_process_and_container() -> None:
    spec = load_stack("llamacpp")
    config = ServerConfig(
        stack="llamacpp",
        tool_config="no-jinja",
        launcher="process",
        binary="/bin/llama-server",
        model=ModelRef(name="q", path="/cache/q.gguf"),
    )
    process = server_argv(spec, config, bind_host="127.0.0.1", port=1234, in_container=False)
    assert process == [
        "/bin/llama-server",
        "-m",
        "/cache/q.gguf",
        "--alias",
        "q",
        "--host",
        "127.0.0.1",
        "--port",
        "1234",
        "-c",
        "4096",
        "-np",
        "1",
        "-t",
        "2",
        "--no-jinja",
    ]
    container = server_argv(spec, config, bind_host="0.0.0.0", port=8080, in_container=True)
    assert container[:3] == ["-m", "/models/q.gguf", "--alias"]


def test_unknown_placeholder_is_an_error() -> None:
    with pytest.raises(KeyError, match="nope"):
        render_args(["--x", "{nope}"], {})


def test_compose_files_match_the_stack_definitions() -> None:
    for spec in compose.launchable_stacks():
        path = compose.COMPOSE_DIR / f"{spec.name}.yaml"
        assert path.read_text() == compose.rendered_text(spec), f"{path} drifted: run `orchestrate compose --write`"
    rendered = compose.render(load_stack("vllm"))["services"]
    assert rendered["vllm-hermes"]["command"][-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert all(port.startswith("127.0.0.1:") for s in rendered.values() for port in s["ports"])


def test_pure_core_imports_no_docker_or_http() -> None:
    code = (
        "import sys\n"
        "import orchestrator.core.classify, orchestrator.core.stats\n"
        "import orchestrator.core.textcalls, orchestrator.core.types\n"
        "bad = [m for m in ('docker', 'httpx') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
