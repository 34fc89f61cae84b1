"""The guard that keeps the fast tier fast: a test not marked `slow` may not start a process or open a listening
socket. It watches the interpreter's audit events (sys.addaudithook), so it sees what the code under test does however
deeply it does it, and tells conftest which test did what; conftest turns that into a failure naming both.

What counts: starting a child process (subprocess.Popen, os.system, os.posix_spawn, os.fork/forkpty, os.exec*,
os.spawn*, pty.spawn, multiprocessing) and binding a socket (every listening server binds first). Clients that only
connect out are not counted: a test may check "nobody listens there" without being slow. Hence a container started
through the Docker SDK is not seen (the SDK connects out to the engine's socket; the engine starts the container):
such tests are marked by hand (`integration`)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

# Audit event -> what a failure message calls it. Names from the CPython audit events table.
PROCESS_EVENTS: dict[str, str] = {
    "subprocess.Popen": "started a subprocess",
    "os.system": "ran os.system",
    "os.posix_spawn": "ran os.posix_spawn",
    "os.posix_spawnp": "ran os.posix_spawnp",
    "os.spawn": "ran os.spawn*",
    "os.fork": "forked (os.fork)",
    "os.forkpty": "forked (os.forkpty)",
    "os.exec": "ran os.exec*",
    "pty.spawn": "ran pty.spawn",
    "os.startfile": "ran os.startfile",
    # Raised by the wrapper below: multiprocessing's spawn and forkserver start methods fork+exec in C with no event.
    "multiprocessing.spawnv_passfds": "started a multiprocessing process",
}
SOCKET_EVENTS: dict[str, str] = {"socket.bind": "bound a socket"}
SPAWN_EVENT = "multiprocessing.spawnv_passfds"


def describe_event(event: str, args: tuple[Any, ...]) -> str | None:
    """What a test did, in words, when the audit event is one the fast tier forbids; None for every other event."""
    if event in PROCESS_EVENTS:
        return f"{PROCESS_EVENTS[event]}: {_first_argument(args)}" if args else PROCESS_EVENTS[event]
    if event in SOCKET_EVENTS:
        address = args[1] if len(args) > 1 else "?"
        return f"{SOCKET_EVENTS[event]} to {address!r} (a listening server)"
    return None


def _first_argument(args: tuple[Any, ...]) -> str:
    """The command (or pid/path) an event carries, shortened: enough to find the line, not a wall of argv."""
    # subprocess.Popen, os.exec*, os.posix_spawn and spawnv_passfds carry argv second; the rest carry it first.
    second = args[1] if len(args) > 1 else None
    shown = second if isinstance(second, (list, tuple, str, bytes)) else args[0]
    if isinstance(shown, (list, tuple)):
        shown = " ".join(_text(part) for part in shown)
    text = _text(shown).replace("\n", "\\n")
    return text if len(text) <= 160 else text[:157] + "..."


def _text(value: Any) -> str:
    return os.fsdecode(value) if isinstance(value, bytes) else str(value)  # os.system hands over bytes


@dataclass
class GuardState:
    """Which test (and which fixture) runs now, whether it may start processes, and what it did.

    `watching` is off between tests (collection, session teardown): only what a test's own setup, call and
    teardown do is checked. Fixtures that started something are remembered by name, so a later test that reuses
    a session-scoped server it did not start itself is held to the same rule."""

    watching: bool = False
    allowed: bool = True
    did: list[str] = field(default_factory=list)
    fixture_stack: list[str] = field(default_factory=list)
    starting_fixtures: dict[str, str] = field(default_factory=dict)
    # Threads alive before this test began (a server thread an earlier slow test left running): what they start
    # is not this test's doing. The main thread is never in it.
    earlier_threads: set[threading.Thread] = field(default_factory=set)

    def begin_test(self) -> None:
        main = threading.main_thread()
        self.earlier_threads = {thread for thread in threading.enumerate() if thread is not main}

    def observe(self, event: str, args: tuple[Any, ...]) -> str | None:
        """Record a forbidden event seen while watching; returns its description (None when not recorded)."""
        if not self.watching:
            return None
        description = describe_event(event, args)
        if description is not None and threading.current_thread() in self.earlier_threads:
            return None
        if description is None:
            return None
        if self.fixture_stack:
            self.starting_fixtures.setdefault(self.fixture_stack[-1], description)
        if self.allowed:
            return None
        self.did.append(description)
        return description

    @contextmanager
    def watch(self, allowed: bool) -> Iterator[None]:
        """Watch one phase (setup, call or teardown) of one test."""
        self.watching, self.allowed = True, allowed
        try:
            yield
        finally:
            self.watching = False

    @contextmanager
    def in_fixture(self, name: str) -> Iterator[None]:
        self.fixture_stack.append(name)
        try:
            yield
        finally:
            self.fixture_stack.pop()

    def take(self) -> list[str]:
        """What the test did since the last take, cleared (so one test's deeds never fail the next)."""
        did, self.did = self.did, []
        return did

    def fixtures_that_started(self, fixture_names: list[str]) -> dict[str, str]:
        return {name: self.starting_fixtures[name] for name in fixture_names if name in self.starting_fixtures}


class UnmarkedProcessStart(BaseException):
    """Raised inside the forbidden call so the process or server never starts: a fast run stays fast even when a
    test is mismarked. A BaseException, so the code under test's `except Exception` cannot swallow it (the failure is
    also recorded, so a thread that dies of it still fails its test)."""


def failure_message(test_id: str, did: list[str], via_fixtures: dict[str, str]) -> str:
    lines = [f"{test_id} is not marked slow but:"]
    lines += [f"  - {what}" for what in dict.fromkeys(did)]
    lines += [f"  - uses fixture {name!r}, which {what}" for name, what in via_fixtures.items()]
    lines.append("Mark it @pytest.mark.slow (or a finer marker that implies it: see pyproject.toml), or make it pure.")
    return "\n".join(lines)


def install(state: GuardState) -> None:
    """Install the audit hook (for the life of the interpreter: audit hooks cannot be removed, so it consults the
    state) and make multiprocessing's C-level fork+exec raise an audit event like every other way to start one."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        description = state.observe(event, args)
        if description is not None:
            raise UnmarkedProcessStart(description)

    sys.addaudithook(hook)
    _audit_multiprocessing_spawns()


def _audit_multiprocessing_spawns() -> None:
    import multiprocessing.util as mp_util

    original: Callable[..., int] = mp_util.spawnv_passfds
    if getattr(original, "_audited", False):
        return

    def spawnv_passfds(path: str, args: list[str], passfds: Any) -> int:
        sys.audit(SPAWN_EVENT, path, args)
        return original(path, args, passfds)

    spawnv_passfds._audited = True  # type: ignore[attr-defined]  # marks the wrapper so a second install is a no-op
    mp_util.spawnv_passfds = spawnv_passfds


# A test marked with one of these starts a process too: each implies `slow`, so `-m "not slow"` leaves it out.
IMPLIES_SLOW = ("integration", "server", "browser", "ray")


class ProcessGuardPlugin:
    """The pytest side: finer markers imply `slow`; each phase of each test is watched; a test not marked slow that
    started a process, bound a socket or used a fixture that did, is reported failed with what it did."""

    def __init__(self, state: GuardState) -> None:
        self.state = state

    @pytest.hookimpl(tryfirst=True)
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if any(item.get_closest_marker(name) for name in IMPLIES_SLOW) and not item.get_closest_marker("slow"):
            item.add_marker("slow")

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
        with self.state.in_fixture(fixturedef.argname):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        self.state.begin_test()
        with self.state.watch(allowed=is_slow(item)):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        with self.state.watch(allowed=is_slow(item)):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        with self.state.watch(allowed=is_slow(item)):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report: pytest.TestReport = yield
        did = self.state.take()
        via = {} if is_slow(item) or call.when != "setup" else self.state.fixtures_that_started(fixture_names(item))
        via = {name: what for name, what in via.items() if what not in did}  # started in this very setup: said once
        if did or via:
            original = f"\n\n{report.longreprtext}" if report.failed else ""
            report.outcome = "failed"
            report.longrepr = failure_message(item.nodeid, did, via) + original
        return report


def is_slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None


def fixture_names(item: pytest.Item) -> list[str]:
    return list(getattr(item, "fixturenames", ()))
