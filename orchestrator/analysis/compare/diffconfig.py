"""What changed between two cells' stack configs (`cells/<cell_id>.json`), for `orchestrate diff`.

Compared: the identity fields (IDENTITY_FIELDS, what makes two stack configs the same) plus what says which
build served them (image, digests, versions, config and template hashes, the server's defaults, the sampler
and decoding). Each record is first made portable the way `config_sha256` does it (`_portable`: the port of
its own base URL, its own binary and model paths), and a path under the model or binary directory gets the
same placeholder, so a different port or cache location is not a change.

A field missing from one file (an older cell written before the field existed) is not a change to null: it is
reported with status `absent_in_a` / `absent_in_b`, never `changed`; a field missing from both is skipped. Only
a key both files have can be `changed`: a chat_template_sha256 (or canary) that is None in an old file that has
the key and a string in a new one changed; one the old file lacks is `absent_in_a`. An identity field with a
recorded default (IDENTITY_DEFAULTS, e.g. call_format "auto") that is missing on one side and at that default
on the other is no difference (the digest reads the two alike), and is not reported.

The canary (the server's rendering of a fixed conversation) is two fields, each compared and reported by its
sha256 alone: `canary`, the conversation with tools (`canary.sha256`, else an older file's top-level
`canary_sha256`), and `canary_plain`, the same conversation without tools (`canary.plain.sha256`; a file
written before it existed lacks it: absent, never changed). The prompt text is long and says nothing the hash
does not (the cell files hold the text), and `canary_sha256` would only repeat `canary`.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from orchestrator.core.cell import slug
from orchestrator.runner.config.cellconfig import IDENTITY_DEFAULTS, IDENTITY_FIELDS, _portable

EXTRA_FIELDS: tuple[str, ...] = (
    "image",
    "image_repo_digests",
    "binary_version",
    "stack_version",
    "config_sha256",
    "chat_template_sha256",
    "server_defaults",
    "sampling_defaults",
    "canary",
    "canary_plain",
    "raw_template_sha256",
    "sampler",
    "decoding",
)
CANARY_KEYS = ("canary", "canary_sha256")  # a file has the canary when it has either; `canary` reports both
CANARY_FIELDS = ("canary", "canary_plain")  # compared by sha256: with tools, and without (canary.plain)
COMPARED_FIELDS: tuple[str, ...] = tuple(
    field for field in dict.fromkeys((*IDENTITY_FIELDS, *EXTRA_FIELDS)) if field != "canary_sha256"
)
PATH_KEYS = ("model_path", "binary")
# A token that reads as a number is a flag's value, never a flag: `--temp -1` is one unit.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


class ConfigChange(BaseModel):
    field: str
    before: Any
    after: Any
    status: Literal["changed", "absent_in_a", "absent_in_b"] = "changed"


class ConfigDiff(BaseModel):
    config_changes: list[ConfigChange]
    flags_added: list[str]
    flags_removed: list[str]


def _port(record: dict[str, Any]) -> str | None:
    base_url = record.get("base_url") or ""
    return base_url.rsplit(":", 1)[-1] if base_url.count(":") >= 2 else None


def _placeholders(record: dict[str, Any]) -> dict[str, str]:
    """This machine's paths (model files, binary) -> a placeholder, as `config_sha256` names them."""
    return {
        record[key]: "{" + key + "}/" + Path(record[key]).name for key in PATH_KEYS if isinstance(record.get(key), str)
    }


def _under_paths(value: Any, exact: dict[str, str]) -> Any:
    """Paths inside the model or binary directory (a generation_config.json) get the directory's placeholder."""
    if isinstance(value, str):
        for path, placeholder in exact.items():
            if value.startswith(path.rstrip("/") + "/"):
                return placeholder + value[len(path.rstrip("/")) :]
        return value
    if isinstance(value, list):
        return [_under_paths(item, exact) for item in value]
    if isinstance(value, dict):
        return {key: _under_paths(item, exact) for key, item in value.items()}
    return value


