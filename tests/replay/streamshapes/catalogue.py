"""Transformations of any SSE shape, the recorded fixtures as shapes, and the catalogue of builders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from tests.replay.streamshapes.ollama_shapes import (
    ollama_cut_before_done,
    ollama_error_line,
    ollama_text,
    ollama_tool_call,
    ollama_v1_error_midstream,
    ollama_v1_index_collision,
    ollama_v1_tool_call,
)
from tests.replay.streamshapes.openai_shapes import (
    llamacpp_error_event,
    llamacpp_legacy_error_field,
    llamacpp_text,
    llamacpp_tool_call,
    sglang_error_event,
    sglang_text,
    sglang_tool_call,
    vllm_arguments_null,
    vllm_cut_in_arguments,
    vllm_error_event,
    vllm_finish_tool_calls_empty,
    vllm_hermes_lost_brace,
    vllm_stall,
    vllm_text,
    vllm_tool_call,
)
from tests.replay.streamshapes.wire import FIXTURES, Piece, Shape, from_body, split_events

# --- transformations of any SSE shape ------------------------------------------------------------------------


def with_comments(shape: Shape, comment: str = ":\n\n", every: int = 1) -> Shape:
    """Comment lines between events. llama.cpp b11312 sends `:\\n\\n` (an empty comment) when no result came for
    sse_ping_interval seconds (default 30; server-context.cpp set_next); other SSE servers send `: ping`."""
    out: list[Piece] = []
    for i, piece in enumerate(shape.script.pieces):
        if i and i % every == 0:
            out.append(Piece(comment.encode()))
        out.append(piece)
    return replace(shape, name=shape.name + "_comments", script=replace(shape.script, pieces=tuple(out)))


def with_crlf(shape: Shape) -> Shape:
    """The same events with CRLF line endings (allowed by the SSE spec; none of the four stacks sends them,
    a proxy may). JSON payloads hold no raw newline, so only the framing changes."""
    pieces = tuple(replace(p, data=p.data.replace(b"\n", b"\r\n")) for p in shape.script.pieces)
    return replace(shape, name=shape.name + "_crlf", script=replace(shape.script, pieces=pieces))


def cut_after(shape: Shape, events: int) -> Shape:
    """The first `events` pieces of a shape, then the connection cut (no terminator)."""
    pieces = shape.script.pieces[:events]
    return replace(shape, name=f"{shape.name}_cut{events}", script=replace(shape.script, pieces=pieces, end="cut"))


def stall_after(shape: Shape, events: int) -> Shape:
    """The first `events` pieces of a shape, then a stall: the socket stays open, nothing more is sent."""
    pieces = shape.script.pieces[:events]
    return replace(shape, name=f"{shape.name}_stall{events}", script=replace(shape.script, pieces=pieces, end="hang"))


# --- fixtures ------------------------------------------------------------------------------------------------


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def fixture_names() -> list[str]:
    return sorted(path.stem for path in FIXTURES.glob("*.json"))


def fixture_shape(name: str, end: str = "finish") -> Shape:
    """A fixture (tests/data/streams/<name>.json) as a Shape: one piece per SSE event or NDJSON line, then `end`
    (the body alone says whether the terminator came; pass end="cut" to also drop the connection)."""
    data = fixture(name)
    body = from_body(data["body"], api=data["api"], end=end)
    return Shape(name, data["stack"], data["api"], data["source"], body, data["tools"])


def terminated(body: str, api: str) -> bool:
    """Whether a stream body holds its terminator: `data: [DONE]` (SSE) or a line with "done": true (NDJSON)."""
    if api == "ollama":
        return any(_done_line(line) for line in body.splitlines())
    return any(event.strip() == b"data: [DONE]" for event in split_events(body))


def _done_line(line: str) -> bool:
    try:
        return json.loads(line).get("done") is True
    except (ValueError, AttributeError):
        return False


SHAPES = {
    builder.__name__: builder
    for builder in (
        llamacpp_text,
        llamacpp_tool_call,
        llamacpp_error_event,
        llamacpp_legacy_error_field,
        vllm_text,
        vllm_tool_call,
        vllm_hermes_lost_brace,
        vllm_arguments_null,
        vllm_finish_tool_calls_empty,
        vllm_error_event,
        vllm_cut_in_arguments,
        vllm_stall,
        sglang_text,
        sglang_tool_call,
        sglang_error_event,
        ollama_text,
        ollama_tool_call,
        ollama_cut_before_done,
        ollama_error_line,
        ollama_v1_tool_call,
        ollama_v1_index_collision,
        ollama_v1_error_midstream,
    )
}
"""Builders that take no argument: name -> () -> Shape."""


def all_shapes() -> Iterator[Shape]:
    for builder in SHAPES.values():
        yield builder()
