"""Where a run's stacks and task suites come from, resolved once: the one module below the CLI that turns a
stack or suite *name* into its definition. Everything else carries the resolved objects (a matrix's entries
hold their `StackSpec` and `Suite`; the sweep, the cell config and the analysis take them from there).

- A new run resolves from the checkout (`stacks/`, `seeds/`), and keeps the exact bytes of every suite it
  read in its own snapshot (`<run>/seeds/`, beside the `<run>/stacks/` snapshot provenance keeps).
- A resume, a reclassify and every analysis command resolve from the run's snapshot. A run recorded before
  suites were snapshotted reads today's file only when its sha256 is the one the run recorded in its
  fingerprint (`provenance.seeds`), and a resume or an ablation copies it in then; otherwise the name is one
  clear error, never a silent other definition (`allow_drift`: today's file, read in place, never copied).
  A stack missing from the snapshot is read the same way (in place: the snapshot holds redacted copies), and
  for a run that recorded no fingerprint at all (made before provenance was kept) today's stack file is used.
- Resolution never starts an MCP server: a suite that takes its tools from one is listed when a run starts
  (`listed_suites`), where the run starts that server anyway.

`RunAssets` memoises: the first request for a name reads and validates its file, every later one returns the
same object, so an edit to `seeds/*.yaml` during a long run changes nothing the run records.
"""

from __future__ import annotations

import difflib
import hashlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import ValidationInfo

from orchestrator.core.bfcl import BFCL_SUITE, BfclCase
from orchestrator.core.redact import REDACTED
from orchestrator.runner.store.runpaths import owned_dir, write_bytes_atomic
from orchestrator.runner.suites.bfclcases import SNAPSHOT_DIR as BFCL_SNAPSHOT_DIR
from orchestrator.runner.suites.bfclcases import SNAPSHOT_FILE as BFCL_SNAPSHOT_FILE
from orchestrator.runner.suites.bfclcases import (
    bfcl_suite,
    check_categories,
    package_cases,
    provenance_record,
    select,
    snapshot_bytes,
    snapshot_cases,
)
from orchestrator.runner.suites.tasks import Suite, SuiteError, parse_suite, with_listed_tools
from orchestrator.serving.registry import (
    REPO_ROOT,
    InvalidStackError,
    UnknownStackError,
    parse_stack,
    plain_name_problem,
    stacks_dir,
)
from orchestrator.serving.stackspec import StackSpec
from orchestrator.serving.yamlfiles import YamlInputError, decode_text, parse_yaml, read_bytes_bounded

SUITES_SNAPSHOT = "seeds"  # <run>/seeds/<suite>.yaml: the suites a run used, byte for byte
STACKS_SNAPSHOT = "stacks"  # <run>/stacks/<stack>.yaml: kept by runner/run/provenance.py (secrets redacted)
CONTEXT_KEY = "assets"  # the pydantic validation context key a matrix's entries resolve through
ParsedT = TypeVar("ParsedT")


def seeds_dir() -> Path:
    """The checkout's task suites (a new run resolves from here)."""
    return REPO_ROOT / "seeds"


def load_suite(name: str, directory: Path | None = None) -> Suite:
    """One suite of the checkout (or of `directory`) as a run offers it (an MCP suite's tools listed): for scripts
    and tests; a run resolves its suites through `RunAssets` and carries them."""
    assets = RunAssets(stacks_dir(), directory or seeds_dir())
    suite = assets.suite(name)
    return with_listed_tools(suite, assets.seeds_dir / f"{name}.yaml")


