"""Tool schema references ("$ref", "$dynamicRef"), resolved offline only. Pure: nothing here opens a socket.

jsonschema's default registry fetches a remote reference over HTTP (and waits as long as the server does): a
tool schema is configuration read from suites, trajectories and MCP servers, so a reference names part of the
schema itself or one of the JSON Schema metaschemas jsonschema ships, never a document elsewhere.
`OFFLINE_REGISTRY` refuses any other URI at once; every validator is built with it (core/toolschemas.py).

`reference_problem` checks a schema up front, so that a broken one is named before a run rather than making
every call to its tool fail: each reference must resolve (offline), and no chain of references may loop back
to where it started without descending into the arguments (``{"$ref": "#"}`` at the root, two `$defs`
naming each other): jsonschema would recurse on such a loop until Python's stack runs out. A recursive
schema whose reference sits below `properties` or `items` (a tree) reads a smaller value each time: allowed.
References resolve as the validator resolves them: with draft 2020-12's rules, whatever `$schema` says.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema_specifications import REGISTRY as METASCHEMAS  # type: ignore[import-untyped]  # no stubs shipped
from referencing import Registry, Resource
from referencing._core import Resolver  # the type `resolver_with_root` returns (not re-exported)
from referencing.exceptions import NoSuchAnchor, PointerToNowhere, Unresolvable
from referencing.jsonschema import DRAFT202012

REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")
_VALUES = frozenset({"enum", "const", "default", "examples"})  # data, not subschemas: a "$ref" key there is data
# Keywords whose subschemas apply to the same value as their parent (draft 2020-12): a reference loop through
# these alone never reaches a smaller value. Every other applicator (properties, items, ...) descends.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas",)


class RemoteReference(Exception):
    """A reference to a document outside the schema: never fetched."""


def _refuse(uri: str) -> Resource[Any]:
    raise RemoteReference("names a document outside the schema (references resolve offline only, never fetched)")


OFFLINE_REGISTRY: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]  # attrs alias, as jsonschema's
_LOCAL: Registry[Any] = METASCHEMAS.combine(OFFLINE_REGISTRY)  # what a validator combines it with itself

Node = tuple[Any, Resolver[Any], str]  # a subschema, the resolver its references use, where it is


def _entered(node: Any, resolver: Resolver[Any]) -> Resolver[Any]:
    """The resolver inside `node` (its `$id`, when it has one, becomes the base), as jsonschema's `descend`. A
    "$id" that is no string is a property of that name in a `properties` object, not an identifier."""
    if not isinstance(node, Mapping) or not isinstance(node.get("$id"), str):
        return resolver
    return resolver.in_subresource(DRAFT202012.create_resource(node))


def _every_subschema(schema: Any, resolver: Resolver[Any]) -> Iterator[Node]:
    """Every object in the schema that may be a subschema, with its resolver and JSON path (values skipped)."""
    stack: list[Node] = [(schema, resolver, "$")]
    while stack:
        node, outer, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, outer, f"{where}[{i}]") for i, item in enumerate(node))
        elif isinstance(node, Mapping):
            inner = _entered(node, outer)
            yield node, inner, where
            stack.extend((v, inner, f"{where}.{k}") for k, v in node.items() if k not in _VALUES)


def _references(node: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for keyword in REFERENCE_KEYWORDS:
        if isinstance(node.get(keyword), str):
            yield keyword, node[keyword]


def _unresolved(keyword: str, ref: str, where: str, exc: BaseException) -> str:
    """One line: the reference, where it is, and why it does not resolve (never the whole schema)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, RemoteReference):
        cause = cause.__cause__  # Unresolvable <- Unretrievable <- what `_refuse` raised
    if cause is not None:
        reason = str(cause)
    elif isinstance(exc, PointerToNowhere):
        reason = f"the schema has nothing at {exc.ref!r}"
    elif isinstance(exc, NoSuchAnchor):
        reason = f"the schema has no anchor {exc.anchor!r}"
    else:
        reason = f"resolves to nothing in the schema ({type(exc).__name__})"
    return f"at {where}: {keyword} {ref!r}: {reason}"


def _in_place(node: Any, resolver: Resolver[Any]) -> Iterator[tuple[Any, Resolver[Any]]]:
    """The subschemas applied to the same value as `node`: its references' targets and in-place keywords."""
    if not isinstance(node, Mapping):
        return
    for _, ref in _references(node):
        resolved = resolver.lookup(ref)  # every reference was resolved once already: this cannot fail
        yield resolved.contents, resolved.resolver
    children: list[Any] = [node.get(k) for k in _IN_PLACE_ONE]
    for key in _IN_PLACE_LIST:
        children += node[key] if isinstance(node.get(key), list) else []
    for key in _IN_PLACE_MAP:
        children += list(node[key].values()) if isinstance(node.get(key), Mapping) else []
    yield from ((child, _entered(child, resolver)) for child in children if isinstance(child, Mapping))


def _loop_from(start: Any, resolver: Resolver[Any], finished: set[int]) -> Any:
    """The subschema whose reference (or in-place keyword) takes a chain of in-place subschemas from `start` back
    to one on the chain, or None (depth-first, without recursion); `finished` holds subschemas known to lead to
    no loop, shared across starts."""
    on_chain: set[int] = {id(start)}
    stack = [(start, _in_place(start, resolver))]
    while stack:
        node, successors = stack[-1]
        following = next(successors, None)
        if following is None:
            stack.pop()
            on_chain.discard(id(node))
            finished.add(id(node))
            continue
        child, child_resolver = following
        if id(child) in on_chain:
            return node
        if id(child) not in finished:
            on_chain.add(id(child))
            stack.append((child, _in_place(child, child_resolver)))
    return None


def reference_problem(schema: Mapping[str, Any]) -> str | None:
    """Why the schema's references cannot be followed (one that does not resolve offline, or a loop), or None."""
    try:
        return _reference_problem(schema)
    except ValueError as exc:  # an "$id" or reference no URI parser reads ("http://[")
        return f"holds an identifier or reference that is no URI ({exc})"


def _reference_problem(schema: Mapping[str, Any]) -> str | None:
    root = _LOCAL.resolver_with_root(DRAFT202012.create_resource(schema))
    nodes = list(_every_subschema(schema, root))
    for node, resolver, where in nodes:
        for keyword, ref in _references(node):
            try:
                resolver.lookup(ref)
            except Unresolvable as exc:
                return _unresolved(keyword, ref, where, exc)
    finished: set[int] = set()
    places = {id(node): where for node, _, where in nodes}
    for node, resolver, _ in nodes:
        looped = None if id(node) in finished else _loop_from(node, resolver, finished)
        if looped is not None:
            refs = ", ".join(f"{k} {r!r}" for k, r in _references(looped)) or "its in-place subschemas"
            return f"at {places.get(id(looped), '$')}: {refs} loops back to itself without reading the arguments"
    return None
