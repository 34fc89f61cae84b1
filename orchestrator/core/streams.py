"""Stream assembly: the events of one streamed answer -> the body the same answer has without streaming. Pure.

A streamed turn is labelled by the same rules as a non-streamed one: its events are assembled into the reply
body the stack would have sent with `stream: false` (content concatenated, reasoning kept apart, tool calls
assembled by `index`: id and name from the first delta of an index, `arguments` concatenated as OpenAI clients
do), and that body goes through the one classifier. What only a stream can get wrong is recorded beside it:
- OpenAI-compatible SSE (vLLM, SGLang, llama.cpp, hosted): `data:` events, `data: [DONE]` as the terminator,
  an `{"error": ...}` payload or a named `event: error` mid-stream (llama.cpp: server-http/server.cpp);
- Ollama `/api/chat` NDJSON: one JSON object per line until `"done": true`; an `{"error": ...}` line mid-stream.
Facts a stream adds: `stream:index_collision` (a second id under one index: the calls were merged),
`stream:bad_event` (an event that is not JSON), `stream:null_arguments` (an `arguments` delta of null),
`stream:no_index` (a tool-call delta without an index), `stream:after_done` (events after the terminator).
Never raises: any event list assembles to some body and some facts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

StreamApi = Literal["openai", "ollama"]
EventKind = Literal["event", "comment", "line"]

INDEX_COLLISION_FLAG = "stream:index_collision"
BAD_EVENT_FLAG = "stream:bad_event"
NULL_ARGUMENTS_FLAG = "stream:null_arguments"
NO_INDEX_FLAG = "stream:no_index"
AFTER_DONE_FLAG = "stream:after_done"
SSE_DONE = "[DONE]"


def _text(value: Any) -> str:
    """A stored non-string as JSON text; one nested past what the encoder walks stands as empty."""
    try:
        return json.dumps(value, default=str)
    except (RecursionError, ValueError):
        return ""


def _seconds(t: Any) -> float | None:
    """A stored time; a non-number, or one past float's range (10**400), is no time."""
    if not isinstance(t, int | float) or isinstance(t, bool):
        return None
    try:
        return float(t)
    except OverflowError:
        return None


@dataclass(frozen=True)
class StreamEvent:
    """One thing that arrived on a stream: an SSE event (its `event` name, '' when unnamed, and its data), an SSE
    comment (a heartbeat such as `: ping`), or one NDJSON line; `t` is its arrival offset in seconds from the
    request (None when read from stored text that kept no times)."""

    kind: EventKind
    data: str
    event: str = ""
    t: float | None = None

    def to_list(self) -> list[Any]:
        return [self.t, self.kind, self.event, self.data]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> StreamEvent:
        """The stored form `[t, kind, event, data]` back; anything malformed becomes a data-less comment."""
        if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 4:
            return cls(kind="comment", data=_text(item)[:200])
        t, kind, event, data = item
        known: EventKind = "event" if kind == "event" else "line" if kind == "line" else "comment"
        return cls(
            kind=known,
            data=data if isinstance(data, str) else _text(data),
            event=event if isinstance(event, str) else "",
            t=_seconds(t),
        )


@dataclass
class _Call:
    index: int
    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: str = ""
    saw_arguments: bool = False
    ids: list[str] = field(default_factory=list)  # every distinct id seen under this index (two: a collision)


@dataclass
class StreamAssembly:
    """What a stream assembled to: the equivalent non-streamed body and the facts only a stream has."""

    body: dict[str, Any]
    terminated: bool = False  # [DONE] / "done": true arrived
    error: Any = None  # the payload of an error event, when one arrived
    error_status: int | None = None  # the HTTP status the error names (llama.cpp's `code`), when it names one
    output_seen: bool = False  # any content, reasoning or tool-call delta arrived: model output exists
    flags: list[str] = field(default_factory=list)
    call_indexes: list[int] = field(default_factory=list)  # one per assembled call, in index order
    call_ids: list[list[str]] = field(default_factory=list)  # per assembled call, the ids its index carried
    first_output_s: float | None = None  # arrival of the first output-bearing event
    last_output_s: float | None = None
    n_events: int = 0  # data events / lines (comments not counted)
    n_output_events: int = 0
    n_comments: int = 0

    def facts(self) -> dict[str, Any]:
        """The record of this assembly beside a turn (the body itself goes through the classifier)."""
        return {
            "terminated": self.terminated,
            "error_event": self.error is not None,
            "output_seen": self.output_seen,
            "call_indexes": list(self.call_indexes),
            "call_ids": [list(ids) for ids in self.call_ids],
            "events": self.n_events,
            "output_events": self.n_output_events,
            "comments": self.n_comments,
            "first_output_s": self.first_output_s,
            "last_output_s": self.last_output_s,
        }


