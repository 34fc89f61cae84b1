"""Stack definitions, argv building, compose rendering (no drift) and the import direction."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from orchestrator.serving import compose
from orchestrator.serving.registry import UnknownStackError, load_stack, stack_names
from orchestrator.serving.serverconfig import ModelRef, ServerConfig, server_argv, server_env
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
        "--cache-ram",  # prompt_cache policy: no host-RAM prompt cache, slot actions allowed
        "0",
        "--slot-save-path",
        "/tmp",
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


@pytest.mark.slow
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


def vllm_config(model: ModelRef, host: str = "cpu") -> ServerConfig:
    return ServerConfig(stack="vllm", tool_config="default", launcher="process", host=host, model=model)


def test_vllm_argv_pins_the_sampler_defaults_to_vllms_own() -> None:
    spec = load_stack("vllm")
    config = vllm_config(ModelRef(name="q", path="/cache/q-hf"))
    for in_container in (False, True):
        argv = server_argv(spec, config, bind_host="127.0.0.1", port=1, in_container=in_container)
        assert argv[argv.index("--generation-config") + 1] == "vllm"


def test_hf_hub_offline_only_for_a_local_model_directory() -> None:
    spec = load_stack("vllm")
    local = server_env(spec, vllm_config(ModelRef(name="q", path="/cache/q-hf")), bind_host="h", port=1)
    hub = server_env(
        spec,
        vllm_config(ModelRef(name="q", path="Qwen/Qwen2.5-Coder-0.5B-Instruct", local=False), host="gpu"),
        bind_host="h",
        port=1,
    )
    assert local["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in hub
    assert local["VLLM_CPU_KVCACHE_SPACE"] == hub["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_prompt_cache_policy_reaches_argv_and_env() -> None:
    llama = load_stack("llamacpp")
    config = ServerConfig(
        stack="llamacpp", tool_config="jinja", launcher="process", model=ModelRef(name="q", path="/c/q.gguf")
    )
    argv = server_argv(llama, config, bind_host="127.0.0.1", port=1, in_container=False)
    assert argv[argv.index("--cache-ram") + 1] == "0" and argv[argv.index("--slot-save-path") + 1] == "/tmp"
    assert llama.request_fields == {"cache_prompt": True}
    vllm = load_stack("vllm")
    env = server_env(vllm, vllm_config(ModelRef(name="q", path="/c/q-hf")), bind_host="h", port=1)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # /reset_prefix_cache exists only in dev mode
    assert {name: load_stack(name).prompt_cache.policy for name in stack_names()} == {
        "llamacpp": "clear_per_seed",
        "vllm": "clear_per_seed",
        "sglang": "clear_per_seed",
        "ollama": "clear_per_seed",
        "openai": "unmanaged",
    }


def test_llamacpp_records_its_own_sampler_defaults() -> None:
    probes = [(p.path, p.field) for p in load_stack("llamacpp").capabilities]
    assert ("/props", "default_generation_settings") in probes


@pytest.mark.server
def test_docker_gpu_launch_requests_the_stacks_gpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    from orchestrator.serving.dockerhandle import DockerHandle

    # No GPU engine here: a stand-in for the Docker SDK's client (images.get -> an image with id and RepoDigests,
    # containers.run -> records its keyword arguments), so the DeviceRequest the launcher builds can be read.
    runs: list[dict] = []
    image = SimpleNamespace(id="sha256:abc", attrs={"RepoDigests": []})
    fake = SimpleNamespace(
        images=SimpleNamespace(get=lambda _ref: image),
        containers=SimpleNamespace(run=lambda _image, **kwargs: runs.append(kwargs)),
    )
    monkeypatch.setattr(docker, "from_env", lambda: fake)
    spec = load_stack("vllm")
    gpu = vllm_config(ModelRef(name="q", path="/cache/q-hf"), host="gpu").model_copy(update={"launcher": "docker"})
    DockerHandle(spec, gpu, run_id="t")
    (request,) = runs[-1]["device_requests"]
    assert request["Count"] == spec.launch.gpu_count == 1 and request["Capabilities"] == [["gpu"]]
    DockerHandle(spec, gpu.model_copy(update={"gpu_count": 2}), run_id="t")  # a matrix entry's `gpus: 2`
    assert runs[-1]["device_requests"][0]["Count"] == 2
    DockerHandle(spec, gpu.model_copy(update={"gpu_count": 2, "gpu_ids": ["3", "5"]}), run_id="t")  # Ray's GPUs
    (by_id,) = runs[-1]["device_requests"]
    assert by_id["DeviceIDs"] == ["3", "5"] and not by_id["Count"] and by_id["Capabilities"] == [["gpu"]]
    DockerHandle(spec, gpu.model_copy(update={"host": "cpu"}), run_id="t")
    assert runs[-1]["device_requests"] is None


def test_compose_reserves_the_stacks_gpu_count_not_all() -> None:
    for spec in compose.launchable_stacks():
        for service in compose.render(spec)["services"].values():
            (device,) = service["deploy"]["resources"]["reservations"]["devices"]
            assert device["count"] == spec.launch.gpu_count == 1
