"""Ollama 0.30.8 stream shapes: NDJSON on /api/chat and SSE on /v1/chat/completions (tests/replay/STREAMS.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.replay.streamshapes.openai_shapes import CREATED, DONE, _go_dumps, _sse
from tests.replay.streamshapes.wire import NDJSON, Shape, script

# --- Ollama 0.30.8 ---------------------------------------------------------------------------------------
# /api/chat: server/routes.go ChatHandler -> streamResponse: json.Marshal(api.ChatResponse) + "\n" per chunk
# (Go: compact, <>& escaped), Content-Type application/x-ndjson; tool calls whole in one chunk (tools.Parser /
# the model's built-in parser), id from toolCallId(), function.index; the last line `"done":true` with
# done_reason and the Metrics (durations in ns, counts); an error after the first byte is a line
# `{"error":"..."}` (json.NewEncoder(...).Encode), and the stream ends (no done line).
# /v1/chat/completions: middleware/openai.go ChatWriter.writeResponse -> openai.go ToChunks: one SSE chunk per
# native chunk, the done chunk with finish_reason, `data: [DONE]`.
OLLAMA_MODEL = "llama3.2"
OLLAMA_CALL_ID = "call_k3x9q2m7"  # toolCallId(): "call_" + 8 of [a-z0-9]
OLLAMA_SOURCE = "server/routes.go:ChatHandler/streamResponse"
OLLAMA_V1_SOURCE = "middleware/openai.go:ChatWriter.writeResponse (openai/openai.go ToChunks)"


def _ollama_time(i: int) -> str:
    return f"2026-12-02T10:00:00.{123456789 + i * 1000:09d}Z"


def _ollama_line(i: int, message: dict[str, Any], done: bool = False, **final: Any) -> str:
    line = {"model": OLLAMA_MODEL, "created_at": _ollama_time(i), "message": message, "done": done, **final}
    return _go_dumps(line) + "\n"


OLLAMA_METRICS = {
    "total_duration": 812345678,
    "load_duration": 12345678,
    "prompt_eval_count": 20,
    "prompt_eval_duration": 98765432,
    "eval_count": 10,
    "eval_duration": 654321098,
}


def _ollama_done(i: int, reason: str = "stop") -> str:
    return _ollama_line(i, {"role": "assistant", "content": ""}, True, done_reason=reason, **OLLAMA_METRICS)


def _ollama_shape(name: str, lines: list[str], end: str = "finish") -> Shape:
    return Shape(name, "ollama", "ollama", OLLAMA_SOURCE, script(lines, end=end, content_type=NDJSON))


def ollama_text(pieces: Iterable[str] = ("Paris", " is", " sunny", " today", ".")) -> Shape:
    """Ollama 0.30.8 /api/chat streaming (the default: "stream" absent or true): one line per piece, then the
    done line (content "", done_reason, metrics)."""
    pieces = list(pieces)
    lines = [_ollama_line(i, {"role": "assistant", "content": p}) for i, p in enumerate(pieces)]
    return _ollama_shape("ollama_text", [*lines, _ollama_done(len(pieces))])


def ollama_tool_call(arguments: dict[str, Any] | None = None) -> Shape:
    """Ollama 0.30.8 /api/chat: the call arrives whole in one chunk (content "", arguments a JSON object), then
    the done line."""
    call = {
        "id": OLLAMA_CALL_ID,
        "function": {"index": 0, "name": "get_weather", "arguments": arguments or {"city": "Paris"}},
    }
    lines = [_ollama_line(0, {"role": "assistant", "content": "", "tool_calls": [call]}), _ollama_done(1)]
    return _ollama_shape("ollama_tool_call", lines)


def ollama_cut_before_done() -> Shape:
    """Ollama 0.30.8 /api/chat, the connection closed before the done line (the server died mid-stream)."""
    lines = [_ollama_line(i, {"role": "assistant", "content": p}) for i, p in enumerate(("Paris", " is"))]
    return _ollama_shape("ollama_cut_before_done", lines, end="cut")


OLLAMA_RUNNER_ERROR = "an error was encountered while running the model: unexpected EOF"


def ollama_error_line(message: str = OLLAMA_RUNNER_ERROR) -> Shape:
    """Ollama 0.30.8 /api/chat, an error after the first chunk: streamResponse writes `{"error":"..."}` + "\\n"
    (the runner's error from llm/server.go Completion) and returns: no done line, the body ends normally."""
    lines = [_ollama_line(i, {"role": "assistant", "content": p}) for i, p in enumerate(("Paris", " is"))]
    return _ollama_shape("ollama_error_line", [*lines, _go_dumps({"error": message}) + "\n"])


OLLAMA_V1_ID = "chatcmpl-417"  # middleware: "chatcmpl-" + rand.Intn(999)


def _ollama_v1_chunk(delta: dict[str, Any], finish: str | None = None, model: str = OLLAMA_MODEL) -> str:
    chunk = {
        "id": OLLAMA_V1_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return _sse(chunk, _go_dumps)


def _ollama_v1_call(call_id: str, index: int, arguments: dict[str, Any]) -> dict[str, Any]:
    arguments_text = _go_dumps(arguments)
    return {
        "id": call_id,
        "index": index,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments_text},
    }


def ollama_v1_tool_call() -> Shape:
    """Ollama 0.30.8 /v1/chat/completions stream: the whole call in one chunk (arguments a JSON string), the done
    chunk with finish_reason "tool_calls" (toolCallSent), then [DONE]."""
    call = _ollama_v1_call(OLLAMA_CALL_ID, 0, {"city": "Paris"})
    pieces = [
        _ollama_v1_chunk({"role": "assistant", "content": "", "tool_calls": [call]}),
        _ollama_v1_chunk({"role": "assistant", "content": ""}, "tool_calls"),
        DONE,
    ]
    return Shape("ollama_v1_tool_call", "ollama", "openai", OLLAMA_V1_SOURCE, script(pieces))


def ollama_v1_index_collision() -> Shape:
    """Ollama before 0.20.6 /v1 stream with a model whose built-in parser did not set Function.Index (cogito,
    deepseek3, gemma4, lfm2, ministral...; issue #15457, fixed by #15467): two parallel calls, each whole in its
    own chunk, both at index 0 with different ids."""
    first = _ollama_v1_call(OLLAMA_CALL_ID, 0, {"city": "Paris"})
    second = _ollama_v1_call("call_p4w8z1n6", 0, {"city": "Tokyo"})
    pieces = [
        _ollama_v1_chunk({"role": "assistant", "content": "", "tool_calls": [first]}),
        _ollama_v1_chunk({"role": "assistant", "content": "", "tool_calls": [second]}),
        _ollama_v1_chunk({"role": "assistant", "content": ""}, "tool_calls"),
        DONE,
    ]
    return Shape("ollama_v1_index_collision", "ollama", "openai", OLLAMA_V1_SOURCE + " before 0.20.6", script(pieces))


def ollama_v1_error_midstream() -> Shape:
    """Ollama 0.30.8 /v1 stream, an error after the first chunk: streamResponse encodes {"error":"..."} into the
    ChatWriter, whose status is already 200, so writeResponse unmarshals it as an empty api.ChatResponse and
    writes an empty chunk (model "", content "", finish_reason null); the error text is lost, no [DONE]."""
    pieces = [
        _ollama_v1_chunk({"role": "assistant", "content": "Paris"}),
        _ollama_v1_chunk({"role": "assistant", "content": " is"}),
        _ollama_v1_chunk({"role": "assistant", "content": ""}, model=""),
    ]
    return Shape("ollama_v1_error_midstream", "ollama", "openai", OLLAMA_V1_SOURCE, script(pieces))
