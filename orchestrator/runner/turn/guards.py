"""The product channel's guards, as pure components: each takes what a turn produced and returns a GuardEvent.

The guards come from two field reports (seeds/001, seeds/004): re-prompt a turn that neither calls a tool nor
asks the user (stall), repair arguments from the tool's own schema (repair), hold back a call identical to
one already executed (dedup), discard a final answer written as JSON (final_json), and answer with a
deterministic tool's result instead of letting the model retell it (short_circuit). The agent loop decides
what to do with an event; nothing here does I/O. Every guard can be switched off (`active_guards`) so that an
ablation can measure what each one earns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema.protocols import Validator

from orchestrator.core.classify import validate_call
from orchestrator.core.replytext import is_question, is_refusal, is_small_talk, looks_like_json_answer
from orchestrator.core.toolschemas import linear_validator
from orchestrator.core.types import GuardEvent, ParsedCall, ToolExecution

GUARDS: tuple[str, ...] = ("stall", "repair", "dedup", "final_json", "short_circuit")
GUARDS_ENV = "TOOLCALL_MATRIX_GUARDS"

# The article's rule: do not name the next tool, or a turn that should show options is pushed to invent arguments.
STALL_REPROMPT = (
    "You have not finished the user's request: you neither used a tool nor asked the user anything. "
    "Continue the task now: use a tool if one can move it forward, or ask the user for the information "
    "that is missing."
)
DEDUP_NOTE = (
    "You just called this tool with the same arguments; its result is already above. "
    "Do not call it again: give the user your final answer now."
)
FINAL_JSON_RETRY = "Answer the user in one or two plain sentences, not JSON."

_SCALARS = (str, int, float, bool)
_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
# Deeper than this the repair leaves a value as it is: far beyond any real tool schema, and well inside the
# interpreter's recursion limit.
_MAX_REPAIR_DEPTH = 64


class GuardConfigError(ValueError):
    """A guard name that is not one of GUARDS, in the configuration or the environment."""


def _check_names(names: Sequence[str], source: str) -> None:
    unknown = [name for name in names if name not in GUARDS]
    if unknown:
        raise GuardConfigError(f"unknown guard {unknown[0]!r} in {source}; known guards: {', '.join(GUARDS)}")


def active_guards(configured: Mapping[str, bool], environ: Mapping[str, str]) -> frozenset[str]:
    """The guards that are on. `GUARDS_ENV`, when set (even empty: none on), names them ("stall,dedup") and
    wins over `configured`; otherwise a guard is on unless `configured` switches it off."""
    _check_names(list(configured), "the guard configuration")
    if GUARDS_ENV in environ:
        named = [name.strip() for name in environ[GUARDS_ENV].split(",") if name.strip()]
        _check_names(named, f"${GUARDS_ENV}")
        return frozenset(named)
    return frozenset(name for name in GUARDS if configured.get(name, True))


# --- dedup -----------------------------------------------------------------------------------------------


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def call_signature(call: ParsedCall) -> str:
    """The call's identity for dedup: its name and its arguments as canonical JSON (key order is irrelevant)."""
    return f"{call.name}|{_canonical(call.arguments)}"


def dedup_check(call: ParsedCall, executed_signatures: set[str]) -> GuardEvent:
    """Fired when an identical call was already executed in this case. The caller adds a call's signature to
    `executed_signatures` once it has executed it; this check only reads the set."""
    fired = call_signature(call) in executed_signatures
    return GuardEvent(guard="dedup", fired=fired, changed=fired, before=call.model_dump())


# --- repair ----------------------------------------------------------------------------------------------


def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALARS)


