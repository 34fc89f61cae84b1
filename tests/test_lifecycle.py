"""Teardown: an interrupted start leaves nothing running; a server dying during the wait fails at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.serving.assets import cache_root
from orchestrator.serving.build import server_config
from orchestrator.serving.handle import LaunchError
from orchestrator.serving.launchers import cleanup, start_server
from orchestrator.serving.registry import load_stack
from orchestrator.serving.serverconfig import ModelRef
from tests.conftest import REPLAY_DIR


def process_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _main_thread_in(function: str) -> bool:
    """True while the main thread is executing `function` (its frame is on the main thread's stack)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


@pytest.mark.slow
def test_ctrl_c_during_readiness_wait_leaves_no_process(replay_env: dict[str, str], python_exe: str) -> None:
    # The SGLang replay keeps its port closed for 30 s: we are inside the readiness loop when interrupted. The
    # interrupt is sent once the main thread is observed polling (not after a fixed delay), as a real SIGINT with
    # Python's own handler installed (a pytest started with SIGINT ignored, e.g. `pytest &`, would drop it).
    run_id = f"test-interrupt-{os.getpid()}"
    config = server_config(
        spec=load_stack("sglang"), stack="sglang",
        tool_config=None,
        launcher="process",
        model="m",
        model_path="/m",
        python=python_exe,
        extra_env={**replay_env, "REPLAY_LOAD_S": "30", "TOOLCALL_TEST_RUN": run_id},  # marks this test's server
        ready_timeout_s=60,
    )
    polling = threading.Event()
    stop_watching = threading.Event()

    def interrupt_once_polling() -> None:
        deadline = time.monotonic() + 30
        while not stop_watching.is_set() and time.monotonic() < deadline:
            if _main_thread_in("wait_ready"):
                polling.set()
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    watcher = threading.Thread(target=interrupt_once_polling, daemon=True)
    handle = None
    try:
        watcher.start()
        with pytest.raises(KeyboardInterrupt):
            handle = start_server(config, run_id=run_id)
        assert polling.is_set(), "the interrupt must land inside the readiness wait"
        records = [p for p in cache_root().joinpath("pids").glob("*.json") if f'"{run_id}"' in _text_or_empty(p)]
        assert records == []  # gone with the process
        leftovers = [
            p
            for p in os.listdir("/proc")
            if p.isdigit()
            and "sglang.launch_server" in _cmdline(int(p))
            and "/m" in _cmdline(int(p))
            and run_id in _environ(int(p))
        ]
        assert leftovers == []
    finally:
        stop_watching.set()
        watcher.join(timeout=5)
        signal.signal(signal.SIGINT, previous)
        if handle is not None:  # the start returned: never leave its server running
            handle.stop()
        cleanup(run_id)  # whatever a failed assertion left: the run's recorded processes


def _environ(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _text_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # another run's record, removed while we looked
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow  # a real llama-server process
def test_server_dying_during_wait_fails_at_once_with_log_tail(llama_server_binary: str) -> None:
    config = server_config(
        spec=load_stack("llamacpp"), stack="llamacpp",
        tool_config="jinja",
        launcher="process",
        model="missing",
        model_path="/nonexistent/model.gguf",
        binary=llama_server_binary,
        ready_timeout_s=600,
    )
    config = config.model_copy(update={"model": ModelRef(name="missing", path="/nonexistent/model.gguf")})
    started = time.monotonic()
    with pytest.raises(LaunchError) as raised:
        start_server(config, run_id="test-dies")
    assert time.monotonic() - started < 60  # not the 600 s deadline: the dead process was noticed
    assert "server exited" in str(raised.value)
    assert "/nonexistent/model.gguf" in raised.value.log_tail  # llama-server's own complaint
    assert raised.value.command.startswith(llama_server_binary)


@pytest.mark.slow
def test_sigterm_during_docker_start_leaves_no_container(docker_client, llama_server_binary: str) -> None:
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "probe",
            "--stack",
            "llamacpp",
            "--launcher",
            "docker",
            "--network",
            "host",
            "--model",
            "qwen2.5-coder-0.5b-instruct",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Only this probe's container (its run id is probe-<pid>): other runs on the machine have their own. Listed
    # by the engine's list call alone: the SDK's list() inspects each container after listing, and the launcher
    # removing it in between was a NotFound error in the test, not a container left.
    label = {"label": ["toolcall-matrix.managed=true", f"toolcall-matrix.run-id=probe-{run.pid}"]}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not docker_client.api.containers(all=True, filters=label):
        time.sleep(0.05)
    assert docker_client.api.containers(all=True, filters=label), "the container never appeared"
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=60)
    assert run.returncode != 0
    assert docker_client.api.containers(all=True, filters=label) == []


@pytest.mark.slow
def test_an_interrupt_between_create_and_start_leaves_no_container(docker_client, monkeypatch) -> None:
    # SIGTERM can land after the engine created the container and before the SDK returned it: no handle exists
    # then, so the launcher must find the container by its labels. Replayed deterministically: create, then raise.
    from orchestrator.serving import dockerhandle

    def create_then_interrupt(self, image_ref, network_mode, ports, volumes, spec, config, gpu_request):
        self.client.containers.create(image_ref, command=["--version"], labels=self.labels, network_mode="host")
        raise SystemExit(143)

    monkeypatch.setattr(dockerhandle.DockerHandle, "_run_container", create_then_interrupt)
    config = server_config(
        spec=load_stack("llamacpp"), stack="llamacpp", tool_config="jinja", launcher="docker", model="m",
        model_path="/nonexistent/m.gguf",
    )
    config = config.model_copy(update={"network": "host"})
    label = {"label": ["toolcall-matrix.managed=true", "toolcall-matrix.run-id=test-create-interrupt"]}
    with pytest.raises(SystemExit):
        start_server(config, run_id="test-create-interrupt")
    assert docker_client.containers.list(all=True, filters=label) == []


@pytest.mark.slow
def test_cleanup_removes_what_a_sigkilled_run_left(docker_client, replay_env: dict[str, str]) -> None:
    # A run killed with SIGKILL cannot tear down: its server and PID record stay behind.
    script = (
        "from orchestrator.serving.build import server_config\n"
        "from orchestrator.serving.launchers import start_server\n"
        "from orchestrator.serving.registry import load_stack\n"
        "c = server_config(spec=load_stack('ollama'), stack='ollama', tool_config=None, launcher='process',"
        " model='phi3',"
        f" binary={str(REPLAY_DIR / 'ollama')!r}, ready_timeout_s=30)\n"
        "h = start_server(c, run_id='test-orphan')\n"
        "print(h.process.pid, flush=True)\n"
        "import time; time.sleep(300)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(run.stdout.readline())
    run.kill()
    run.wait()
    assert not process_gone(server_pid)
    record = json.loads((cache_root() / "pids" / f"{server_pid}.json").read_text())
    assert record["run_id"] == "test-orphan"
    removed = cleanup("test-orphan")
    assert any(str(server_pid) in line for line in removed)
    deadline = time.monotonic() + 10
    while not process_gone(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process_gone(server_pid)
