"""Streamed chat requests on the wire: read an SSE or NDJSON answer incrementally, with two timeouts.

- The SSE grammar (line endings `\\r\\n`/`\\n`/`\\r`, fields, multi-line data, named events) is httpx-sse's own
  decoder (`SSELineDecoder`, `SSEDecoder`, the same ones `EventSource.iter_sse` uses); comment lines (`: ping`)
  are kept here as heartbeats, which `iter_sse` drops. Ollama's NDJSON is split by the same line decoder.
- The body is read on a reader thread and handed over a queue, so the two limits hold exactly whatever the
  socket does: the time to the first byte (`first_byte_s`) and the longest gap between events (`gap_s`), and a
  deadline for the whole request (`total_s`). A stream that goes silent is cut (`stalled`), never waited on.
- A reply that is not a stream (any non-2xx, or a 2xx JSON body from a stack that ignored `stream`) is read
  whole and returned as a plain exchange, labelled exactly as a non-streamed one.
A failure is returned as data, never raised.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse._decoders import SSEDecoder, SSELineDecoder  # private: httpx-sse pinned exactly (pyproject.toml)

from orchestrator.core.streamclassify import StreamCut
from orchestrator.core.streams import StreamApi, StreamEvent, is_terminator
from orchestrator.core.types import TransportError

STREAM_CONTENT_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")
THREAD_GRACE_S = 5.0  # the reader's own socket timeout beyond the caller's limits: it always ends by itself
AFTER_TERMINATOR_S = 1.0  # how long to keep listening after [DONE] / done: true for events a stack sends late


@dataclass(frozen=True)
class StreamTimeouts:
    first_byte_s: float
    gap_s: float
    total_s: float


@dataclass
class StreamCapture:
    """Everything one streamed answer delivered, with arrival offsets, and how it ended."""

    api: StreamApi
    events: list[StreamEvent] = field(default_factory=list)
    cut: StreamCut | None = None
    cut_message: str | None = None
    ttfb_s: float | None = None  # the first body byte
    max_gap_s: float | None = None  # the longest silence between two things arriving (first byte onwards)
    duration_s: float = 0.0
    content_type: str | None = None

    def record(self) -> dict[str, Any]:
        """The side-file form: every event with its offset; timings; how it ended."""
        return {
            "api": self.api,
            "content_type": self.content_type,
            "cut": self.cut,
            "cut_message": self.cut_message,
            "ttfb_s": _round(self.ttfb_s),
            "max_gap_s": _round(self.max_gap_s),
            "duration_s": _round(self.duration_s),
            "events": [event.to_list() for event in self.events],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def split_events(chunks: Any, api: StreamApi, clock: Callable[[], float | None]) -> Any:
    """Text chunks -> StreamEvents, as they complete (`clock()` stamps each)."""
    lines = SSELineDecoder()
    sse = SSEDecoder()

    def events_of(line: str) -> list[StreamEvent]:
        if api == "ollama":
            return [StreamEvent(kind="line", data=line, t=clock())] if line.strip() else []
        if line.startswith(":"):
            return [StreamEvent(kind="comment", data=line[1:].strip(), t=clock())]
        event = sse.decode(line)
        if event is None:
            return []
        return [StreamEvent(kind="event", data=event.data, event=event.event or "", t=clock())]

    for chunk in chunks:
        for line in lines.decode(chunk):
            yield from events_of(line)
    for line in [*lines.flush(), ""]:  # a last event without its blank line still counts as sent
        yield from events_of(line)


def parse_stream_text(text: str, api: StreamApi) -> list[StreamEvent]:
    """A stored raw stream (SSE or NDJSON text) -> its events, without times."""
    return list(split_events([text] if text else [], api, lambda: None))


class _Reader(threading.Thread):
    """Reads one streamed reply and hands what arrives to the caller's queue."""

    def __init__(self, client: httpx.Client, url: str, payload: dict[str, Any], api: StreamApi, limit: float):
        super().__init__(daemon=True, name="stream-reader")
        self.client, self.url, self.payload, self.api, self.limit = client, url, payload, api, limit
        self.out: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.stop = threading.Event()
        self.start_time = time.monotonic()
        self.response: httpx.Response | None = None

    def close(self) -> None:
        """Stop reading and drop the connection now (an abandoned generation must not hold the server's slot
        until the reader's own timeout)."""
        self.stop.set()
        response = self.response
        if response is not None:
            with contextlib.suppress(Exception):  # closing under the reader thread: the socket is gone either way
                response.close()

    def clock(self) -> float:
        return time.monotonic() - self.start_time

    def run(self) -> None:
        timeout = httpx.Timeout(self.limit, connect=min(self.limit, 30.0))
        try:
            with self.client.stream("POST", self.url, json=self.payload, timeout=timeout) as response:
                self.response = response
                content_type = response.headers.get("content-type", "").partition(";")[0].strip()
                ndjson = self.api == "ollama" and content_type != "application/json"
                streamed = 200 <= response.status_code < 300 and (content_type in STREAM_CONTENT_TYPES or ndjson)
                if not streamed:
                    self.out.put(("reply", (response.status_code, response.read(), response.headers)))
                    return
                self.out.put(("open", (response.status_code, content_type)))
                for event in split_events(self._chunks(response), self.api, self.clock):
                    if self.stop.is_set():
                        return
                    self.out.put(("event", event))
            self.out.put(("end", None))
        except httpx.TimeoutException as exc:
            self.out.put(("timeout", f"{type(exc).__name__}: {exc}"))
        except httpx.HTTPError as exc:
            self.out.put(("broken", exc))
        except Exception as exc:  # a decoding failure deep in the client: data, never a crash of the sweep
            self.out.put(("broken", exc))

    def _chunks(self, response: httpx.Response) -> Any:
        for chunk in response.iter_text():
            self.out.put(("bytes", None))
            yield chunk


