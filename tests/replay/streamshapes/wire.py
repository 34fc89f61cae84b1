"""The scripted replay server: a `Script` (status, headers, timed pieces, an end action) served over real HTTP
on loopback (see the package docstring)."""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable
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
FIXTURES = Path(__file__).resolve().parents[2] / "data" / "streams"

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
