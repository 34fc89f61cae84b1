"""Scripted *streaming* replies over real HTTP on loopback, for the stream shapes no real server here can be
made to send on demand: a stack's known broken streams (a hermes parser losing a brace, two calls under one
index, `finish_reason: "tool_calls"` with no call, an error event after some content), a connection cut in the
middle of the arguments, a stalled stream. tests/replay/STREAMS.md holds the wire formats these replay, each
with the stack source it was read in; the recorded ones came from the real llama-server b11312.

`StreamReplay` answers POST /v1/chat/completions and POST /api/chat with a `Script`: the status line and headers
at once, then each `Piece` (bytes, after an optional delay), then the end action:
- "finish": the body ends normally (chunked: the terminating 0-chunk; then the connection closes);
- "cut": the connection closes (FIN) with no terminator: with the default chunked framing, httpx raises
  `httpx.RemoteProtocolError` ("peer closed connection without sending complete message body") from the
  iteration; with framing "close" (no length, body delimited by the close) the iteration just ends, and only
  the missing `[DONE]` / `"done": true` says the stream was cut;
- "reset": the connection is reset (RST): httpx raises `httpx.ReadError` (or `RemoteProtocolError` when the
  reset is seen as the end of the stream);
- "hang": nothing more is sent and the socket stays open until the client goes away or `stop()` is called
  (a stalled stream): a client read timeout (`httpx.ReadTimeout`) is the only way out.
A plain JSON error before any stream begins is a Script with framing "length" (see `json_error`).

All four real stacks stream with HTTP/1.1 chunked transfer-encoding (llama.cpp: cpp-httplib
set_chunked_content_provider; vLLM and SGLang: uvicorn StreamingResponse; Ollama: Go net/http flushing), so
"chunked" is the default. Every response says `Connection: close`: one request per connection keeps a stalled
handler from holding a pooled connection.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"
JSON = "application/json"
PATHS = ("/v1/chat/completions", "/api/chat")
ENDS = ("finish", "cut", "reset", "hang")
FRAMINGS = ("chunked", "close", "length")
FIXTURES = Path(__file__).resolve().parent.parent / "data" / "streams"

# The small tool set the stream fixtures use (tests/data/streams/*.json carry it too).
GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
SUBMIT = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Submit the final answer",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    },
}
TOOLS = [GET_WEATHER, SUBMIT]


# --------------------------------------------------------------------------------------------- scripts


@dataclass(frozen=True)
class Piece:
    """Bytes written (and flushed) as one unit, after `delay_s`; one HTTP chunk under chunked framing."""

    data: bytes
    delay_s: float = 0.0


@dataclass(frozen=True)
class Script:
    pieces: tuple[Piece, ...]
    end: str = "finish"
    status: int = 200
    content_type: str = SSE
    framing: str = "chunked"
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.end not in ENDS:
            raise ValueError(f"end must be one of {ENDS}, not {self.end!r}")
        if self.framing not in FRAMINGS:
            raise ValueError(f"framing must be one of {FRAMINGS}, not {self.framing!r}")
        if self.framing == "length" and self.end != "finish":
            raise ValueError("a Content-Length body cannot be cut or stalled; use chunked or close framing")

    @property
    def body(self) -> bytes:
        return b"".join(piece.data for piece in self.pieces)


def script(pieces: Iterable[bytes | str | Piece], **options: Any) -> Script:
    """A Script from raw pieces (str is UTF-8 encoded); `options` are Script's other fields."""
    return Script(pieces=tuple(_piece(p) for p in pieces), **options)


def _piece(p: bytes | str | Piece) -> Piece:
    if isinstance(p, Piece):
        return p
    return Piece(p.encode() if isinstance(p, str) else p)


