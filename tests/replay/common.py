"""Shared pieces of the replay servers: a JSON HTTP handler and the deterministic 'model' answer."""

from __future__ import annotations

import json
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
