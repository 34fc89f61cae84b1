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

from tests.replay.streamshapes.catalogue import *  # noqa: F403
from tests.replay.streamshapes.ollama_shapes import *  # noqa: F403
from tests.replay.streamshapes.openai_shapes import *  # noqa: F403
from tests.replay.streamshapes.wire import *  # noqa: F403
