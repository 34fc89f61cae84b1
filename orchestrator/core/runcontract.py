"""The run directory's contract: what `results/<run_id>/` holds, one typed definition each, versioned.

- `manifest.json`: `RunManifest`;
- `cells/<cell_id>.json`: `CellFile` (written by runner/config/cellconfig.py `cell_config`, then completed by the
  sweep);
- `turns.jsonl`: `TurnRecord` (core/types.py), one a line; the lean readers of it are derived from it
  (core/turnfields.py).

Versions (`schema_version`, core/types.py `SCHEMA_VERSION`). A file written before the field existed is version 1.
Every file this code writes carries the current version: the manifest and cell files as a key of their own, and
every turn record too (`TurnRecord.schema_version` is a field with a default, so `model_dump_json` writes it: a
reader never has to guess a record's version from which keys it has, at ~20 bytes a line). Files already written
are never rewritten to a newer version: each older version has a reader (`READERS`) that brings what it wrote to
the current shape as it is read; a newer version than this code knows is one clear error naming the file.

The models validate what the readers rely on and keep every other key as it stands (`extra="allow"`): a run
written by a later minor change, or a key a command adds (`resumes`, `images`, `config_mismatch`, a cell's
`error`), reads unchanged. Pure data: no I/O here (runner/store/rundir.py reads the files).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.core.types import KNOWN_SCHEMA_VERSIONS, SCHEMA_VERSION

FIRST_VERSION = 1  # what a file without `schema_version` is
JsonObject = dict[str, Any]


class SchemaVersionError(ValueError):
    """A file of a schema version this code cannot read (the message names the file and the versions it reads)."""


class ContractError(ValueError):
    """A file that is not what the contract says (the message names the field)."""


def _same(data: JsonObject) -> JsonObject:
    """Version 1 to 2: version 2 only added fields (turn records' finish_reason, flags, seed_attempt, superseded,
    prompt_cache, sample, sampling_seed), each read as its default when absent; nothing was renamed or retyped."""
    return data


Reader = Callable[[JsonObject], JsonObject]
# Per older version: how its files are brought to the next version's shape (chained up to SCHEMA_VERSION). A
# version bump adds its reader here; the bulk turn readers take a version as it stands only when its reader is
# `_same` (runner/store/turnview.py), so a record that needs rewriting always goes through `upgraded`.
READERS: dict[int, Reader] = {1: _same}
if set(READERS) | {SCHEMA_VERSION} != KNOWN_SCHEMA_VERSIONS:  # a version bump without a reader for the old one
    raise RuntimeError(f"schema versions {sorted(KNOWN_SCHEMA_VERSIONS)}: readers for {sorted(READERS)} only")
VERSIONS_READ_AS_THEY_STAND: frozenset[int] = frozenset(
    version for version in KNOWN_SCHEMA_VERSIONS if READERS.get(version, _same) is _same
)


def schema_version(where: str, data: JsonObject) -> int:
    """The file's version (absent: 1), or SchemaVersionError naming `where` and the versions this code reads."""
    version = data.get("schema_version", FIRST_VERSION)
    if type(version) is not int or version not in KNOWN_SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in sorted(KNOWN_SCHEMA_VERSIONS))
        raise SchemaVersionError(
            f"{where}: schema version {version!r} is unknown to this orchestrator (it reads {known})"
        )
    return version


def upgraded(where: str, data: JsonObject) -> JsonObject:
    """`data` in the current version's shape: each older version's reader applied in turn (the object itself
    when every one of them keeps it as it is). A record a reader changed is labelled with the current version,
    so that a store rewriting what it read (marking records superseded) never writes a new shape under an old
    label, which the next read would upgrade a second time."""
    original = data
    for version in range(schema_version(where, data), SCHEMA_VERSION):
        data = READERS[version](data)
    return data if data is original else {**data, "schema_version": SCHEMA_VERSION}


class _Recorded(BaseModel):
    """A file of the run directory: the keys readers rely on, typed; any other key kept as written."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = FIRST_VERSION


class RunManifest(_Recorded):
    """manifest.json: what ran (the matrix as resolved, the code, packages and host) and when."""

    run_id: str | None = None  # absent in a hand-made manifest: the directory's name is the run's id
    matrix: JsonObject = Field(default_factory=dict)
    matrix_file: str | None = None
    matrix_sha256: str | None = None
    git: JsonObject | None = None
    provenance: JsonObject | None = None
    packages: JsonObject | None = None
    host: JsonObject | None = None
    guards: JsonObject | None = None  # the product channel's guards: {"active": [...], "env": ...}
    cases: JsonObject | None = None  # per scored suite: its core set and each case's expectation
    started: str | None = None
    finished: str | None = None
    wall_s: float | None = None
    resumes: list[JsonObject] | None = None
    images: JsonObject | None = None  # cli/images_command.py: the images resolved for the run
    ablation: JsonObject | None = None  # an ablation run: its parent and guards
    executor: JsonObject | None = None  # the executor (local or ray) the run last ran on
    config_mismatch: list[str] | None = None  # an ablation: its cells whose stack config differs from the parent's
    suites_snapshot: dict[str, str] | None = None  # <run>/seeds/: the suites' files as run, {file name: sha256}

    @property
    def channels(self) -> list[str]:
        """The matrix's channel axis (empty: the plain agent loop)."""
        return list(self.matrix.get("channels") or [])