def json_error(status: int, body: Any) -> Script:
    """A plain JSON error before any stream begins (e.g. llama.cpp answers a stream request whose first result
    is an error as a non-stream response: server-context.cpp handle_completions_impl)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Script(pieces=(Piece(data),), status=status, content_type=JSON, framing="length")


def split_events(body: bytes | str) -> list[bytes]:
    """An SSE body cut after each blank line (LF or CRLF), separators kept; a trailing partial event is kept."""
    data = body.encode() if isinstance(body, str) else body
    events: list[bytes] = []
    start = i = 0
    while i < len(data):
        for sep in (b"\r\n\r\n", b"\n\n"):
            if data.startswith(sep, i):
                events.append(data[start : i + len(sep)])
                start = i = i + len(sep)
                break
        else:
            i += 1
    if start < len(data):
        events.append(data[start:])
    return events


def split_lines(body: bytes | str) -> list[bytes]:
    """An NDJSON body cut after each newline, newlines kept; a trailing partial line is kept."""
    data = body.encode() if isinstance(body, str) else body
    return data.splitlines(keepends=True)


def from_body(body: bytes | str, *, api: str, end: str = "finish", delay_s: float = 0.0) -> Script:
    """A recorded or written body as a Script: one piece per SSE event (api "openai") or NDJSON line ("ollama")."""
    parts = split_lines(body) if api == "ollama" else split_events(body)
    return Script(
        pieces=tuple(Piece(p, delay_s) for p in parts), end=end, content_type=NDJSON if api == "ollama" else SSE
    )


# ---------------------------------------------------------------------------------------------- server


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class StreamReplay:
    """A loopback server in a daemon thread. `start()` returns the base URL; `stop()` ends stalled handlers too.

    with StreamReplay(vllm_tool_call()) as base_url: ...   # or: replay.start(); replay.serve(other); replay.stop()
    """

    def __init__(self, answer: Script | Shape | None = None) -> None:
        self._answer = _script_of(answer) if answer is not None else None
        self.requests: list[Received] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._handlers: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def serve(self, answer: Script | Shape) -> None:
        """The answer for the requests that follow."""
        with self._lock:
            self._answer = _script_of(answer)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        if self._server is not None:
            return self.base_url
        self._stopping.clear()
        server = ThreadingHTTPServer((LOOPBACK, 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="stream-replay", daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self, timeout_s: float = 5.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # a "hang" handler returns and closes its socket
        server.shutdown()
        server.server_close()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            handlers = list(self._handlers)
        for thread in handlers:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- used by the handler
    def _current(self) -> Script | None:
        with self._lock:
            return self._answer

    def _track(self, thread: threading.Thread, active: bool) -> None:
        with self._lock:
            (self._handlers.add if active else self._handlers.discard)(thread)


def _script_of(answer: Script | Shape) -> Script:
    return answer.script if isinstance(answer, Shape) else answer


def _handler_for(replay: StreamReplay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "stream-replay"

        def log_message(self, *_args: object) -> None:
            return

        def do_GET(self) -> None:
            self._plain(404, {"error": "not found"})

        def do_POST(self) -> None:
            me = threading.current_thread()
            replay._track(me, True)
            try:
                self._post()
            finally:
                replay._track(me, False)

        def _post(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw or b"null")
            except ValueError:
                body = raw.decode(errors="replace")
            replay.requests.append(Received(self.path, dict(self.headers.items()), body))
            answer = replay._current()
            if self.path not in PATHS or answer is None:
                self._plain(404, {"error": f"no scripted answer for {self.path}"})
                return
            self._play(answer)

        def _plain(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", JSON)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def _play(self, answer: Script) -> None:
            self.close_connection = True
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            for name, value in answer.headers:
                self.send_header(name, value)
            if answer.framing == "chunked":
                self.send_header("Transfer-Encoding", "chunked")
            elif answer.framing == "length":
                self.send_header("Content-Length", str(len(answer.body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            try:
                for piece in answer.pieces:
                    if piece.delay_s and replay._stopping.wait(piece.delay_s):
                        return
                    self._write(answer.framing, piece.data)
                self._end(answer)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client went away: nothing left to play

        def _write(self, framing: str, data: bytes) -> None:
            if not data:
                return  # an empty chunk would end a chunked body
            if framing == "chunked":
                data = b"%x\r\n%s\r\n" % (len(data), data)
            self.wfile.write(data)
            self.wfile.flush()

        def _end(self, answer: Script) -> None:
            if answer.end == "finish":
                if answer.framing == "chunked":
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            elif answer.end == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            elif answer.end == "hang":
                self._hang()
            # "cut": return without a terminator; socketserver closes the connection (FIN)

        def _hang(self) -> None:
            sock = self.connection
            while not replay._stopping.is_set():
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable:
                    try:
                        if not sock.recv(1, socket.MSG_PEEK):
                            return  # the client closed its end
                    except OSError:
                        return

    return Handler


# ------------------------------------------------------------------------------------------------ shapes


@dataclass(frozen=True)
class Shape:
    """A named stream as a stack sends it. `source` says what it replays (file:function, stack version)."""

    name: str
    stack: str  # llamacpp | vllm | sglang | ollama
    api: str  # openai (SSE) | ollama (NDJSON)
    source: str
    script: Script
    tools: list[dict[str, Any]] = field(default_factory=lambda: list(TOOLS))

    @property
    def body(self) -> str:
        return self.script.body.decode()

    def ending(self, end: str) -> Shape:
        return replace(self, script=replace(self.script, end=end))


def _dumps(obj: Any) -> str:
    """Compact JSON, UTF-8 kept (nlohmann dump(-1), pydantic model_dump_json, msgspec)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _go_dumps(obj: Any) -> str:
    """Go encoding/json.Marshal: compact, and <, >, & escaped as \\u003c, \\u003e, \\u0026."""
    text = _dumps(obj)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sse(obj: Any, dumps: Any = _dumps) -> str:
    return "data: " + (obj if isinstance(obj, str) else dumps(obj)) + "\n\n"