def portable(record: dict[str, Any], field: str) -> Any:
    """A field of a cell record with its port and local paths replaced by placeholders; a canary as its
    sha256 (None when the canary, or its rendering, is missing)."""
    if field in CANARY_FIELDS:
        return _canary_sha256(record, field)
    exact = _placeholders(record)
    return _under_paths(_portable(record.get(field), exact, _port(record)), exact)


def _canary_sha256(record: dict[str, Any], field: str) -> Any:
    """`canary`: canary.sha256 first, then an older file's top-level canary_sha256; `canary_plain`: the
    tool-less rendering's canary.plain.sha256."""
    canary = record.get("canary")
    if field == "canary_plain":
        plain = canary.get("plain") if isinstance(canary, dict) else None
        return plain.get("sha256") if isinstance(plain, dict) else None
    if isinstance(canary, dict) and canary.get("sha256") is not None:
        return canary["sha256"]
    return record.get("canary_sha256")


def _has(record: dict[str, Any], field: str) -> bool:
    if field == "canary":
        return any(key in record for key in CANARY_KEYS)
    if field == "canary_plain":
        canary = record.get("canary")
        return isinstance(canary, dict) and "plain" in canary
    return field in record


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _NUMBER.fullmatch(token)


def argv_units(argv: list[Any] | None) -> list[str]:
    """An argv as flag units: `--flag value` (a flag followed by a non-flag: a negative number such as `-1` is a
    value), a lone `--flag`, or a positional word; so a changed value reads as one flag removed and one added,
    not as two loose words."""
    units: list[str] = []
    items = [str(item) for item in argv or []]
    index = 0
    while index < len(items):
        item = items[index]
        takes_value = _is_flag(item) and "=" not in item and index + 1 < len(items)
        if takes_value and not _is_flag(items[index + 1]):
            units.append(f"{item} {items[index + 1]}")
            index += 2
            continue
        units.append(item)
        index += 1
    return units


def _flag_delta(before: Any, after: Any) -> tuple[list[str], list[str]]:
    """Flags added and removed (a multiset difference: a repeated flag counts each time)."""
    old = Counter(argv_units(before if isinstance(before, list) else None))
    new = Counter(argv_units(after if isinstance(after, list) else None))
    return list((new - old).elements()), list((old - new).elements())


def _change(field: str, record_a: dict[str, Any], record_b: dict[str, Any]) -> ConfigChange | None:
    """A field both files have is `changed` when its values differ; one only a side has is absent on the other,
    unless it is an identity field at its recorded default (the digest reads missing as that default)."""
    in_a, in_b = _has(record_a, field), _has(record_b, field)
    if not in_a and not in_b:
        return None
    before = portable(record_a, field) if in_a else None
    after = portable(record_b, field) if in_b else None
    if in_a and in_b:
        return None if before == after else ConfigChange(field=field, before=before, after=after)
    present = before if in_a else after
    if field in IDENTITY_DEFAULTS and present == IDENTITY_DEFAULTS[field]:
        return None
    return ConfigChange(field=field, before=before, after=after, status="absent_in_b" if in_a else "absent_in_a")


def compare_configs(record_a: dict[str, Any], record_b: dict[str, Any]) -> ConfigDiff:
    """The compared fields that differ between two cell records, and the argv flags added and removed."""
    changes = [c for field in COMPARED_FIELDS if (c := _change(field, record_a, record_b)) is not None]
    argv_changed = any(c.field == "argv" and c.status == "changed" for c in changes)
    added, removed = _flag_delta(portable(record_a, "argv"), portable(record_b, "argv")) if argv_changed else ([], [])
    return ConfigDiff(config_changes=changes, flags_added=added, flags_removed=removed)


def stack_label(cell: dict[str, Any]) -> str:
    """A cell record's stack config label (older files: the cell id's first part)."""
    return str(cell.get("stack_label") or str(cell["cell_id"]).split("__", 1)[0])


def within_key(cell: dict[str, Any]) -> str:
    """The cell's id without its stack config: model, mode and later axes, which pair cells across stacks."""
    prefix = slug(stack_label(cell)) + "__"
    cell_id = str(cell["cell_id"])
    return cell_id[len(prefix) :] if cell_id.startswith(prefix) else cell_id
