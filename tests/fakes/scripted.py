"""A loopback HTTP server that answers chat requests from a script of replies, for the reply kinds no
real server here can be made to send on demand: a 429 with Retry-After (hosted OpenAI-compatible APIs),
llama.cpp's HTTP 500 "Failed to parse input at pos N" (its chat parser rejecting generated text), an
empty 200 answer, a context-overflow 400. Each scripted body is a real body quoted in tests/bodies.py or
in the test that uses it, with the stack source it comes from. It records every request it received."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Script:
    replies: list[Reply]
    requests: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    def next_reply(self) -> Reply:
        # The last reply repeats once the script runs out (e.g. a server that keeps failing).
        return self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]


def chat_reply(content: str | None, *, finish_reason: str = "stop", tool_calls: Any = None) -> dict[str, Any]:
    """An OpenAI-compatible chat completion as vLLM/llama.cpp send it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@contextmanager
def scripted_server(replies: list[Reply]) -> Iterator[tuple[str, Script]]:
    script = Script(replies)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            payload = json.loads(self.rfile.read(length) or b"{}")
            script.requests.append((time.monotonic(), payload))
            reply = script.next_reply()
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()
