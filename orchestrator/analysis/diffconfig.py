"""What changed between two cells' stack configs (`cells/<cell_id>.json`), for `orchestrate diff`.

Compared: the identity fields (IDENTITY_FIELDS, what makes two stack configs the same) plus what says which
build served them (image, digests, versions, config and template hashes, the server's defaults, the sampler
and decoding). Each record is first made portable the way `config_sha256` does it (`_portable`: the port of
its own base URL, its own binary and model paths), and a path under the model or binary directory gets the
same placeholder, so a different port or cache location is not a change.

A field missing from one file (an older cell written before the field existed) is not a change to null: it is
reported with status `absent_in_a` / `absent_in_b`; a field missing from both is skipped. An identity field
with a recorded default (IDENTITY_DEFAULTS, e.g. call_format "auto") reads as that default when missing, as
in the digest.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from orchestrator.runner.cellconfig import IDENTITY_DEFAULTS, IDENTITY_FIELDS, _portable

EXTRA_FIELDS: tuple[str, ...] = (
    "image",
    "image_repo_digests",
    "binary_version",
    "stack_version",
    "config_sha256",
    "chat_template_sha256",
    "server_defaults",
    "sampler",
    "decoding",
)
COMPARED_FIELDS: tuple[str, ...] = tuple(dict.fromkeys((*IDENTITY_FIELDS, *EXTRA_FIELDS)))
PATH_KEYS = ("model_path", "binary")


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
    """A field of a cell record with its port and local paths replaced by placeholders."""
    exact = _placeholders(record)
    return _under_paths(_portable(record.get(field), exact, _port(record)), exact)


def _present(record: dict[str, Any], field: str) -> bool:
    return field in record or field in IDENTITY_DEFAULTS


def argv_units(argv: list[Any] | None) -> list[str]:
    """An argv as flag units: `--flag value` (a flag followed by a non-flag), a lone `--flag`, or a positional
    word; so a changed value reads as one flag removed and one added, not as two loose words."""
    units: list[str] = []
    items = [str(item) for item in argv or []]
    index = 0
    while index < len(items):
        item = items[index]
        takes_value = item.startswith("-") and "=" not in item and index + 1 < len(items)
        if takes_value and not items[index + 1].startswith("-"):
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
    in_a, in_b = _present(record_a, field), _present(record_b, field)
    if not in_a and not in_b:
        return None
    before = portable(record_a, field) if field in record_a else IDENTITY_DEFAULTS.get(field)
    after = portable(record_b, field) if field in record_b else IDENTITY_DEFAULTS.get(field)
    if not in_a:
        return ConfigChange(field=field, before=None, after=after, status="absent_in_a")
    if not in_b:
        return ConfigChange(field=field, before=before, after=None, status="absent_in_b")
    return None if before == after else ConfigChange(field=field, before=before, after=after)


def compare_configs(record_a: dict[str, Any], record_b: dict[str, Any]) -> ConfigDiff:
    """The compared fields that differ between two cell records, and the argv flags added and removed."""
    changes = [c for field in COMPARED_FIELDS if (c := _change(field, record_a, record_b)) is not None]
    argv_changed = any(c.field == "argv" and c.status == "changed" for c in changes)
    added, removed = _flag_delta(portable(record_a, "argv"), portable(record_b, "argv")) if argv_changed else ([], [])
    return ConfigDiff(config_changes=changes, flags_added=added, flags_removed=removed)