DONE = "data: [DONE]\n\n"
CREATED = 1796390457
RECORDED_ARGS = ("{", '"', "city", '":', ' "', "Paris", '"}')  # Qwen2.5's pieces of {"city": "Paris"} (recorded)


# --- llama.cpp b11312 ------------------------------------------------------------------------------------
# tools/server/server-task.cpp server_task_result_cmpl_partial::to_json_oaicompat_chat (the first partial adds
# {"role":"assistant","content":null}) and server_task_result_cmpl_final::to_json_oaicompat_chat_stream (the
# finish chunk has an empty delta, timings on the last chunk, a usage chunk with empty choices when
# stream_options.include_usage); server-common.cpp format_oai_sse writes "data: " + dump + "\n\n" (ordered_json:
# keys in insertion order); server-context.cpp handle_completions_impl appends "data: [DONE]\n\n" when no result
# is left, and ends the stream after an error with no [DONE].
LLAMACPP_MODEL = "qwen2.5-coder-0.5b"
LLAMACPP_ID = "chatcmpl-7AIa33RkuQfbprlaBJLeD9HRvS5SbVhN"  # "chatcmpl-" + 32 of [0-9A-Za-z] (gen_chatcmplid)
LLAMACPP_CALL_ID = "V8psLoeLFQHzH0c8KcLLh91Fy7Nms0DS"  # gen_tool_call_id: 32 of [0-9A-Za-z], no prefix
LLAMACPP_TIMINGS = {
    "cache_n": 0,
    "prompt_n": 232,
    "prompt_ms": 6221.541,
    "prompt_per_token_ms": 26.816987068965517,
    "prompt_per_second": 37.28979685258041,
    "predicted_n": 11,
    "predicted_ms": 2378.391,
    "predicted_per_token_ms": 237.8391,
    "predicted_per_second": 4.204523141905599,
}
LLAMACPP_SOURCE = "tools/server/server-context.cpp:handle_completions_impl (server-task.cpp to_json_oaicompat_chat*)"


def _llamacpp_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    obj = {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": CREATED,
        "id": LLAMACPP_ID,
        "model": LLAMACPP_MODEL,
        "system_fingerprint": "b11312-0c1e57098",
        "object": "chat.completion.chunk",
        **extra,
    }
    return _sse(obj)


def _llamacpp_pieces(deltas: list[dict[str, Any]], finish: str | None) -> list[str]:
    """The HTTP chunks llama-server writes: the role chunk shares the first chunk with the first delta; the
    finish chunk (with timings) is one chunk, [DONE] another. finish=None: no finish chunk, no [DONE]."""
    role = _llamacpp_chunk({"role": "assistant", "content": None})
    pieces = [role + (_llamacpp_chunk(deltas[0]) if deltas else "")]
    pieces += [_llamacpp_chunk(d) for d in deltas[1:]]
    if finish is not None:
        pieces += [_llamacpp_chunk({}, finish, timings=LLAMACPP_TIMINGS), DONE]
    return pieces