@dataclass
class StreamResult:
    """What `read_stream` returns: a stream (capture), or a plain reply, or a transport failure."""

    http_status: int | None = None
    capture: StreamCapture | None = None
    reply_body: Any = None
    reply_headers: Any = None
    transport_error: TransportError | None = None


def _plain_body(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def read_stream(
    client: httpx.Client,
    url: str,
    payload: dict[str, Any],
    api: StreamApi,
    timeouts: StreamTimeouts,
    on_event: Callable[[StreamEvent, int], None] | None = None,
) -> StreamResult:
    """POST a streaming request and read it within its limits. `on_event(event, n_events)` sees each event."""
    reader = _Reader(client, url, payload, api, max(timeouts.first_byte_s, timeouts.gap_s) + THREAD_GRACE_S)
    reader.start()
    result = StreamResult()
    capture: StreamCapture | None = None
    last_activity: float | None = None
    terminated_at: float | None = None
    try:
        while True:
            now = reader.clock()
            limit = timeouts.first_byte_s if last_activity is None else last_activity + timeouts.gap_s
            if terminated_at is not None:
                limit = terminated_at + AFTER_TERMINATOR_S
            wait = min(limit, timeouts.total_s) - now
            try:
                kind, value = reader.out.get(timeout=max(0.0, wait))
            except queue.Empty:
                if terminated_at is not None and capture is not None:  # whole: the socket's later silence is not a cut
                    capture.duration_s = terminated_at
                    return result
                return _ran_out(result, capture, reader.clock(), last_activity, timeouts)
            if kind == "reply":
                status, raw, headers = value
                result.http_status, result.reply_body, result.reply_headers = status, _plain_body(raw), headers
                return result
            if kind == "open":
                result.http_status = value[0]
                capture = result.capture = StreamCapture(api=api, content_type=value[1])
                continue
            if kind in ("bytes", "event"):
                now = reader.clock()
                if capture is not None and last_activity is not None:
                    capture.max_gap_s = max(capture.max_gap_s or 0.0, now - last_activity)
                if capture is not None and capture.ttfb_s is None:
                    capture.ttfb_s = now
                last_activity = now
                if kind == "event" and capture is not None:
                    capture.events.append(value)
                    if terminated_at is None and is_terminator(value, api):
                        terminated_at = now
                    if on_event is not None:
                        on_event(value, len(capture.events))
                continue
            return _ended(result, capture, kind, value, reader.clock())
    finally:
        reader.close()


def _ran_out(
    result: StreamResult,
    capture: StreamCapture | None,
    now: float,
    last_activity: float | None,
    timeouts: StreamTimeouts,
) -> StreamResult:
    """A limit passed: before anything arrived it is a timeout (no output: retryable); after, the stream is cut."""
    if capture is None or last_activity is None:
        where = "headers" if capture is None else "first byte"
        message = f"no {where} within {timeouts.first_byte_s:g}s"
        result.transport_error = TransportError(kind="timeout", message=message)
        if capture is not None:
            capture.duration_s = now
            capture.cut, capture.cut_message = "stalled", message
        return result
    capture.duration_s = now
    if now >= timeouts.total_s:
        capture.cut, capture.cut_message = "deadline", f"the request ran past {timeouts.total_s:g}s"
    else:
        capture.cut = "stalled"
        capture.cut_message = f"nothing arrived for {now - last_activity:.1f}s (gap limit {timeouts.gap_s:g}s)"
        capture.max_gap_s = max(capture.max_gap_s or 0.0, now - last_activity)
    return result


def _ended(result: StreamResult, capture: StreamCapture | None, kind: str, value: Any, now: float) -> StreamResult:
    """The reader finished: normally, or with the connection broken under it."""
    if capture is None:  # it broke before any reply began
        message = value if isinstance(value, str) else f"{type(value).__name__}: {value}"
        error_kind = "timeout" if kind == "timeout" else _transport_kind(value)
        result.transport_error = TransportError(kind=error_kind, message=message)
        return result
    capture.duration_s = now
    if kind in ("broken", "timeout"):
        capture.cut = "truncated"
        capture.cut_message = value if isinstance(value, str) else f"{type(value).__name__}: {value}"
    return result


def _transport_kind(exc: Any) -> str:
    return "connection" if isinstance(exc, httpx.ConnectError) else "protocol"
