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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from orchestrator.core.gateexpr import parse_gate
from orchestrator.core.scoring import Expectation
from orchestrator.core.types import KNOWN_SCHEMA_VERSIONS, SCHEMA_VERSION, CellStatus, TurnRecord

FIRST_VERSION = 1  # what a file without `schema_version` is
JsonObject = dict[str, Any]
ImageStatus = Literal["resolved", "local_build", "unresolved"]  # serving/images.py: how an image was resolved


class SchemaVersionError(ValueError):
    """A file of a schema version this code cannot read (the message names the file and the versions it reads)."""


class ContractError(ValueError):
    """A file that is not what the contract says (the message names the field)."""


def _same(data: JsonObject) -> JsonObject:
    """Version 1 to 2 and 2 to 3 only added fields (2: turn records' finish_reason, flags, seed_attempt, superseded,
    prompt_cache, sample, sampling_seed; 3: turn records' bfcl, cells' category), each read as its default when
    absent; nothing was renamed or retyped."""
    return data


Reader = Callable[[JsonObject], JsonObject]
# Per older version: how its files are brought to the next version's shape (chained up to SCHEMA_VERSION). A
# version bump adds its reader here; the bulk turn readers take a version as it stands only when its reader is
# `_same` (runner/store/turnview.py), so a record that needs rewriting always goes through `upgraded`.
READERS: dict[int, Reader] = {1: _same, 2: _same}
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


class SuiteCases(BaseModel):
    """manifest `cases`, one scored suite: its core set and each case's expectation as the run started."""

    model_config = ConfigDict(extra="allow")

    core: list[str] = Field(default_factory=list)
    expect: dict[str, Expectation] = Field(default_factory=dict)


class RecordedGates(BaseModel):
    """The recorded matrix's product parts that `channels`, `gate` and `report` read: its channel axis and its
    gates, each an expression this code can read (core/gateexpr.py)."""

    model_config = ConfigDict(extra="allow")

    channels: list[str] | None = None
    gate: list[str] | None = None

    @field_validator("gate")
    @classmethod
    def _readable(cls, gates: list[str] | None) -> list[str] | None:
        for gate in gates or []:
            parse_gate(gate)  # GateError (a ValueError) names the expression
        return gates


class ImageEntry(BaseModel):
    """One image of manifest `images` (cli/images_command.py, from serving/images.py `ImageRecord`): what the
    next night's `--previous` and the printout read."""

    model_config = ConfigDict(extra="allow")

    stack: str
    host: str
    image: str
    status: ImageStatus
    reason: str | None = None
    tag: str | None = None
    identity: str | None = None
    changed: bool | None = None
    pinned_digest: str | None = None
    new_digest: str | None = None
    image_id: str | None = None
    old_digest: str | None = None
    old_source: str | None = None
    version_label: str | None = None
    release_notes: str | None = None


class ImagesRecord(BaseModel):
    """manifest `images`, and the file `orchestrate images --out` saves."""

    model_config = ConfigDict(extra="allow")

    entries: list[ImageEntry]
    resolved_at: str | None = None
    matrix_file: str | None = None
    refresh: bool = False


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
    cases: dict[str, SuiteCases] | None = None  # per scored suite: its core set and each case's expectation
    started: str | None = None
    finished: str | None = None
    wall_s: float | None = None
    resumes: list[JsonObject] | None = None
    images: ImagesRecord | None = None  # cli/images_command.py: the images resolved for the run
    ablation: JsonObject | None = None  # an ablation run: its parent and guards
    executor: JsonObject | None = None  # the executor (local or ray) the run last ran on
    config_mismatch: list[str] | None = None  # an ablation: its cells whose stack config differs from the parent's
    suites_snapshot: dict[str, str] | None = None  # <run>/seeds/: the suites' files as run, {file name: sha256}

    @property
    def channels(self) -> list[str]:
        """The matrix's channel axis (empty: the plain agent loop)."""
        return list(self.matrix.get("channels") or [])


CELL_STATUSES = (*(status.value for status in CellStatus), "damaged")  # storedamage.DAMAGED_STATUS


class CellFile(_Recorded):
    """cells/<cell_id>.json: one cell's full stack config (what ran, what the server said, what was sent) and
    its state. Written whole at a cell's start (runner/config/cellconfig.py), completed by the sweep."""

    cell_id: str
    order: int | None = None
    # core/types.py CellStatus, or `damaged` for a report's stand-in: every cell file says where its cell stands
    # (the report's status column and which seeds a complete cell must have ended: core/runrecords.py).
    status: Literal[tuple(CELL_STATUSES)]  # type: ignore[valid-type]  # the values, from the enum
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
    category: str | None = None  # a BFCL cell: its category (schema 3)
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


def _first_problem(exc: ValidationError, *within: str) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in (*within, *error["loc"])) or "(file)"
    return f"field {where!r}: {error['msg']}"


def read_manifest(where: str, data: JsonObject) -> RunManifest:
    """A manifest's JSON object as the current version's `RunManifest`, its recorded matrix's channels and gates
    checked too (SchemaVersionError, ContractError)."""
    try:
        manifest = RunManifest.model_validate(upgraded(where, data))
    except ValidationError as exc:
        raise ContractError(f"{where}: not a run manifest ({_first_problem(exc)})") from exc
    try:
        RecordedGates.model_validate(manifest.matrix)
    except ValidationError as exc:
        raise ContractError(f"{where}: not a run manifest ({_first_problem(exc, 'matrix')})") from exc
    return manifest


# A turn record's product-channel fields (core/types.py), checked on every record that holds one: the channel
# readers (core/scoring.py) walk them as the record types them.
PRODUCT_FIELDS = ("channel", "without", "executions", "guard_events", "prompted_by", "final_answer")
_ProductParts: type[BaseModel] = create_model(  # type: ignore[call-overload]  # fields built from the record's
    "ProductParts", **{name: (TurnRecord.model_fields[name].annotation, None) for name in PRODUCT_FIELDS}
)


def product_field_problems(record: JsonObject) -> list[str]:
    """The product-channel fields of a turn record that are not of the record's types (null: absent)."""
    present = {name: record[name] for name in PRODUCT_FIELDS if record.get(name) not in (None, [])}
    if not present:
        return []
    try:
        _ProductParts.model_validate(present)
    except ValidationError as exc:
        return sorted({str(error["loc"][0]) for error in exc.errors()})
    return []


def check_images(where: str, data: Any) -> JsonObject:
    """An images record (`orchestrate images`) checked against `ImagesRecord`, before it is written into a run
    (ContractError naming `where` and the field); the object itself is returned."""
    try:
        ImagesRecord.model_validate(data)
    except ValidationError as exc:
        raise ContractError(f"{where}: not an images record ({_first_problem(exc)})") from exc
    return data


def check_cell(where: str, data: JsonObject) -> JsonObject:
    """A cell file's JSON object in the current version's shape, checked against `CellFile` (SchemaVersionError,
    ContractError); the object itself is returned: the report reads cells as the JSON they are."""
    data = upgraded(where, data)
    try:
        CellFile.model_validate(data)
    except ValidationError as exc:
        raise ContractError(f"{where}: not a cell file ({_first_problem(exc)})") from exc
    return data