class RunAssets:
    """Stacks and suites of one run, each read once from its source (the checkout or a run's snapshot)."""

    def __init__(
        self,
        stacks: Path,
        seeds: Path,
        *,
        run_dir: Path | None = None,
        recorded: Any = None,
        allow_drift: bool = False,
        launch: bool = False,
    ) -> None:
        self.stacks_dir = stacks
        self.seeds_dir = seeds
        self.launch = launch  # servers will be started from these stacks: a redacted snapshot will not do
        self.allow_drift = allow_drift  # a resume or ablation told to go on with today's files (drift recorded)
        self.run_dir = run_dir  # a recorded run: names missing from its snapshot are checked against `recorded`
        self.recorded: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
        self._stacks: dict[str, StackSpec] = {}
        self._suites: dict[str, Suite] = {}
        self._suite_bytes: dict[str, bytes] = {}
        self._bfcl: tuple[list[BfclCase], bytes] | None = None  # the run's BFCL cases and their snapshot bytes
        self._bfcl_key: tuple[tuple[str, ...], int | str | None] | None = None  # the selection they answer
        self._lock = threading.RLock()  # seeds of one cell resolve concurrently (runner/sweep/seedpool.py)

    def __eq__(self, other: object) -> bool:  # what was resolved, not where from (two validations agree)
        if not isinstance(other, RunAssets):
            return NotImplemented
        return (self._stacks, self._suites) == (other._stacks, other._suites)

    __hash__ = None  # type: ignore[assignment]  # mutable memo: equal by content, so never a dict key

    def __getstate__(self) -> dict[str, Any]:  # carried to Ray workers with the matrix: the lock stays here
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @classmethod
    def from_checkout(cls) -> RunAssets:
        return cls(stacks_dir(), seeds_dir())

    @classmethod
    def from_run(cls, run_dir: Path, provenance: Any, *, allow_drift: bool = False, launch: bool = False) -> RunAssets:
        """A recorded run's own definitions; `provenance` is its manifest's fingerprint (sha256 per file).
        `allow_drift` (a resume or an ablation that was told to go on, and records the drift): a name the
        snapshot lacks is today's file even when it differs from the recorded one. `launch` (a resume, an
        ablation: servers start from these stacks): a stack whose snapshot had a secret redacted is today's file,
        only when it is byte for byte the one the run recorded."""
        return cls(
            run_dir / STACKS_SNAPSHOT,
            run_dir / SUITES_SNAPSHOT,
            run_dir=run_dir,
            recorded=provenance,
            allow_drift=allow_drift,
            launch=launch,
        )

    def stack(self, name: str) -> StackSpec:
        _check_plain(name, "stack", UnknownStackError)
        with self._lock:
            if name not in self._stacks:
                path = self.stacks_dir / f"{name}.yaml"
                self._stacks[name] = _parsed(self._stack_bytes(name), path, parse_stack)
            return self._stacks[name]

    def suite(self, name: str) -> Suite:
        """The suite as its file says (an MCP suite's tools not listed: see `listed_suites`)."""
        _check_plain(name, "task suite", SuiteError)
        with self._lock:
            if name not in self._suites:
                raw = self._file_bytes("seeds", self.seeds_dir, name, SuiteError, "task suite")
                self._suites[name] = _parsed(raw, self.seeds_dir / f"{name}.yaml", _parse_suite_file)
                self._suite_bytes[name] = raw
            return self._suites[name]

    @property
    def suites(self) -> Mapping[str, Suite]:
        return dict(self._suites)

    def bfcl_suite(self, categories: tuple[str, ...], count: int | str | None) -> Suite:
        """The BFCL cases a task entry selects (runner/suites/bfclcases.py): from the pinned package for a new
        run, from the run's own snapshot (sha256-checked against its manifest) for a recorded one."""
        check_categories(categories)
        with self._lock:
            if self._bfcl_key not in (None, (categories, count)):  # one BFCL selection per run (one task entry)
                raise SuiteError(f"bfcl: resolved for {self._bfcl_key} already, not for {(categories, count)}")
            if BFCL_SUITE not in self._suites:
                source = snapshot_cases(self.run_dir, self.recorded) if self.run_dir is not None else None
                cases = [
                    case
                    for category in categories
                    for case in select(
                        [c for c in source if c.category == category]
                        if source is not None
                        else package_cases(category),
                        count,
                    )
                ]
                if not cases:
                    raise SuiteError(f"bfcl: categories {list(categories)} select no case")
                self._bfcl, self._bfcl_key = (cases, snapshot_bytes(cases)), (categories, count)
                self._suites[BFCL_SUITE] = bfcl_suite(cases)
            return self._suites[BFCL_SUITE]

    def snapshot_bfcl(self, run_dir: Path) -> dict[str, Any] | None:
        """Write the BFCL cases resolved (if any) into `<run>/bfcl/`; what the manifest records of them."""
        if self._bfcl is None:
            return None
        cases, raw = self._bfcl
        target = run_dir / BFCL_SNAPSHOT_DIR
        target.mkdir(exist_ok=True)
        (target / BFCL_SNAPSHOT_FILE).write_bytes(raw)
        return provenance_record(cases, raw)

    def snapshot_suites(self, run_dir: Path) -> dict[str, str]:
        """Write every suite resolved so far into `<run>/seeds/`, byte for byte; {file name: sha256}."""
        target = run_dir / SUITES_SNAPSHOT
        target.mkdir(exist_ok=True)
        digests = {}
        for name, raw in sorted(self._suite_bytes.items()):
            (target / f"{name}.yaml").write_bytes(raw)
            digests[f"{name}.yaml"] = hashlib.sha256(raw).hexdigest()
        return digests

    def _stack_bytes(self, name: str) -> bytes:
        raw = self._file_bytes("stacks", self.stacks_dir, name, UnknownStackError, "stack")
        if not (self.launch and self.run_dir is not None and REDACTED.encode() in raw):
            return raw
        today = stacks_dir() / f"{name}.yaml"  # the unredacted original, if it is still the recorded file
        expected = (self.recorded.get("stacks") or {}).get(f"{name}.yaml")
        if today.is_file() and expected and hashlib.sha256(today.read_bytes()).hexdigest() == expected:
            return read_bytes_bounded(today)
        raise InvalidStackError(
            f"{self.stacks_dir / name}.yaml: the run's snapshot had a secret redacted and today's stacks/{name}.yaml "
            "is not the file the run recorded: a server cannot be started from it"
        )

    def _file_bytes(self, kind: str, directory: Path, name: str, missing: type[Exception], what: str) -> bytes:
        path = directory / f"{name}.yaml"
        if not path.is_file() and self.run_dir is not None:
            path = self._recorded_file(kind, directory, name) or path
        if not path.is_file():
            why = (
                f"; the run kept no copy of it and today's {kind}/{name}.yaml is not the file it recorded (sha256)"
                if self.run_dir is not None
                else ""
            )
            raise missing(_unknown(what, name, directory) + why)
        invalid = SuiteError if kind == "seeds" else InvalidStackError
        if not path.resolve().is_relative_to(path.parent.resolve()):  # a link out of its directory: read nowhere
            raise invalid(f"{path}: a link to a file outside {path.parent}: a {what} is read from its directory only")
        try:
            return read_bytes_bounded(path)
        except YamlInputError as exc:
            raise invalid(str(exc)) from None

    def _recorded_file(self, kind: str, directory: Path, name: str) -> Path | None:
        """A name the run's snapshot lacks (a run recorded before suites were snapshotted): today's file only
        when it is the one the run recorded (same sha256); a writer of the run (a resume, an ablation: `launch`)
        then copies a suite into the snapshot, a reader (every analysis command) reads it in place, and a file
        that differs (`allow_drift`) is read in place and never copied in. A stack is
        read in place (the snapshot holds redacted copies; a raw one could carry a secret), and for a run that
        recorded no fingerprint at all (made before provenance was kept) today's stack is the only one there is.
        """
        today = (seeds_dir() if kind == "seeds" else stacks_dir()) / f"{name}.yaml"
        if not today.is_file():
            return None
        if kind == "stacks" and not self.recorded:
            return today
        expected = (self.recorded.get(kind) or {}).get(f"{name}.yaml")
        raw = today.read_bytes()
        recorded = bool(expected) and hashlib.sha256(raw).hexdigest() == expected
        if not recorded and not self.allow_drift:
            return None
        if kind == "stacks" or not recorded or not self.launch:
            return today  # read in place: drift stays visible, and a reader never writes into a recorded run
        run_dir = self.run_dir or directory.parent
        owned_dir(run_dir, directory)  # a resume or an ablation (a writer) keeps the recorded file, inside the run
        write_bytes_atomic(directory / today.name, raw, run_dir=run_dir)
        return directory / today.name