def _llamacpp_tool_deltas(name: str, argument_pieces: Iterable[str]) -> list[dict[str, Any]]:
    """server-chat.cpp server_chat_msg_diff_to_json_oaicompat: index, id, type, then function {name, arguments};
    the header (id, name) rides on the first argument piece (server-task.cpp update_chat_msg)."""
    pieces = list(argument_pieces)
    first = {"index": 0, "id": LLAMACPP_CALL_ID, "type": "function", "function": {"name": name}}
    if pieces:
        first["function"]["arguments"] = pieces[0]
    deltas = [{"tool_calls": [first]}]
    deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces[1:]]
    return deltas


def llamacpp_text(pieces: Iterable[str] = ("Hello", "!", " How", " can", " I", " help", "?")) -> Shape:
    """llama.cpp b11312, a plain text answer (the shape recorded from the real server)."""
    deltas = [{"content": p} for p in pieces]
    return _shape("llamacpp_text", "llamacpp", LLAMACPP_SOURCE, _llamacpp_pieces(deltas, "stop"))


def llamacpp_tool_call(arguments: Iterable[str] = RECORDED_ARGS) -> Shape:
    """llama.cpp b11312, a native call (Qwen2.5 <tool_call>, peg-native): the id and name arrive with the first
    argument piece; finish_reason "tool_calls" (recorded: tests/data/streams/llamacpp_tool_call.json)."""
    deltas = _llamacpp_tool_deltas("get_weather", arguments)
    return _shape("llamacpp_tool_call", "llamacpp", LLAMACPP_SOURCE, _llamacpp_pieces(deltas, "tool_calls"))


LLAMACPP_PARSE_FAILURE = "The model produced output that does not match the expected peg-native format"


def llamacpp_error_event(
    message: str = LLAMACPP_PARSE_FAILURE, content: Iterable[str] = ("The weather", " in Paris"), code: int = 500
) -> Shape:
    """llama.cpp b11312, an error after the stream began: handle_completions_impl's set_next catches the
    exception (here common/chat.cpp common_chat_peg_parse rejecting the model's output at the final parse) and
    writes format_oai_sse({"error": format_error_response(e.what(), ERROR_TYPE_SERVER)}):
    `data: {"error":{"code":500,"message":...,"type":"server_error"}}` -- a data event, not `event: error` (that
    is only /v1/messages, format_anthropic_sse) -- and ends the body with no [DONE] (chunked body terminated)."""
    deltas = [{"content": p} for p in content]
    error = {"error": {"code": code, "message": message, "type": "server_error"}}
    pieces = [*_llamacpp_pieces(deltas, None), _sse(error)]
    return _shape("llamacpp_error_event", "llamacpp", LLAMACPP_SOURCE + ", set_next catch", pieces)


def llamacpp_legacy_error_field(
    message: str = "context shift is disabled", content: Iterable[str] = ("The weather",)
) -> Shape:
    """llama.cpp builds before the streaming rewrite (handle_completions_impl in server.cpp of 2024-2025):
    server_sent_event(sink, "error", error_data) writes `error: {...}\\n\\n` -- a field named "error", which an
    SSE parser ignores (it is neither `event:` nor `data:`) -- and then still `data: [DONE]`."""
    deltas = [{"content": p} for p in content]
    error = {"code": 500, "message": message, "type": "server_error"}
    pieces = [*_llamacpp_pieces(deltas, None), "error: " + _dumps(error) + "\n\n", DONE]
    return _shape("llamacpp_legacy_error_field", "llamacpp", "tools/server/server.cpp:server_sent_event", pieces)


