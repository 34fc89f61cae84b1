"""Tool parameter schemas: checked once before a run, and applied to model-written arguments in linear time.

A schema is configuration (a suite's tools, an exchange's `tools`, an audited trajectory's), so a broken one is
an error named before anything runs (`schema_problem`, `tool_schema_problems`), never a label on every call.

The arguments it checks are model output, hence untrusted, and this module is the one place they are checked:
the classifier (`arguments_error`), the repair guard and the constraint check (`linear_validator`) alike; no
other module builds a jsonschema validator (tests/test_guards.py). jsonschema matches `pattern` and
`patternProperties` with Python's backtracking `re`, where ``^(a+)+$`` against 40 characters takes minutes.
Here both keywords (and `additionalProperties`, which consults `patternProperties`) run on RE2
(`google-re2`), whose matching is linear in the text: every check ends in time proportional to the
arguments' size. RE2 has no look-around or back-references (nor does ECMA-262's core of what JSON Schema
patterns should be written in); a pattern RE2 cannot compile is a schema problem, named up front, as is
`unevaluatedProperties` beside `patternProperties` (jsonschema would match those with `re`). RE2's ``\\d``
and ``\\w`` are ASCII, as in ECMA-262; Python's are Unicode. References resolve offline only, and one that
does not resolve, or loops, is a schema problem too (core/schemarefs.py): no check ever reaches the network.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import islice
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

from orchestrator.core.jsonsafe import safe_text
from orchestrator.core.schemarefs import OFFLINE_REGISTRY, reference_problem

MAX_ERRORS = 1000  # errors looked at to pick the first by path
SCHEMA_ERROR_CHARS = 200  # a schema error quotes the offending value: keep the one line readable
_SKIP = frozenset({"enum", "const", "default", "examples"})  # values, not subschemas: any "pattern" key is data
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad pattern is reported as a schema problem, not logged to stderr by RE2
_OPTIONS.max_mem = 64 << 20  # RE2's own memory bound for one compiled pattern


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """The RE2 program for `pattern` (re2.error when RE2 cannot compile it)."""
    return re2.compile(pattern, _OPTIONS)


def _search(pattern: str, text: str) -> bool:
    # RE2 takes UTF-8: a lone surrogate (model output may hold one) cannot be encoded, so it stands as U+FFFD.
    return compiled(pattern).search(safe_text(text)) is not None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SCHEMA_ERROR_CHARS else text[:SCHEMA_ERROR_CHARS] + "…"


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{_short(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's rule, with `patternProperties` matched by RE2."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        yield ValidationError(f"Additional properties are not allowed ({_short(sorted(extras)[:20])} unexpected)")


LinearValidator = extend(
    Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties},
)


def _linear_problem(schema: Any) -> str | None:
    """A pattern RE2 cannot compile, or a keyword jsonschema would match with backtracking `re`."""
    stack = [(schema, "$")]
    seen: set[str] = set()  # jsonschema matches patternProperties with `re` for unevaluatedProperties anywhere
    while stack:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        patterns = node.get("patternProperties")
        found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        found += list(patterns) if isinstance(patterns, Mapping) else []
        for pattern in found:
            try:
                compiled(pattern)
            except re2.error as exc:
                reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
                return f"at {where}: pattern {pattern!r} is not linear-time (RE2: {reason})"
        seen.update(k for k in ("patternProperties", "unevaluatedProperties") if k in node)
        if len(seen) == 2:
            return f"at {where}: unevaluatedProperties with patternProperties cannot be checked in linear time"
        stack.extend((value, f"{where}.{key}") for key, value in node.items() if key not in _SKIP)
    return None


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is no usable JSON Schema object, or None. Checked against its own metaschema (`$schema`
    when it names a known draft, else the latest), then for linear-time patterns, then that every reference
    resolves offline and none loops."""
    if not isinstance(schema, Mapping):
        return f"is not a JSON object (got {type(schema).__name__})"
    try:
        with warnings.catch_warnings():  # an unknown `$schema` URI: jsonschema warns and uses the latest draft
            warnings.simplefilter("ignore", DeprecationWarning)
            checker = validator_for(schema)
    except Exception:  # a `$schema` that is no URI string (a number, a list) breaks the lookup itself
        return f"names no usable metaschema ('$schema': {_short(schema.get('$schema'))})"
    try:
        checker.check_schema(dict(schema))  # a Mapping that may not be a dict: jsonschema's signature wants one
    except SchemaError as exc:
        return f"is not a valid JSON Schema: at {exc.json_path}: {_short(exc.message)[1:-1]}"
    except (RecursionError, ValueError, TypeError) as exc:
        return f"is not a valid JSON Schema: {_short(str(exc))[1:-1]}"
    problem = _linear_problem(schema) or reference_problem(schema)
    return None if problem is None else f"is not usable: {problem}"


def tool_schema_problems(tools: Sequence[Any]) -> list[str]:
    """One line per offered tool whose `parameters` is no usable schema: `tools[i] ('name'): parameters ...`."""
    problems: list[str] = []
    for index, tool in enumerate(tools or ()):
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or "parameters" not in function:
            continue  # unnamed or schema-less tools are the callers' own checks (names, dry-run tables)
        problem = schema_problem(function["parameters"])
        if problem is not None:
            problems.append(f"tools[{index}] ({function.get('name')!r}): parameters {problem}")
    return problems


@lru_cache(maxsize=256)
def _validator(key: str) -> tuple[Validator | None, str | None]:
    """The linear-time validator for one schema (by its JSON text), or why there is none."""
    schema = json.loads(key)
    problem = schema_problem(schema)
    return (None, problem) if problem else (LinearValidator(schema, registry=OFFLINE_REGISTRY), None)


def _validator_for(schema: Mapping[str, Any]) -> tuple[Validator | None, str | None]:
    try:  # keys in the schema's own order: it decides which error comes first at one path (required, then extra)
        key = json.dumps(schema, default=str)
    except (TypeError, ValueError, RecursionError):
        return None, "schema is not JSON"
    return _validator(key)


def linear_validator(schema: Mapping[str, Any]) -> Validator | None:
    """The linear-time validator for `schema`, or None when the schema is unusable (`schema_problem`). Every
    check of model-written arguments goes through it (or `arguments_error`), so that no caller matches a
    schema's patterns with backtracking `re`; `evolve(schema=part)` checks a part with the root's "$ref"s."""
    return _validator_for(schema)[0]


def arguments_error(schema: Mapping[str, Any], arguments: Any) -> ValidationError | str | None:
    """The first error of `arguments` against `schema` (by path), None when valid, or a string saying the
    schema itself is unusable. Never raises on arguments."""
    validator, problem = _validator_for(schema)
    if validator is None:
        return problem
    errors = islice(validator.iter_errors(arguments), MAX_ERRORS)  # a huge wrong list: not a million errors
    return next(iter(sorted(errors, key=lambda e: e.path)), None)
