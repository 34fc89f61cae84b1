"""Values written as text: XML parameter values typed by the tool's schema, and Python literals.

XML-style formats (qwen3_xml, glm_xml, minimax) write every value as text. The offered tool's schema says
what it was meant to be (`integer`, `number`, `boolean`, `object`, `array`, `null`, `string`); without a
type (or without tools), a value that parses as JSON becomes that JSON value, anything else stays a string.
A value that does not convert to its declared type stays the string the model wrote, so the schema check
reports it instead of the parser hiding it.

Python literals (pythonic calls) are read by walking `ast` nodes: constants, lists, tuples, dicts, signed
numbers. Nothing is ever evaluated.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from orchestrator.core.callformats.base import BadJSON, loads, non_finite

_INTEGER = re.compile(r"[+-]?[0-9]+")
_STRING_TYPES = frozenset({"string", "str", "text", "char", "varchar", "enum"})
_NULL_WORDS = frozenset({"null", "none", "nil"})


def trim_newlines(value: str) -> str:
    """Drop the single newline the formats put after the opening and before the closing tag."""
    if value.startswith("\n"):
        value = value[1:]
    elif value.startswith("\r\n"):
        value = value[2:]
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    return value


def schema_types(schema: Mapping[str, Any] | None) -> set[str]:
    """The JSON types a parameter schema admits (`type`, a list of types, anyOf/oneOf, enum values)."""
    if not isinstance(schema, Mapping):
        return set()
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared.strip().lower())
    elif isinstance(declared, list):
        types.update(t.strip().lower() for t in declared if isinstance(t, str))
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options[:64]:
                types.update(schema_types(option) if isinstance(option, Mapping) else ())
    return types


def _json_or_none(text: str) -> tuple[bool, Any]:
    try:
        return True, loads(text)
    except BadJSON:
        return False, None


def _matches(value: Any, kind: str) -> bool:
    checks = {
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "null": lambda v: v is None,
    }
    check = checks.get(_canonical(kind))
    return bool(check and check(value))


def _canonical(kind: str) -> str:
    aliases = {"int": "integer", "float": "number", "bool": "boolean", "dict": "object", "list": "array"}
    return aliases.get(kind, kind)


def _convert(text: str, kind: str) -> tuple[bool, Any]:
    """`text` as one declared type, or (False, None) when it is not one."""
    kind = _canonical(kind)
    stripped = text.strip()
    if kind == "null":
        return (True, None) if stripped.lower() in _NULL_WORDS else (False, None)
    if kind == "boolean":
        lowered = stripped.lower()
        return (True, lowered == "true") if lowered in ("true", "false") else (False, None)
    if kind == "integer" and _INTEGER.fullmatch(stripped):
        try:
            return True, int(stripped)
        except ValueError:  # more digits than Python converts
            return False, None
    ok, value = _json_or_none(stripped)
    if ok and _matches(value, kind):
        return True, value
    if kind in ("object", "array"):
        value = python_literal_text(stripped)
        if value is not _NOT_LITERAL and _matches(value, kind):
            return True, value
    return False, None


def typed_value(text: str, schema: Mapping[str, Any] | None) -> Any:
    """An XML parameter's text as the value its schema declares (see the module docstring)."""
    types = schema_types(schema)
    non_null = [t for t in types if t != "null"]
    if "null" in types and text.strip().lower() in _NULL_WORDS:
        return None
    if any(t in _STRING_TYPES for t in non_null) and len(non_null) == 1:
        return text
    for kind in sorted(non_null, key=_preference):
        if kind in _STRING_TYPES:
            return text
        ok, value = _convert(text, kind)
        if ok:
            return value
    if types:
        return text  # declared, but not what was written: keep it for the schema check to report
    ok, value = _json_or_none(text)
    return value if ok else text


def _preference(kind: str) -> int:
    order = ("integer", "int", "number", "float", "boolean", "bool", "object", "array", "null")
    return order.index(kind) if kind in order else len(order)


class _NotLiteral:
    """Marker: the node is not a literal."""


_NOT_LITERAL: Any = _NotLiteral()


def python_literal(node: ast.AST) -> Any:
    """The value of a literal expression node, or _NOT_LITERAL. JSON-like names (true, false, null) count."""
    if isinstance(node, ast.Constant) and not isinstance(node.value, bytes | complex | type(...)):
        return _NOT_LITERAL if non_finite(node.value) else node.value  # 1e999: no JSON can write it
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = python_literal(node.operand)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
        return _NOT_LITERAL
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        items = [python_literal(item) for item in node.elts]
        return _NOT_LITERAL if any(item is _NOT_LITERAL for item in items) else items
    if isinstance(node, ast.Dict):
        return _literal_dict(node)
    return _NOT_LITERAL


def _literal_dict(node: ast.Dict) -> Any:
    result: dict[str, Any] = {}
    for key_node, value_node in zip(node.keys, node.values, strict=True):
        if key_node is None:  # **spread
            return _NOT_LITERAL
        key, value = python_literal(key_node), python_literal(value_node)
        if key is _NOT_LITERAL or value is _NOT_LITERAL or isinstance(key, list | dict):
            return _NOT_LITERAL
        result[key if isinstance(key, str) else json.dumps(key)] = value
    return result


def python_literal_text(text: str) -> Any:
    """A Python literal written as text (e.g. ``{'k': 'v'}``), or _NOT_LITERAL; never evaluated."""
    if len(text) > 1_000_000:
        return _NOT_LITERAL
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _NOT_LITERAL
    try:
        return python_literal(tree.body)
    except RecursionError:
        return _NOT_LITERAL


def is_literal(value: Any) -> bool:
    return value is not _NOT_LITERAL
