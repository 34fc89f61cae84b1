"""Stream shapes of the OpenAI-compatible stacks (llama.cpp b11312, vLLM 0.32, SGLang 0.5.23), each read in
the stack's own SSE writer (tests/replay/STREAMS.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tests.replay.streamshapes.wire import Shape, script, split_events


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


def _shape(name: str, stack: str, source: str, pieces: list[str], end: str = "finish") -> Shape:
    return Shape(name, stack, "openai", source, script(pieces, end=end))
