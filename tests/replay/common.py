"""Shared pieces of the replay servers: a JSON HTTP handler and the deterministic 'model' answer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any


def answer_arguments(tool: dict[str, Any]) -> dict[str, Any]:
    """Deterministic arguments for a tool: each required field gets a value of its declared type."""
    parameters = tool.get("function", {}).get("parameters") or {}
    properties = parameters.get("properties") or {}
    values = {"string": "api-1", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    return {
        name: values.get(properties.get(name, {}).get("type", "string"), "api-1")
        for name in parameters.get("required", [])
    }


def text_pieces(text: str) -> list[str]:
    """The 'tokens' a replay streams a text in: each word with the whitespace before it (joined, the text)."""
    return re.findall(r"\s*\S+|\s+", text) or [text]


def go_json(value: Any) -> str:
    """Go encoding/json.Marshal: compact, keys in the struct's order, and <, >, & written as \\u003c etc."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class JsonHandler(BaseHTTPRequestHandler):
    server_version = "replay"

    def log_message(self, format: str, *args: Any) -> None:
        print(f"{self.command} {self.path} " + format % args, flush=True)

    def read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"null")
        except ValueError:
            return None

    def send_json(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_stream(self, status: int, content_type: str, pieces: Iterable[str]) -> None:
        """A streamed body as the real servers send one: HTTP/1.1 chunked transfer-encoding, one chunk per piece,
        each flushed. This response alone is HTTP/1.1 (the class stays HTTP/1.0, so the JSON answers keep their
        bytes); `Connection: close` ends the connection after it."""
        self.protocol_version = "HTTP/1.1"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for piece in pieces:
            data = piece.encode()
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True