# --- vLLM 0.32 ---------------------------------------------------------------------------------------------
# vllm/entrypoints/openai/chat_completion/serving.py OpenAIServingChat.chat_completion_stream_generator:
# chunk.model_dump_json(exclude_unset=True), so a field passed explicitly as None is written as null
# (prompt_token_ids/prompt_text on the first chunk, token_ids on each choice, stop_reason on the last);
# the first chunk's delta is {"role":"assistant","content":""}; finish_reason "tool_calls" when a tool-call
# delta was streamed (tools_streamed) and the engine stopped; "data: [DONE]" always, after an error too.
VLLM_MODEL = "qwen2.5-coder-0.5b"
VLLM_ID = "chatcmpl-9f1c2e7a4b3d5c60"  # "chatcmpl-" + random_uuid() (16 hex chars)
VLLM_CALL_ID = "chatcmpl-tool-8e2d4c6b1a3f5e70"  # make_tool_call_id(): "chatcmpl-tool-" + 16 hex chars
VLLM_FINGERPRINT = "vllm-0.32.0-2d664834"  # on the terminal chunk only (recorded)
VLLM_SOURCE = "vllm/entrypoints/openai/chat_completion/serving.py:chat_completion_stream_generator"
VLLM_HERMES = "vllm/tool_parsers/hermes_tool_parser.py:Hermes2ProToolParser.extract_tool_calls_streaming"


def _vllm_chunk(choice: dict[str, Any] | None, **extra: Any) -> str:
    obj = {"id": VLLM_ID, "object": "chat.completion.chunk", "created": CREATED, "model": VLLM_MODEL}
    obj["choices"] = [] if choice is None else [choice]
    return _sse({**obj, **extra})


def _vllm_first() -> str:
    choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    return _vllm_chunk(choice, prompt_token_ids=None, prompt_text=None)


def _vllm_delta(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    return _vllm_chunk(choice, **extra)


def _vllm_finish(finish: str, usage: bool = False) -> list[str]:
    """The terminal chunk (delta {} at EOS) with system_fingerprint, or, with stream_options.include_usage,
    the terminal chunk without it and the usage chunk (empty choices, exclude_none) with it. Then [DONE]."""
    if not usage:
        return [_vllm_delta({}, finish, system_fingerprint=VLLM_FINGERPRINT), DONE]
    totals = {"prompt_tokens": 35, "total_tokens": 45, "completion_tokens": 10}
    return [_vllm_delta({}, finish), _vllm_chunk(None, usage=totals, system_fingerprint=VLLM_FINGERPRINT), DONE]


def _vllm_name_delta(name: str, index: int = 0, call_id: str = VLLM_CALL_ID, **function: Any) -> dict[str, Any]:
    """hermes: DeltaToolCall(index, type, id, function=DeltaFunctionCall(name).model_dump(exclude_none=True)),
    in a DeltaMessage(content=None, ...) -- content passed explicitly, so written as null."""
    call = {"id": call_id, "type": "function", "index": index, "function": {"name": name, **function}}
    return {"content": None, "tool_calls": [call]}


def _vllm_args_delta(arguments: str, index: int = 0) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"index": index, "function": {"arguments": arguments}}]}


def _vllm_tool_pieces(name: str, arguments: Iterable[str], finish: str | None = "tool_calls") -> list[str]:
    pieces = [_vllm_first(), _vllm_delta(_vllm_name_delta(name))]
    pieces += [_vllm_delta(_vllm_args_delta(a)) for a in arguments]
    if finish is not None:
        pieces += _vllm_finish(finish)
    return pieces


def vllm_text(pieces: Iterable[str] = ("Paris", " is", " sunny", " today", "."), usage: bool = False) -> Shape:
    """vLLM 0.32, a plain text answer: the role chunk, content deltas, the EOS chunk (delta {}) with
    finish_reason and stop_reason (recorded: tests/data/streams/vllm_text.json)."""
    out = [_vllm_first(), *(_vllm_delta({"content": p}) for p in pieces), *_vllm_finish("stop", usage)]
    return _shape("vllm_text", "vllm", VLLM_SOURCE, out)


def vllm_tool_call(
    arguments: Iterable[str] = ('{"', "city", '":', ' "', "Paris", '"}'), name: str = "get_weather"
) -> Shape:
    """vLLM 0.32 with --tool-call-parser hermes: a name-only delta first (id, type, index), then argument
    fragments as the model wrote them (the parser re-parses current_text and sends the new suffix), then an
    empty delta with finish_reason "tool_calls" (recorded with tool_choice "required":
    tests/data/streams/vllm_tool_call_required.json)."""
    return _shape("vllm_tool_call", "vllm", VLLM_HERMES, _vllm_tool_pieces(name, arguments))