def _decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _enum_key(value: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", value.upper()).strip("_")


def match_enum(value: Any, enum: Sequence[Any]) -> Any:
    """The one enum value `value` names ("LLC" -> "ENTITY_TYPE_LLC"), or `value` itself when none or several do.

    A normalised exact match is preferred; otherwise the enum values that end in "_" + the normalised value.
    Only strings are matched: no type coercion.
    """
    if not isinstance(value, str) or value in enum or not _enum_key(value):
        return value
    key = _enum_key(value)
    names = [option for option in enum if isinstance(option, str)]
    exact = [option for option in names if _enum_key(option) == key]
    if len(exact) == 1:
        return exact[0]
    suffixed = [option for option in names if _enum_key(option).endswith("_" + key)]
    return suffixed[0] if len(exact) == 0 and len(suffixed) == 1 else value


@dataclass(frozen=True)
class _SchemaRepair:
    """Repairs values against sub-schemas of one root schema (whose "$ref"s resolve against the root).

    `validator` is core's linear-time one (`core.toolschemas`): the arguments are model output, so their
    patterns are matched by RE2, and "valid" here means exactly what it means to `validate_call`."""

    root: Mapping[str, Any]
    validator: Validator

    def valid(self, value: Any, schema: Any) -> bool:
        try:
            return bool(self.validator.evolve(schema=schema).is_valid(value))
        except Exception:  # a pathological schema: nothing validates against it, so nothing is repaired
            return False

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        """`schema` with local "$ref"s and a lone "allOf" (pydantic's wrapper) merged in; siblings win."""
        for _ in range(_MAX_REPAIR_DEPTH):
            ref = schema.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                target = self._pointer(ref[1:])
                if not isinstance(target, Mapping):
                    return schema
                schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
                continue
            all_of = schema.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
                schema = {**all_of[0], **{k: v for k, v in schema.items() if k != "allOf"}}
                continue
            return schema
        return schema

    def _pointer(self, pointer: str) -> Any:
        node: Any = self.root
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    def repair(self, value: Any, schema: Any, depth: int) -> Any:
        if depth > _MAX_REPAIR_DEPTH or not isinstance(schema, Mapping):
            return value
        schema = self.resolve(schema)
        if self.valid(value, schema):
            return value
        branches = _branches(schema)
        if branches:
            return self._repair_union(value, schema, branches, depth)
        kind = schema.get("type")
        if kind == "object" or (kind is None and "properties" in schema):
            return self._repair_object(value, schema, depth)
        if kind == "array":
            return self._repair_array(value, schema, depth)
        if kind in _SCALAR_TYPES or (kind is None and "enum" in schema):
            return self._repair_scalar(value, schema)
        return value

    def _repair_union(self, value: Any, schema: Mapping[str, Any], branches: list[Any], depth: int) -> Any:
        """The one repaired value some branch accepts (and the whole schema too); else `value` unchanged."""
        found: dict[str, Any] = {}
        for branch in branches:
            repaired = self.repair(value, branch, depth + 1)
            if self.valid(repaired, branch):
                found.setdefault(_canonical(repaired), repaired)
        if len(found) != 1:
            return value
        repaired = next(iter(found.values()))
        return repaired if self.valid(repaired, schema) else value

    def _repair_object(self, value: Any, schema: Mapping[str, Any], depth: int) -> Any:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        if isinstance(value, str) and isinstance(_decoded(value), dict):
            value = _decoded(value)
        if isinstance(value, dict):  # repair what the schema names; never add or drop a key
            return {
                key: self.repair(item, properties[key], depth + 1) if key in properties else item
                for key, item in value.items()
            }
        if _is_scalar(value) and len(properties) == 1:  # a flat value where the schema wants it wrapped
            ((name, inner),) = properties.items()
            wrapped = {name: self.repair(value, inner, depth + 1)}
            return wrapped if self.valid(wrapped, schema) else value
        return value

    def _repair_array(self, value: Any, schema: Mapping[str, Any], depth: int) -> Any:
        items = schema.get("items")
        if isinstance(value, str) and isinstance(_decoded(value), list):
            value = _decoded(value)
        if isinstance(value, list):
            return [self.repair(item, items, depth + 1) for item in value] if isinstance(items, Mapping) else value
        item = self.repair(value, items, depth + 1)
        return [item] if self.valid(item, items if items is not None else True) else value

    def _repair_scalar(self, value: Any, schema: Mapping[str, Any]) -> Any:
        if isinstance(value, dict) and len(value) == 1:  # a wrapped value where the schema wants it flat
            inner = next(iter(value.values()))
            if _is_scalar(inner):
                inner = self._repair_scalar(inner, schema)
                return inner if self.valid(inner, schema) else value
            return value
        enum = schema.get("enum")
        return match_enum(value, enum) if isinstance(enum, list) else value


def _branches(schema: Mapping[str, Any]) -> list[Any]:
    """The alternatives of a union schema (anyOf / oneOf, or a list of types), each with the shared keywords."""
    for keyword in ("anyOf", "oneOf"):
        options = schema.get(keyword)
        if isinstance(options, list) and options:
            shared = {k: v for k, v in schema.items() if k != keyword}
            return [{**shared, **option} if isinstance(option, Mapping) else option for option in options]
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return [{**schema, "type": option} for option in kind]
    return []


def repair_value(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """`value` repaired against `schema` (a part of `root`): only what the schema makes unambiguous changes."""
    validator = linear_validator(root)
    if validator is None:  # an unusable root schema (as `validate_call` judges it): nothing is repaired against it
        return value
    return _SchemaRepair(root, validator).repair(value, schema, 0)


def repair_call(call: ParsedCall, schemas: Mapping[str, Mapping[str, Any]]) -> tuple[ParsedCall, GuardEvent]:
    """The call with its arguments repaired from its tool's schema, and the repair guard's event.

    Fired: the tool is known and the arguments do not validate. Changed: the repaired arguments differ.
    """
    schema = schemas.get(call.name)
    if schema is None or not isinstance(call.arguments, dict) or validate_call(call, schemas) is None:
        return call, GuardEvent(guard="repair", fired=False, changed=False, before=call.arguments, after=call.arguments)
    repaired = repair_value(call.arguments, schema, schema)
    changed = _canonical(repaired) != _canonical(call.arguments)
    fixed = call.model_copy(update={"arguments": repaired}) if changed else call
    return fixed, GuardEvent(guard="repair", fired=True, changed=changed, before=call.arguments, after=repaired)


# --- stall, final_json -----------------------------------------------------------------------------------


def stall_check(reply: str | None, *, user_request: str, tool_results_seen: int, last_call_refused: bool) -> GuardEvent:
    """Fired when a turn without a tool call also asks the user nothing and is none of the reasonable ends:
    a question, a refusal, a summary after a tool result, small talk, or the reply to a refused call."""
    reasonable_end = (
        is_question(reply)
        or is_refusal(reply)
        or tool_results_seen > 0
        or is_small_talk(user_request)
        or last_call_refused
    )
    fired = not reasonable_end
    return GuardEvent(guard="stall", fired=fired, changed=fired, before=reply, after=STALL_REPROMPT if fired else None)


def final_json_check(reply: str | None) -> GuardEvent:
    """Fired when a final answer is JSON (or a call written as text): it is no answer for a person."""
    fired = looks_like_json_answer(reply)
    return GuardEvent(guard="final_json", fired=fired, changed=fired, before=reply)


# --- answers built from tool results ----------------------------------------------------------------------


def _as_text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else _canonical(value)


def _successful_results(results: Sequence[Any]) -> list[Any]:
    """The results that carry something: executions that were sent and did not fail, and plain results that
    are neither empty nor an error object."""
    kept: list[Any] = []
    for item in results:
        if isinstance(item, ToolExecution):
            if not item.sent or item.error:
                continue
            item = item.result
        if item is None or item == "" or (isinstance(item, Mapping) and "error" in item):
            continue
        kept.append(item)
    return kept


def fallback_answer(results: Sequence[Any]) -> str:
    """A plain-language answer from the tool results gathered (raw results or ToolExecutions), the last
    successful one first: objects as "key: value" pairs, anything else as text. "" when there are none."""
    lines = []
    for result in reversed(_successful_results(results)):
        if isinstance(result, Mapping):
            lines.append("; ".join(f"{key}: {_as_text(value)}" for key, value in result.items()))
        else:
            lines.append(_as_text(result))
    return "\n".join(line for line in lines if line)


def short_circuit_answer(result: Any) -> str:
    """The text a deterministic tool's result answers with: its "result" field, else the result itself."""
    if isinstance(result, str) and isinstance(_decoded(result), dict):
        result = _decoded(result)  # MCP text content that holds a JSON object
    if isinstance(result, Mapping) and "result" in result:
        return _as_text(result["result"])
    return _as_text(result)


def short_circuit_check(
    executions: Sequence[ToolExecution], deterministic: frozenset[str], observations_before: int
) -> GuardEvent:
    """Fired when this turn's only execution succeeded, is of a deterministic tool (hash, encoding), and is the
    case's only observation: its result is the answer, so the model never retells (and garbles) it."""
    only = executions[0] if len(executions) == 1 else None
    fired = (
        only is not None
        and only.sent
        and not only.error
        and only.call.name in deterministic
        and observations_before == 0
    )
    if not fired or only is None:
        return GuardEvent(guard="short_circuit", fired=False, changed=False)
    return GuardEvent(
        guard="short_circuit", fired=True, changed=True, before=only.result, after=short_circuit_answer(only.result)
    )


__all__ = [
    "DEDUP_NOTE",
    "FINAL_JSON_RETRY",
    "GUARDS",
    "GUARDS_ENV",
    "STALL_REPROMPT",
    "GuardConfigError",
    "active_guards",
    "call_signature",
    "dedup_check",
    "fallback_answer",
    "final_json_check",
    "match_enum",
    "repair_call",
    "repair_value",
    "short_circuit_answer",
    "short_circuit_check",
    "stall_check",
]