class CellFile(_Recorded):
    """cells/<cell_id>.json: one cell's full stack config (what ran, what the server said, what was sent) and
    its state. Written whole at a cell's start (runner/config/cellconfig.py), completed by the sweep."""

    cell_id: str
    order: int | None = None
    status: str | None = None  # core/types.py CellStatus, or `damaged` for a report's stand-in
    stack_label: str | None = None
    stack: str | None = None
    tool_config: str | None = None
    tool_flags: list[Any] | None = None
    parser: str | None = None
    launcher: str | None = None
    host: str | None = None
    model: str | None = None
    tools_mode: str | None = None
    hint: bool | None = None
    call_format: str | None = None
    channel: str | None = None
    sample: int | None = None
    without: str | None = None
    stream: bool | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    suites: list[str] | None = None
    seeds: list[Any] | None = None
    guards: list[str] | None = None
    launches: list[Any] | None = None
    probe: JsonObject | None = None
    stack_version: str | None = None
    started: str | None = None
    finished: str | None = None
    error: Any = None
    log_tail: str | None = None  # launch_failed: the server's last log lines
    reproduce: str | None = None  # launch_failed: the command that failed, to run by hand (secrets redacted)
    node: JsonObject | None = None  # the Ray executor: the node that ran the cell (host facts, node id, IP)
    # What the server was and said (absent or null where a cell never launched).
    image: str | None = None
    image_id: str | None = None
    image_repo_digests: list[Any] | None = None
    binary: str | None = None
    binary_version: str | None = None
    argv: list[Any] | None = None
    env: JsonObject | None = None
    base_url: str | None = None
    capabilities: JsonObject | None = None
    chat_template_sha256: str | None = None
    chat_template_source: str | None = None
    canary: JsonObject | None = None
    canary_sha256: str | None = None
    sampling_defaults: JsonObject | None = None
    raw_template: JsonObject | None = None
    raw_template_sha256: str | None = None
    # The model as served.
    model_path: str | None = None
    model_digest: str | None = None
    model_identity: str | None = None
    model_converted_from: str | None = None
    quantization: str | None = None
    # What was sent.
    template_sha256: str | None = None
    tool_count: dict[str, int] | None = None
    tools_sha256: dict[str, str] | None = None
    tools: JsonObject | None = None
    decoding: JsonObject | None = None
    sampler: JsonObject | None = None
    prompt_cache_policy: JsonObject | None = None
    server_defaults: JsonObject | None = None
    turn_cap: int | None = None
    named_tool: str | None = None
    stream_fields: JsonObject | None = None
    stream_timeouts: JsonObject | None = None
    tool_server: JsonObject | None = None
    config_sha256: str | None = None
    timings: JsonObject | None = None


# Cell-file fields that say how a run of the cell went, not what its stack config is: a resumed cell keeps its
# first config and takes these anew.
RUN_STATE_FIELDS = frozenset(
    {"status", "started", "finished", "launches", "error", "log_tail", "reproduce", "timings", "node"}
)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "(file)"
    return f"field {where!r}: {error['msg']}"


def read_manifest(where: str, data: JsonObject) -> RunManifest:
    """A manifest's JSON object as the current version's `RunManifest` (SchemaVersionError, ContractError)."""
    try:
        return RunManifest.model_validate(upgraded(where, data))
    except ValidationError as exc:
        raise ContractError(f"{where}: not a run manifest ({_first_problem(exc)})") from exc


def check_cell(where: str, data: JsonObject) -> JsonObject:
    """A cell file's JSON object in the current version's shape, checked against `CellFile` (SchemaVersionError,
    ContractError); the object itself is returned: the report reads cells as the JSON they are."""
    data = upgraded(where, data)
    try:
        CellFile.model_validate(data)
    except ValidationError as exc:
        raise ContractError(f"{where}: not a cell file ({_first_problem(exc)})") from exc
    return data