def _check_plain(name: str, what: str, error: type[Exception]) -> None:
    """A name from a matrix, an exchange or a record names a file of the directory resolved from, never a path
    (`/`, `..`, an absolute path would read a definition from anywhere on disk)."""
    problem = plain_name_problem(name, what)
    if problem is not None:
        raise error(problem)


def _parse_suite_file(raw: bytes, path: Path) -> Suite:
    try:
        data = parse_yaml(decode_text(raw, path), path)[1]
    except YamlInputError as exc:
        raise SuiteError(str(exc)) from None
    return parse_suite(data, path)


# A definition file's bytes -> what they parse to, once per process: the objects are frozen, and the key is the
# exact content (and the path its errors would name), so an edited file is parsed anew. Validating many matrices
# (a test's hypothesis examples, `validate` of several files) then reads every file but parses each content once.
_PARSED: dict[tuple[str, str], Any] = {}
_PARSED_LOCK = threading.Lock()


def _parsed(raw: bytes, path: Path, parse: Callable[[bytes, Path], ParsedT]) -> ParsedT:
    key = (hashlib.sha256(raw).hexdigest(), str(path))
    with _PARSED_LOCK:
        if key in _PARSED:
            return cast(ParsedT, _PARSED[key])
    value = parse(raw, path)  # a file that does not parse raises, and is never kept
    with _PARSED_LOCK:
        return cast(ParsedT, _PARSED.setdefault(key, value))


def _unknown(what: str, name: str, directory: Path) -> str:
    known = sorted(path.stem for path in directory.glob("*.yaml"))
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close and what == "stack" else ""
    return f"unknown {what} {name!r} (known: {', '.join(known)}){hint}"


def assets_in(info: ValidationInfo) -> RunAssets:
    """The assets a matrix is validated against: the caller's (a run's), else the checkout's. A matrix built
    without a context (a test, a one-off) resolves from the checkout, as a new run does."""
    context = info.context if isinstance(info.context, dict) else {}
    assets = context.get(CONTEXT_KEY)
    if isinstance(assets, RunAssets):
        return assets
    assets = RunAssets.from_checkout()
    if isinstance(info.context, dict):  # one resolution for every entry of this validation
        info.context[CONTEXT_KEY] = assets
    return assets


def validation_context(assets: RunAssets) -> dict[str, Any]:
    return {CONTEXT_KEY: assets}


def context_or_checkout(context: Any) -> Any:
    """The caller's validation context; none given: one checkout resolution shared by the whole validation
    (every entry of one matrix sees the same definitions, each read once)."""
    return context if context is not None else validation_context(RunAssets.from_checkout())


def listed_suites(suites: Mapping[str, Suite]) -> dict[str, Suite]:
    """The suites with their MCP servers' tools listed: what a run offers the model. Starts each such server
    (once per process): call it where the run starts, never while validating."""
    return {name: with_listed_tools(suite, Path(SUITES_SNAPSHOT) / f"{name}.yaml") for name, suite in suites.items()}
