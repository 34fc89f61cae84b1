"""The fast tier's guard (tests/processguard.py) fires: these tests are themselves unmarked, so each forbidden call
below really goes through the installed audit hook and is stopped before any process starts or socket binds; each
test then takes back what the guard recorded of it (or it would fail this test) and checks that it was recorded."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Generator
from typing import Any, Literal

import pytest

from tests.conftest import GUARD
from tests.processguard import GuardState, ProcessGuardPlugin, UnmarkedProcessStart, describe_event


def forbidden(action: Callable[[], object]) -> list[str]:
    """Run `action` in this unmarked test: the guard must stop it; what the guard recorded, taken back."""
    with pytest.raises(UnmarkedProcessStart):
        action()
    return GUARD.take()


def test_a_subprocess_is_stopped_before_it_starts_and_named(tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    did = forbidden(lambda: subprocess.run(["touch", str(marker)], check=True))
    assert did == [f"started a subprocess: touch {marker}"]
    assert not marker.exists()  # stopped before the fork, not reported after


def test_os_system_fork_and_multiprocessing_are_stopped(tmp_path: Any) -> None:
    assert forbidden(lambda: os.system("true")) == ["ran os.system: true"]
    # were the guard broken, the child would leave at once instead of running the rest of the suite
    assert forbidden(lambda: os.fork() == 0 and os._exit(0)) == ["forked (os.fork)"]
    # spawn starts its child in C with no audit event of its own: the guard's wrapper raises one
    spawned = forbidden(lambda: multiprocessing.get_context("spawn").Process(target=print).start())
    assert len(spawned) == 1 and spawned[0].startswith("started a multiprocessing process: ")


def test_a_bound_socket_is_stopped_and_a_client_socket_is_not() -> None:
    with socket.socket() as server:
        assert forbidden(lambda: server.bind(("127.0.0.1", 0))) == [
            "bound a socket to ('127.0.0.1', 0) (a listening server)"
        ]
        assert server.getsockname()[1] == 0  # never bound
    # a client that connects out is allowed (nobody listens on port 9 here: refused, not stopped)
    with socket.socket() as client, pytest.raises(ConnectionRefusedError):
        client.connect(("127.0.0.1", 9))
    assert GUARD.take() == []


def test_the_decision_names_only_process_and_listening_events() -> None:
    popen = describe_event("subprocess.Popen", (None, ["git", "status"], None, None))
    assert popen == "started a subprocess: git status"
    assert describe_event("os.exec", ("/bin/sh", ["sh", "-c", "x"], {})) == "ran os.exec*: sh -c x"
    assert describe_event("socket.bind", (object(), ("::1", 0))) == "bound a socket to ('::1', 0) (a listening server)"
    for harmless in ("socket.connect", "open", "os.listdir", "socket.getaddrinfo", "import"):
        assert describe_event(harmless, ("x", "y")) is None


def test_a_slow_test_may_start_what_it_likes_and_nothing_is_watched_between_tests() -> None:
    state = GuardState()
    assert state.observe("os.system", ("true",)) is None  # not watching: collection, session teardown
    with state.watch(allowed=True):
        assert state.observe("os.system", ("true",)) is None
    with state.watch(allowed=False):
        assert state.observe("os.system", ("true",)) == "ran os.system: true"
    assert state.take() == ["ran os.system: true"] and state.take() == []


def test_a_thread_left_by_an_earlier_test_is_not_this_tests_doing() -> None:
    """A server thread an earlier (slow) test left running may start something while this test runs: not counted.
    A thread this test starts is."""
    state = GuardState()
    go, seen = threading.Event(), []

    def later_in_a_thread() -> None:
        go.wait(30)
        seen.append(state.observe("os.system", ("true",)))

    earlier = threading.Thread(target=later_in_a_thread, daemon=True)
    earlier.start()
    state.begin_test()
    mine = threading.Thread(target=later_in_a_thread, daemon=True)
    with state.watch(allowed=False):
        mine.start()
        go.set()
        earlier.join(30)
        mine.join(30)
    assert sorted(seen, key=str) == [None, "ran os.system: true"]  # the earlier thread: None
    assert state.take() == ["ran os.system: true"]


def test_a_fixture_that_started_a_server_holds_every_test_that_uses_it() -> None:
    state = GuardState()
    with state.watch(allowed=True), state.in_fixture("replay"):  # set up by a slow test: allowed, but remembered
        state.observe("socket.bind", (object(), ("127.0.0.1", 0)))
    assert state.take() == []
    assert state.fixtures_that_started(["tmp_path", "replay"]) == {
        "replay": "bound a socket to ('127.0.0.1', 0) (a listening server)"
    }


def report_after(
    plugin: ProcessGuardPlugin, item: pytest.Item, when: Literal["setup", "call", "teardown"]
) -> pytest.TestReport:
    """Drive the plugin's makereport wrapper with a passing report of `item`, as pytest does."""
    call = pytest.CallInfo.from_call(lambda: None, when=when)
    passed = pytest.TestReport(item.nodeid, item.location, {}, "passed", None, when)
    wrapper: Generator[None, pytest.TestReport, pytest.TestReport] = plugin.pytest_runtest_makereport(item, call)
    next(wrapper)
    with pytest.raises(StopIteration) as done:
        wrapper.send(passed)
    report: pytest.TestReport = done.value.value
    return report


def test_an_unmarked_test_that_started_a_process_is_reported_failed_naming_both(request: pytest.FixtureRequest) -> None:
    state = GuardState()
    plugin = ProcessGuardPlugin(state)
    with state.watch(allowed=False):
        state.observe("subprocess.Popen", (None, ["bash", "scripts/nightly.sh"], None, None))
    report = report_after(plugin, request.node, "call")
    assert report.failed
    assert report.longreprtext.startswith(f"{request.node.nodeid} is not marked slow but:\n")
    assert "  - started a subprocess: bash scripts/nightly.sh" in report.longreprtext
    assert report_after(plugin, request.node, "teardown").passed  # taken once: the next phase starts clean


def test_an_unmarked_test_using_a_fixture_that_started_a_server_is_reported_failed(
    request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    state = GuardState(starting_fixtures={"tmp_path": "started a subprocess: replay"})
    report = report_after(ProcessGuardPlugin(state), request.node, "setup")
    assert report.failed and "uses fixture 'tmp_path', which started a subprocess: replay" in report.longreprtext


@pytest.mark.server
def marked_as_a_server() -> None:
    """Not a test (no test_ prefix): an item is made of it below to see the finer marker imply slow."""


def marked_plain() -> None:
    """Not a test: an item without markers."""


@pytest.mark.parametrize(("function", "slow"), [(marked_as_a_server, True), (marked_plain, False)])
def test_a_finer_marker_implies_slow(request: pytest.FixtureRequest, function: Callable[[], None], slow: bool) -> None:
    item = pytest.Function.from_parent(request.node.parent, name=function.__name__, callobj=function)
    ProcessGuardPlugin(GuardState()).pytest_itemcollected(item)
    assert (item.get_closest_marker("slow") is not None) is slow
