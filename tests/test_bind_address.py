"""Servers listen on loopback only. Each launcher kind that runs here (llama.cpp as a process, llama.cpp in Docker
with host networking) is started for real and the listening TCP sockets of its own process are read from
/proc/<pid>/net/tcp{,6} joined with the socket inodes of /proc/<pid>/fd: every one is 127.0.0.1 or ::1. A matrix
has no bind-address field (`host` is cpu|gpu, `network` host|published, both loopback); an extra `--host
0.0.0.0` in extra_args is refused at launch with an error that says so, before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.serving.build import server_config
from orchestrator.serving.handle import LaunchError, pid_dir
from orchestrator.serving.launchers import running_server, start_server
from orchestrator.serving.registry import load_stack
from orchestrator.serving.serverconfig import ServerConfig, check_bind

SMOL = "smollm2-135m-instruct"
LISTEN = "0A"
LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc/net/tcp{,6} write them


def config(launcher: str, binary: str | None, extra_args: list[str] | None = None) -> ServerConfig:
    return server_config(
        spec=load_stack("llamacpp"), stack="llamacpp",
        tool_config="jinja",
        launcher=launcher,  # type: ignore[arg-type]
        model=SMOL,
        binary=binary,
        network="host",
        ctx=1024,
        extra_args=extra_args or [],
        ready_timeout_s=180,
        progress=lambda _m: None,
    )


def listening(pid: int) -> list[tuple[str, int]]:
    """(address hex, port) of every TCP socket in LISTEN state that process `pid` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == LISTEN and fields[9] in inodes:
                found.append((address, int(port, 16)))
    return found


@pytest.mark.integration
def test_process_server_listens_on_loopback_only(llama_server_binary: str) -> None:
    with running_server(config("process", llama_server_binary), run_id="test-bind") as handle:
        pid = handle.describe()["pid"]
        sockets = listening(pid)
        port = int(handle.base_url.rsplit(":", 1)[1])
    assert ("0100007F", port) in sockets, sockets
    assert {address for address, _ in sockets} <= LOOPBACK, sockets


@pytest.mark.integration
def test_docker_host_network_server_listens_on_loopback_only(docker_client, llama_server_binary: str) -> None:
    with running_server(config("docker", None), run_id="test-bind") as handle:
        described = handle.describe()
        container = docker_client.containers.get(described["container_id"])
        assert container.attrs["HostConfig"]["NetworkMode"] == "host"
        sockets = listening(int(container.attrs["State"]["Pid"]))
        port = int(handle.base_url.rsplit(":", 1)[1])
    assert ("0100007F", port) in sockets, sockets
    assert {address for address, _ in sockets} <= LOOPBACK, sockets


@pytest.mark.integration
def test_a_non_loopback_bind_in_extra_args_is_refused(llama_server_binary: str) -> None:
    before = set(pid_dir().glob("*.json")) if pid_dir().is_dir() else set()
    wide = config("process", llama_server_binary, ["--host", "0.0.0.0"])
    with pytest.raises(LaunchError, match=r"would listen on '0\.0\.0\.0'.*cannot bind a server beyond loopback"):
        start_server(wide, run_id="test-bind").stop()
    after = set(pid_dir().glob("*.json")) if pid_dir().is_dir() else set()
    assert after <= before, "a process was started"


def test_bind_check_forms() -> None:
    assert check_bind(["srv", "--host", "127.0.0.1", "--port", "1"]) == ["srv", "--host", "127.0.0.1", "--port", "1"]
    assert check_bind(["--host", "0.0.0.0"], "0.0.0.0") == ["--host", "0.0.0.0"]  # a container, published on loopback
    for argv in (["--host", "127.0.0.1", "--host", "0.0.0.0"], ["--host=::"], ["--bind", "192.168.1.2"]):
        with pytest.raises(ValueError, match="cannot bind a server beyond loopback"):
            check_bind(argv)
