"""Reading a YAML file someone else wrote (a matrix, a stack definition, a task suite), with bounds: every
failure is one `YamlInputError` whose message names the file and the line (or byte offset), never a traceback,
a hang or unbounded memory.

Bounds (a matrix file is a few kilobytes; these leave room for any honest one):
- the file: at most `MAX_BYTES` (256 KiB), read no further; UTF-8, no other encoding;
- nesting: at most `MAX_DEPTH` (64) collections deep (PyYAML composes recursively: 10,000 `[` would
  otherwise end in RecursionError);
- size: at most `MAX_NODES` (25,000) nodes as written (pure-Python PyYAML composes some 15,000 a second),
  at most `MAX_ALIASES` (1,000) aliases, and at most `MAX_EXPANDED` (100,000) nodes once every alias is
  expanded, counted over the shared node graph without expanding it (a "billion laughs" file is refused in
  milliseconds); an alias inside its own anchor is refused;
- integers of at most `MAX_INT_CHARS` (1,000) characters;
- only the plain YAML types: the safe loader, so `!!python/...` and other tags are refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.core.jsonl import read_regular_file

MAX_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_NODES = 25_000
MAX_ALIASES = 1_000
MAX_EXPANDED = 100_000
MAX_INT_CHARS = 1_000


class YamlInputError(ValueError):
    """A YAML file that cannot be read within the bounds: the message names the file and the line."""


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, counting depth, nodes and aliases while it composes (it fails before recursing deep)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0
        self.aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        mark = self.peek_event().start_mark
        self.nodes += 1
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise _Refused(mark, f"more than {MAX_ALIASES} aliases")
        if self.nodes > MAX_NODES:
            raise _Refused(mark, f"more than {MAX_NODES} nodes")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Refused(mark, f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # Sexagesimal ints (1:2:3...) take quadratic time; a decimal one past 4300 digits raises ValueError.
        if len(node.value) > MAX_INT_CHARS:
            raise _Refused(node.start_mark, f"an integer of {len(node.value)} characters (at most {MAX_INT_CHARS})")
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # PyYAML keeps the last of two equal keys: `turn_cap: 4 ... turn_cap: 999` would run 999 silently.
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else []:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: keys written here override it, by design
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the safe constructor names it below
                continue
            if first is not key_node:
                raise _Refused(
                    key_node.start_mark,
                    f"key {_one_line(repr(key), 80)} appears twice in one mapping (lines {first.start_mark.line + 1} "
                    f"and {key_node.start_mark.line + 1}): write each key once",
                )
        return super().construct_mapping(node, deep=deep)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class _Refused(yaml.YAMLError):
    def __init__(self, mark: yaml.Mark, problem: str) -> None:
        super().__init__(problem)
        self.problem_mark = mark
        self.problem = problem


def read_text_bounded(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """The file's text: UTF-8, at most `max_bytes` (a longer file is refused without reading it all)."""
    return decode_text(read_bytes_bounded(path, max_bytes), path)


def read_bytes_bounded(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The file's bytes, at most `max_bytes` (a longer file is refused without reading it all)."""
    try:
        return read_regular_file(path, max_bytes)
    except OSError as exc:
        raise YamlInputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:  # larger than max_bytes, or no regular file (a FIFO would block)
        raise YamlInputError(f"{path}: {exc}") from exc


def decode_text(raw: bytes, path: Path) -> str:
    """UTF-8 text with universal newlines (what Path.read_text() gives: a matrix file's digest stays what it
    was); anything else is one error naming the line and the byte."""
    try:
        return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise YamlInputError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def expanded_size(root: yaml.Node, limit: int = MAX_EXPANDED) -> int:
    """Nodes of the document with every alias expanded, computed over the shared graph (each node once),
    iteratively; stops past `limit`. Refuses a node that contains itself."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(child)] for child in children))
            if sizes[id(node)] > limit:
                return limit + 1
            continue
        if id(node) in open_nodes:
            raise _Refused(node.start_mark, "an alias refers to a collection that contains it")
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise _Refused(child.start_mark, "an alias refers to a collection that contains it")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(path: Path) -> tuple[str, yaml.Node | None, Any]:
    """(text, composed node, plain Python data) of a single-document YAML file, within the bounds above."""
    text = read_text_bounded(path)
    node, data = parse_yaml(text, path)
    return text, node, data


def parse_yaml(text: str, path: Path) -> tuple[yaml.Node | None, Any]:
    """(composed node, plain Python data) of YAML text already read within the bounds (`path` names it in
    errors): a caller that keeps the exact text it parsed (a run's snapshot) reads the file once."""
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # its reader refuses non-printable characters (NUL) here
        node = loader.get_single_node()
        if node is not None:
            size = expanded_size(node)
            if size > MAX_EXPANDED:
                raise _Refused(node.start_mark, f"more than {MAX_EXPANDED} nodes once its aliases are expanded")
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        what = "YAML refused" if isinstance(exc, _Refused) else "not valid YAML"
        raise YamlInputError(f"{path}{_where(exc, text)}: {what}: {_problem(exc)}") from None
    except ValueError as exc:  # a value the constructor cannot convert (the marks are gone): no line to name
        raise YamlInputError(f"{path}: not valid YAML: {_one_line(str(exc))}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return node, data


def _where(exc: yaml.YAMLError, text: str) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return f":{mark.line + 1}"
    position = getattr(exc, "position", None)  # a ReaderError: a character offset
    return f":{text.count(chr(10), 0, position) + 1}" if isinstance(position, int) else ""


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} is not allowed in YAML (position {exc.position})"
    problem = str(getattr(exc, "problem", None) or exc)
    if isinstance(exc, yaml.constructor.ConstructorError) and "constructor for the tag" in problem:
        return f"{problem}: only plain YAML (mappings, lists, strings, numbers, booleans) is read"
    return _one_line(problem)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