class _Builder:
    """Accumulates one stream's deltas; both wire formats feed it."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.extra: dict[str, Any] = {}  # usage, timings, Ollama's counters: kept as the last event said
        self.completion = False  # the chunks were a raw completion's (`text`), not a chat message's
        self.out = StreamAssembly(body={})

    def saw_output(self, t: float | None) -> None:
        out = self.out
        out.output_seen = True
        out.n_output_events += 1
        if out.first_output_s is None:
            out.first_output_s = t
        out.last_output_s = t

    def flag(self, name: str) -> None:
        if name not in self.out.flags:
            self.out.flags.append(name)

    def text(self, value: Any, into: list[str], t: float | None) -> None:
        if isinstance(value, str) and value:
            into.append(value)
            self.saw_output(t)

    def tool_delta(self, position: int, delta: Any, t: float | None) -> None:
        if not isinstance(delta, Mapping):
            self.flag(BAD_EVENT_FLAG)
            return
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            self.flag(NO_INDEX_FLAG)
            index = position
        call = self.calls.setdefault(index, _Call(index=index))
        call_id = delta.get("id")
        if isinstance(call_id, str) and call_id:
            if call_id not in call.ids:
                call.ids.append(call_id)
            if call.id is None:
                call.id = call_id
            elif call.id != call_id:  # a second call under the same index: a client merges them
                self.flag(INDEX_COLLISION_FLAG)
        if isinstance(delta.get("type"), str) and call.type is None:
            call.type = delta["type"]
        function = delta.get("function")
        function = function if isinstance(function, Mapping) else {}
        name = function.get("name")
        if isinstance(name, str) and name and call.name is None:
            call.name = name
        if "arguments" in function:
            arguments = function.get("arguments")
            if arguments is None:
                self.flag(NULL_ARGUMENTS_FLAG)
            elif isinstance(arguments, str):
                call.arguments += arguments
                call.saw_arguments = True
            else:  # Ollama: arguments arrive as an object, whole
                call.arguments += json.dumps(arguments, ensure_ascii=False)
                call.saw_arguments = True
        self.saw_output(t)

    def tool_calls(self, api: StreamApi) -> list[dict[str, Any]]:
        out = []
        for index in sorted(self.calls):
            call = self.calls[index]
            arguments: Any = call.arguments if call.saw_arguments else None
            if api == "ollama" and arguments is not None:
                ok, decoded = _loads(arguments)  # Ollama's own body carries arguments as an object
                arguments = decoded if ok else arguments
            function = {"name": call.name, "arguments": arguments}
            if api == "ollama":
                function["index"] = index
            out.append({"id": call.id, "type": call.type or "function", "function": function})
            self.out.call_indexes.append(index)
            self.out.call_ids.append(list(call.ids))
        return out


def is_terminator(event: StreamEvent, api: StreamApi) -> bool:
    """`data: [DONE]` (SSE) or a line with `"done": true` (Ollama NDJSON): the stack says the answer is whole."""
    if api == "ollama":
        ok, payload = _loads(event.data)
        return ok and _ollama_done(payload)
    return event.kind != "comment" and event.data.strip() == SSE_DONE


def _ollama_done(payload: Any) -> bool:
    return isinstance(payload, Mapping) and payload.get("done") is True


def _loads(data: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(data)
    except (ValueError, RecursionError):
        return False, None


def _error_status(error: Any) -> int | None:
    code = error.get("code") if isinstance(error, Mapping) else None
    return code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600 else None


def _openai_event(builder: _Builder, event: StreamEvent) -> None:
    out = builder.out
    if is_terminator(event, "openai"):
        out.terminated = True
        return
    ok, payload = _loads(event.data)
    carries_error = ok and isinstance(payload, Mapping) and payload.get("error") is not None  # "error": null is none
    if event.event == "error" or carries_error:
        error = payload.get("error") if carries_error else payload
        out.error = {"error": error if ok else event.data}
        out.error_status = _error_status(error)
        return
    if not ok or not isinstance(payload, Mapping):
        builder.flag(BAD_EVENT_FLAG)
        return
    for key in ("usage", "timings", "model", "system_fingerprint", "id"):
        if payload.get(key) is not None:
            builder.extra[key] = payload[key]
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return  # a usage-only chunk, or an empty keep-alive
    choice = choices[0]
    if isinstance(choice.get("text"), str):  # a raw completion's chunk (raw-template): text, no delta
        builder.completion = True
        builder.text(choice["text"], builder.content, event.t)
    delta = choice.get("delta")
    delta = delta if isinstance(delta, Mapping) else {}
    builder.text(delta.get("content"), builder.content, event.t)
    builder.text(delta.get("reasoning_content") or delta.get("reasoning"), builder.reasoning, event.t)
    tool_calls = delta.get("tool_calls")
    if isinstance(tool_calls, list):
        for position, item in enumerate(tool_calls):
            builder.tool_delta(position, item, event.t)
    if isinstance(choice.get("finish_reason"), str):
        builder.finish_reason = choice["finish_reason"]


def _ollama_line(builder: _Builder, event: StreamEvent) -> None:
    out = builder.out
    if not event.data.strip():
        return
    ok, payload = _loads(event.data)
    if not ok or not isinstance(payload, Mapping):
        builder.flag(BAD_EVENT_FLAG)
        return
    if payload.get("error") is not None:
        out.error = {"error": payload["error"]}
        return
    message = payload.get("message")
    message = message if isinstance(message, Mapping) else {}
    builder.text(message.get("content"), builder.content, event.t)
    builder.text(message.get("thinking"), builder.reasoning, event.t)
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        offset = len(builder.calls)
        for position, item in enumerate(tool_calls):
            function = item.get("function") if isinstance(item, Mapping) else None
            if isinstance(function, Mapping) and "index" in function and isinstance(item, Mapping):
                builder.tool_delta(offset + position, {**item, "index": function.get("index")}, event.t)
            else:
                builder.tool_delta(offset + position, item, event.t)
    for key in ("model", "created_at", "done_reason", "total_duration", "prompt_eval_count", "eval_count",
                "eval_duration", "prompt_eval_duration", "load_duration"):
        if key in payload:
            builder.extra[key] = payload[key]
    if _ollama_done(payload):
        out.terminated = True


def _body(builder: _Builder, api: StreamApi) -> dict[str, Any]:
    content = "".join(builder.content)
    reasoning = "".join(builder.reasoning)
    calls = builder.tool_calls(api)
    if api == "ollama":
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            message["thinking"] = reasoning
        if calls:
            message["tool_calls"] = calls
        return {**builder.extra, "message": message, "done": builder.out.terminated}
    if builder.completion and not calls:
        choice = {"index": 0, "text": content, "finish_reason": builder.finish_reason}
        return {"object": "text_completion", **builder.extra, "choices": [choice]}
    message = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": builder.finish_reason}
    return {"object": "chat.completion", **builder.extra, "choices": [choice]}


def assemble(events: Sequence[StreamEvent], api: StreamApi) -> StreamAssembly:
    """The events of one stream -> the equivalent non-streamed body and the stream's own facts."""
    builder = _Builder()
    out = builder.out
    for event in events:
        if event.kind == "comment":
            out.n_comments += 1
            continue
        out.n_events += 1
        if out.terminated or out.error is not None:
            builder.flag(AFTER_DONE_FLAG)
            continue
        if api == "ollama":
            _ollama_line(builder, event)
        else:
            _openai_event(builder, event)
    out.body = _body(builder, api)
    return out