def vllm_hermes_lost_brace() -> Shape:
    """vLLM's hermes parser before its streaming rewrite (vLLM 0.32 re-parses current_text instead): the
    "tool call closing" branch only recognised a string value before the brace (`'"}' in delta_text`), so an
    argument ending in a number lost its closing brace: `{"city": "Paris", "days": 3` (issues #22885 and
    #32152, PRs #32518 and #36360). Chunks in that era's shape (no token_ids / prompt_* nulls, issue #27572)."""
    old_first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    pieces = [_vllm_chunk(old_first)]
    name = {"tool_calls": [{"id": VLLM_CALL_ID, "type": "function", "index": 0, "function": {"name": "get_weather"}}]}
    deltas = [name] + [
        {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}
        for a in ('{"city": "', "Paris", '", "days": ', "3")
    ]
    pieces += [_vllm_chunk({"index": 0, "delta": d, "logprobs": None, "finish_reason": None}) for d in deltas]
    pieces += [_vllm_chunk({"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}), DONE]
    return _shape("vllm_hermes_lost_brace", "vllm", VLLM_HERMES + " (before the rewrite)", pieces)


def vllm_arguments_null() -> Shape:
    """vLLM: a name delta whose DeltaFunctionCall was built with arguments=None -- exclude_unset keeps an
    explicit None, so the wire says `"arguments":null` (vllm/tool_parsers/hy_v4_tool_parser.py notes it; PR
    #55298; issue #9693 "arguments=None when stream option is enabled") -- and no argument delta after it."""
    pieces = [_vllm_first(), _vllm_delta(_vllm_name_delta("get_weather", arguments=None))]
    pieces += _vllm_finish("tool_calls")
    return _shape("vllm_arguments_null", "vllm", VLLM_SOURCE, pieces)


def vllm_finish_tool_calls_empty() -> Shape:
    """vLLM before 0.32: chat_completion_stream_generator set finish_reason "tool_calls" from
    `len(tool_parser.prev_tool_call_arr) > 0`, and streaming parsers add an empty slot to prev_tool_call_arr
    when <tool_call> opens, before the name parses; when it never parses (issue #21544, "Error trying to handle
    streaming tool call"), the stream says "tool_calls" and holds no call and no content."""
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls", "stop_reason": None}
    return _shape("vllm_finish_tool_calls_empty", "vllm", VLLM_SOURCE, [_vllm_chunk(first), _vllm_chunk(last), DONE])


def vllm_error_event(content: Iterable[str] = ("Paris", " is")) -> Shape:
    """vLLM 0.32, an error after the stream began: GenerationError (finish_reason "error" from the engine) ->
    `data: ` + json.dumps(ErrorResponse.model_dump()) (generate/base/serving.py create_streaming_error_response:
    json.dumps, so ", " and ": " separators), then `data: [DONE]` anyway."""
    error = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}}
    pieces = [_vllm_first(), *(_vllm_delta({"content": p}) for p in content), _sse(json.dumps(error)), DONE]
    return _shape("vllm_error_event", "vllm", VLLM_SOURCE + " (except GenerationError)", pieces)


def vllm_cut_in_arguments() -> Shape:
    """vLLM 0.32 hermes call, the connection closed in the middle of the arguments (no finish chunk, no
    [DONE]): what a client sees when the server dies or a proxy drops the stream."""
    pieces = _vllm_tool_pieces("get_weather", ('{"', "city", '":', ' "', "Pa"), finish=None)
    return _shape("vllm_cut_in_arguments", "vllm", VLLM_HERMES, pieces, end="cut")


def vllm_stall(after_events: int = 3) -> Shape:
    """vLLM 0.32 text answer that stops after `after_events` events with the socket left open (hang)."""
    events = split_events(vllm_text().body)[:after_events]
    return _shape("vllm_stall", "vllm", VLLM_SOURCE, [e.decode() for e in events], end="hang")


# --- SGLang 0.5.23 -----------------------------------------------------------------------------------------
# python/sglang/srt/entrypoints/openai/serving_chat.py OpenAIServingChat._generate_chat_stream: content chunks by
# sse_utils.py build_sse_content (msgspec: delta always has reasoning_content, role/content omitted when None;
# choice always has logprobs, finish_reason, matched_stop; usage omitted); tool-call chunks by
# _process_tool_call_stream (pydantic model_dump_json: every null written; continuation deltas carry "id":null
# and "name":null); the finish chunk after the loop; `data: [DONE]` always.
SGLANG_MODEL = "qwen2.5-coder-0.5b"
SGLANG_ID = "5d0c1f9e8b7a46e3a2c1d0e9f8a7b6c5"  # meta_info["id"]: the request's rid (uuid4 hex)
SGLANG_CALL_ID = "call_3f2e1d0c9b8a7f6e5d4c3b2a"  # _process_tool_call_id: "call_" + uuid4().hex[:24]
SGLANG_SOURCE = "python/sglang/srt/entrypoints/openai/serving_chat.py:_generate_chat_stream"
QWEN_EOS = 151645  # <|im_end|>: matched_stop of a natural stop


def _sglang_chunk(delta: dict[str, Any], finish: str | None = None, matched_stop: Any = None) -> str:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": matched_stop}
    chunk = {"id": SGLANG_ID, "object": "chat.completion.chunk", "created": CREATED, "model": SGLANG_MODEL}
    return _sse({**chunk, "choices": [choice]})


def _sglang_tool_chunk(call: dict[str, Any]) -> str:
    delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": [call]}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}
    chunk = {"id": SGLANG_ID, "object": "chat.completion.chunk", "created": CREATED, "model": SGLANG_MODEL}
    return _sse({**chunk, "choices": [choice], "usage": None})


def _sglang_text_pieces(pieces: Iterable[str]) -> list[str]:
    out = [_sglang_chunk({"reasoning_content": None, "role": "assistant", "content": ""})]
    return out + [_sglang_chunk({"reasoning_content": None, "content": p}) for p in pieces]


def sglang_text(pieces: Iterable[str] = ("Paris", " is", " sunny", " today", ".")) -> Shape:
    """SGLang 0.5.23, a plain text answer: role chunk, content chunks, a finish chunk whose delta holds only
    reasoning_content null, finish_reason "stop", matched_stop the EOS token id."""
    out = [*_sglang_text_pieces(pieces), _sglang_chunk({"reasoning_content": None}, "stop", QWEN_EOS), DONE]
    return _shape("sglang_text", "sglang", SGLANG_SOURCE, out)


def sglang_tool_call(arguments: Iterable[str] = ('{"city": "', "Paris", '"}')) -> Shape:
    """SGLang 0.5.23 with --tool-call-parser qwen25: the name chunk (id, index, type, name, arguments "") from
    base_format_detector.py parse_streaming_increment, argument diffs with "id":null and "name":null, then the
    finish chunk: "stop" turned into "tool_calls" (has_tool_calls), matched_stop the EOS id."""
    name = {"id": SGLANG_CALL_ID, "index": 0, "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    out = [_sglang_chunk({"reasoning_content": None, "role": "assistant", "content": ""}), _sglang_tool_chunk(name)]
    for a in arguments:
        out.append(
            _sglang_tool_chunk({"id": None, "index": 0, "type": "function", "function": {"name": None, "arguments": a}})
        )
    out += [_sglang_chunk({"reasoning_content": None}, "tool_calls", QWEN_EOS), DONE]
    return _shape("sglang_tool_call", "sglang", SGLANG_SOURCE + " (_process_tool_call_stream)", out)


def sglang_error_event(content: Iterable[str] = ("Paris", " is")) -> Shape:
    """SGLang 0.5.23, an abort with a status code after the stream began (scheduler OOM abort,
    managers/schedule_batch.py): create_streaming_error_response(message, code.name, code.value) ->
    `data: {"error": {"object": "error", ...}}` (json.dumps), then `data: [DONE]`."""
    message = "Out of memory even after retracting all other requests in the decode batch. Aborting the last request."
    error = {
        "error": {"object": "error", "message": message, "type": "INTERNAL_SERVER_ERROR", "param": None, "code": 500}
    }
    out = [*_sglang_text_pieces(content), _sse(json.dumps(error)), DONE]
    return _shape("sglang_error_event", "sglang", SGLANG_SOURCE + " (abort with status_code)", out)


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


def _shape(name: str, stack: str, source: str, pieces: list[str], end: str = "finish") -> Shape:
    return Shape(name, stack, "openai", source, script(pieces, end=end))


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
