"""Lean readers of turn records, derived from `TurnRecord` (core/types.py), the one definition of a record.

A reader that needs a few fields of a million records (the report, a notebook's turns table, `orchestrate
stats`) declares which fields it reads and how leniently (`Read`); its types are computed here from the record's
own annotations, so a field renamed or retyped in `TurnRecord` changes every reader with it (a name that is not a
record field is an error at import). Two forms are built from one declaration:
- `lean_typeddict`: a TypedDict for msgspec, which decodes a chunk of lines straight into dicts of those fields,
  scanning past the others;
- `lean_model`: the same fields as a strict pydantic model, for the line-by-line reader that names a bad line.

Lenient how: a lean reader reads records old and hand-made, not only the ones this code writes. A record's
counts (turn, seed_attempt, ...) are read as non-negative integers, its enums as their values exactly (or, with
`any_text`, as any text the report shows as it stands), a field `checked=False` as whatever the line holds.
"""

from __future__ import annotations

import enum
import functools
import operator
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec
from pydantic import BaseModel, ConfigDict, Field, create_model

from orchestrator.core.runcontract import VERSIONS_READ_AS_THEY_STAND
from orchestrator.core.types import TurnRecord

MAX_COUNT = 2**63 - 1  # a count past this is no count a run reaches (and no int64 a table holds)
# A count in a record: turn, seed_attempt, attempt, sample.
NonNegative = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
# The versions a lean reader takes as they stand; a record of another goes to the full reader, which upgrades it
# (core/runcontract.py READERS) or names its unknown version.
KnownVersion = Literal[tuple(sorted(VERSIONS_READ_AS_THEY_STAND))]  # type: ignore[valid-type]  # values from data
VERSION_FIELD = "schema_version"


@dataclass(frozen=True)
class Read:
    """How a lean reader takes one field of `TurnRecord` (its type is the record's, made lenient as said here)."""

    required: bool = False  # a line without it is no record
    checked: bool = True  # False: read as the line holds it (shown, never computed on)
    nullable: bool = True  # null admitted (read as absent); False: null is a wrong type. A required field never is
    any_text: bool = False  # an enum field read as any text (a value this code does not know is shown as it is)
    also: tuple[type, ...] = ()  # JSON types admitted beside the record's (stats: integer seeds of hand-made files)


Fields = Mapping[str, Read]


def _record_type(name: str) -> tuple[Any, bool]:
    """The record field's type without None, and whether the record admits None (KeyError: no such field)."""
    annotation = TurnRecord.model_fields[name].annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        nullable = len(members) < len(typing.get_args(annotation))
        return functools.reduce(operator.or_, members), nullable
    return annotation, False


def _lean_base(name: str, read: Read) -> Any:
    """The msgspec type a lean reader checks the field's value against (before `also` and None)."""
    if name == VERSION_FIELD:
        return KnownVersion
    base, _ = _record_type(name)
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return str if read.any_text else Literal[tuple(member.value for member in base)]
    if base in (str, bool):
        return base
    if base is int:
        return NonNegative
    if typing.get_origin(base) is list and typing.get_args(base) == (str,):
        return list[str]
    raise TypeError(f"TurnRecord.{name}: no lean reading of {base!r} is defined; read it with checked=False")


def _union(members: list[Any]) -> Any:
    return functools.reduce(operator.or_, members)


def lean_type(name: str, read: Read) -> Any:
    """The type one field is read as (NotRequired left to the caller)."""
    if name not in TurnRecord.model_fields:
        raise KeyError(f"{name!r} is not a TurnRecord field")
    if not read.checked:
        return Any
    members = [_lean_base(name, read), *read.also]
    return _union([*members, None] if _admits_null(read) else members)


def _admits_null(read: Read) -> bool:
    return read.nullable and not read.required


def lean_typeddict(name: str, fields: Fields) -> type:
    """A TypedDict of `fields`, each typed by `lean_type`, for msgspec to decode into."""
    annotations: dict[str, Any] = {}
    for field, read in fields.items():
        kind = lean_type(field, read)
        annotations[field] = kind if read.required else NotRequired[kind]
    return TypedDict(name, annotations)  # type: ignore[operator]  # the functional form, built from data


def _model_type(name: str, read: Read) -> tuple[Any, Any]:
    """(annotation, Field) of one field in the strict pydantic reader: what `lean_type` admits, the same way."""
    base, _ = _record_type(name)
    extra: dict[str, Any] = {}
    if name == VERSION_FIELD:  # as `_lean_base` reads it: another version goes to the full reader, or is refused
        base = KnownVersion
    elif isinstance(base, type) and issubclass(base, enum.Enum):
        base, extra = (str, {}) if read.any_text else (base, {"strict": False})  # a JSON value names the member
    elif base is int:
        extra = {"ge": 0, "le": MAX_COUNT}
    kind = _union([base, *read.also, *([None] if _admits_null(read) else [])])
    if read.required:
        return kind, Field(**extra)
    record_field = TurnRecord.model_fields[name]
    default = None if record_field.is_required() else record_field.get_default(call_default_factory=True)
    return kind, Field(default, **extra)


def lean_model(name: str, fields: Fields, doc: str) -> type[BaseModel]:
    """A pydantic model of `fields` (all checked), as strict as the TypedDict: no coercion (`"8"` is no turn,
    `1.0` no seed attempt, `Valid_Call` no outcome); a field absent takes the record's default (or None)."""
    if any(not read.checked for read in fields.values()):
        raise ValueError(f"{name}: a strict model reads checked fields only")
    definitions = {field: _model_type(field, read) for field, read in fields.items()}
    config = ConfigDict(extra="ignore", strict=True)
    # create_model's overloads want field definitions spelled out; these are built from the record's fields.
    model: type[BaseModel] = create_model(
        name,
        __config__=config,
        __doc__=doc,
        **definitions,  # type: ignore[call-overload]  # fields built from data
    )
    return model
