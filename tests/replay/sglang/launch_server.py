"""Replay of SGLang 0.5.23's server (stock SGLang cannot start on this CPU-only machine).

Run exactly like the real one, `python -m sglang.launch_server --model-path M --host H --port P
[--tool-call-parser NAME] [--served-model-name N] [--context-length C]`, with tests/replay on PYTHONPATH.
Replays shared/reference/stacks.md (SGLang), derived from SGLang's source:
- the port refuses connections while "weights load" (REPLAY_LOAD_S, default 1.5 s), then /health and
  /health_generate answer 503 during "warm-up" (REPLAY_WARMUP_S, default 1.5 s), then 200;
- GET / -> "SGLang is running"; /model_info (alias /get_model_info) carries tool_call_parser and
  reasoning_parser; /server_info (alias /get_server_info) carries version;
- without --tool-call-parser a tools= request gets HTTP 200 with the call left as plain text in
  message.content (fenced JSON, the paper's probe), no tool_calls, finish_reason "stop";
  with a parser the call comes back as native tool_calls (arguments a JSON string), finish_reason "tool_calls";
- 400s use the flat envelope {"object": "error", "message", "type": "BadRequestError", "param": null,
  "code": 400} (entrypoints/openai/utils.py create_error_response), checked in the order of
  serving_chat.py OpenAIServingChat._validate_request: "Messages cannot be empty.", "Tools cannot be empty if
  tool choice is set to required.", "Tools cannot be empty if tool choice is set to a specific tool.",
  "Tool 'X' not found in tools list.".
- "stream": true (tests/replay/STREAMS.md): SSE as serving_chat.py _generate_chat_stream writes it, after the
  same validation (its 400s stay JSON): the role chunk, content chunks (sse_utils.py build_sse_content,
  msgspec: the delta always carries reasoning_content, the choice logprobs/finish_reason/matched_stop), with a
  parser the call as a name chunk then argument chunks (_process_tool_call_stream, pydantic: every null
  written, "id" and "name" null after the first), the finish chunk ("tool_calls" when a call was streamed,
  matched_stop the EOS id), a usage chunk when stream_options.include_usage, then `data: [DONE]`.
tests/test_replay_honesty.py holds these bodies to tests/bodies.py and to the source.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import JsonHandler, answer_arguments, text_pieces

VERSION = "0.5.23"


FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


def flat_error(message: str) -> dict:
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


EOS_TOKEN = 151645  # Qwen2.5 <|im_end|>: matched_stop of a natural stop


def stream_events(model: str, content: str | None, call: dict | None, include_usage: bool) -> list[str]:
    """The SSE events of one streamed answer (content, or a parsed call), ending with [DONE]."""
    rid, created = "5d0c1f9e8b7a46e3a2c1d0e9f8a7b6c5", int(time.time())
    head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}

    def event(value: dict) -> str:
        return "data: " + json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n\n"

    def content_chunk(delta: dict, finish: str | None = None, matched_stop: int | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": matched_stop}
        return event({**head, "choices": [choice]})

    def tool_chunk(call_delta: dict) -> str:
        delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": [call_delta]}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}
        return event({**head, "choices": [choice], "usage": None})

    events = [content_chunk({"reasoning_content": None, "role": "assistant", "content": ""})]
    if call is not None:
        arguments = json.dumps(call["arguments"])
        name = {
            "id": "call_3f2e1d0c9b8a7f6e5d4c3b2a",
            "index": 0,
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        events.append(tool_chunk(name))
        for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
            events.append(
                tool_chunk({"id": None, "index": 0, "type": "function", "function": {"name": None, "arguments": piece}})
            )
    else:
        events += [content_chunk({"reasoning_content": None, "content": piece}) for piece in text_pieces(content or "")]
    events.append(content_chunk({"reasoning_content": None}, "tool_calls" if call else "stop", EOS_TOKEN))
    if include_usage:
        usage = {
            "prompt_tokens": 20,
            "total_tokens": 30,
            "completion_tokens": 10,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        }
        events.append(event({**head, "choices": [], "usage": usage}))
    return [*events, "data: [DONE]\n\n"]


def make_handler(args: argparse.Namespace, ready_at: float) -> type[JsonHandler]:
    served = args.served_model_name or args.model_path

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self.send_json(200 if time.monotonic() >= ready_at else 503, "")
            elif self.path == "/":
                self.send_json(200, "SGLang is running", "text/plain")
            elif self.path in ("/model_info", "/get_model_info"):
                self.send_json(
                    200,
                    {
                        "model_path": args.model_path,
                        "tokenizer_path": args.model_path,
                        "is_generation": True,
                        "tool_call_parser": args.tool_call_parser,
                        "reasoning_parser": None,
                    },
                )
            elif self.path in ("/server_info", "/get_server_info"):
                self.send_json(
                    200, {"version": VERSION, "model_path": args.model_path, "tool_call_parser": args.tool_call_parser}
                )
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": served, "object": "model"}]})
            else:
                self.send_json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self.path == "/flush_cache":  # http_server.py flush_cache: 200 with this text when idle
                self.send_json(200, FLUSHED, "text/plain; charset=utf-8")
                return
            if self.path != "/v1/chat/completions":
                self.send_json(404, {"detail": "Not Found"})
                return
            body = self.read_json() or {}
            tools = body.get("tools") or []
            choice = body.get("tool_choice")
            if not body.get("messages"):
                self.send_json(400, flat_error("Messages cannot be empty."))
                return
            if isinstance(choice, str) and choice.lower() == "required" and not tools:
                self.send_json(400, flat_error("Tools cannot be empty if tool choice is set to required."))
                return
            if isinstance(choice, dict):
                if not tools:
                    self.send_json(400, flat_error("Tools cannot be empty if tool choice is set to a specific tool."))
                    return
                wanted = choice.get("function", {}).get("name")
                if wanted not in {t["function"]["name"] for t in tools}:
                    self.send_json(400, flat_error(f"Tool '{wanted}' not found in tools list."))
                    return
            message: dict = {"role": "assistant", "content": "The pod api-1 is running.", "tool_calls": None}
            finish = "stop"
            if tools:
                call = {"name": tools[0]["function"]["name"], "arguments": answer_arguments(tools[0])}
                if args.tool_call_parser:
                    message["content"] = None
                    message["tool_calls"] = [
                        {
                            "id": "call_0",
                            "index": 0,
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                        }
                    ]
                    finish = "tool_calls"
                else:
                    message["content"] = "```json\n" + json.dumps(call) + "\n```"
            if body.get("stream") is True:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                parsed = call if finish == "tool_calls" else None
                events = stream_events(body.get("model") or served, message["content"], parsed, include_usage)
                self.send_stream(200, "text/event-stream", events)
                return
            self.send_json(
                200,
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": served,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
                },
            )

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name")
    parser.add_argument("--host", default="127.0.0.1")  # SGLang's default host
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tool-call-parser")
    parser.add_argument("--context-length", type=int)
    args, _unknown = parser.parse_known_args()
    print(f"loading weights from {args.model_path}", flush=True)
    time.sleep(float(os.environ.get("REPLAY_LOAD_S", "1.5")))  # port closed: connection refused
    ready_at = time.monotonic() + float(os.environ.get("REPLAY_WARMUP_S", "1.5"))
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, ready_at))
    print("server started; warming up", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
