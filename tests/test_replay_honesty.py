"""The replay servers (tests/replay: Ollama, SGLang) must answer what the real stacks answer. For each situation
that tests/bodies.py also describes, request it from the replay and compare with the body the classifier tests
use; generated ids, timestamps and token counts are compared by form, everything else by value. Situations
bodies.py does not hold are checked against the stack source they cite (named beside each expectation)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.serving.build import server_config
from orchestrator.serving.launchers import running_server
from orchestrator.serving.registry import load_stack
from tests import bodies as b
from tests.conftest import REPLAY_DIR

MESSAGES = [{"role": "user", "content": "What is the status of pod api-1?"}]
TOOL_CALL_ID = re.compile(r"^call_[a-z0-9]{8}$")  # Ollama server/routes.go toolCallId


@pytest.fixture(scope="module")
def ollama() -> Iterator[str]:
    config = server_config(
        spec=load_stack("ollama"), stack="ollama",
        tool_config=None,
        launcher="process",
        model="x",
        binary=str(REPLAY_DIR / "ollama"),
        ready_timeout_s=30,
    )
    with running_server(config, run_id="test-replay-honesty") as handle:
        yield handle.base_url


@pytest.fixture(scope="module")
def sglang(replay_env: dict[str, str], python_exe: str) -> Iterator[str]:
    config = server_config(
        spec=load_stack("sglang"), stack="sglang",
        tool_config=None,
        launcher="process",
        model="qwen2.5-coder-0.5b",
        model_path="/models/qwen2.5-coder-0.5b",
        python=python_exe,
        extra_env={**replay_env, "REPLAY_LOAD_S": "0.2", "REPLAY_WARMUP_S": "0.2"},
        ready_timeout_s=60,
    )
    with running_server(config, run_id="test-replay-honesty") as handle:
        yield handle.base_url


def post(base_url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = httpx.post(base_url + path, json=body, timeout=10)
    return response.status_code, response.json()


def v1_error(status: int, message: str) -> dict[str, Any]:
    """Ollama /v1: middleware/openai.go writeError wraps the native error with openai.NewError (400
    invalid_request_error, 404 not_found_error, else api_error; param and code null)."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# ------------------------------------------------------------------------------------------------------- Ollama


@pytest.mark.server
@pytest.mark.parametrize(
    ("path", "model", "tools", "status", "expected"),
    [
        # A model without the tools capability, offered tools (the paper's Phi-3 and Gemma-3 rows).
        ("/api/chat", "phi3", True, 400, b.ollama_api_refusal("phi3")),
        ("/api/chat", "gemma3:270m", True, 400, b.ollama_api_refusal("gemma3:270m")),
        ("/v1/chat/completions", "phi3", True, 400, b.ollama_v1_refusal("phi3")),
        ("/v1/chat/completions", "gemma3:270m", True, 400, b.ollama_v1_refusal("gemma3:270m")),
        # An unknown model: ChatHandler names it as sent; /v1 wraps that as not_found_error.
        ("/api/chat", "nosuch", True, 404, b.ollama_not_found("nosuch")),
        ("/api/chat", "nosuch", False, 404, b.ollama_not_found("nosuch")),
        ("/v1/chat/completions", "nosuch", True, 404, v1_error(404, b.ollama_not_found("nosuch")["error"])),
    ],
)
def test_ollama_error_bodies_equal_the_real_ones(
    ollama: str, path: str, model: str, tools: bool, status: int, expected: dict[str, Any]
) -> None:
    body = {"model": model, "messages": MESSAGES, "stream": False, **({"tools": b.TOOLS} if tools else {})}
    assert post(ollama, path, body) == (status, expected)


@pytest.mark.server
def test_ollama_show_names_an_unknown_model_with_its_tag(ollama: str) -> None:
    # server/routes.go ShowHandler: req.Model = name.DisplayShortest() before the lookup, so the tag is added.
    assert post(ollama, "/api/show", {"model": "nosuch"}) == (404, b.ollama_not_found("nosuch:latest"))
    assert post(ollama, "/api/show", {"model": "nosuch:7b"}) == (404, b.ollama_not_found("nosuch:7b"))


@pytest.mark.server
def test_ollama_empty_messages(ollama: str) -> None:
    # middleware/openai.go ChatMiddleware refuses before any model lookup...
    status, body = post(ollama, "/v1/chat/completions", {"model": "phi3", "messages": [], "tools": b.TOOLS})
    assert (status, body) == (400, v1_error(400, "[] is too short - 'messages'"))
    # ...while ChatHandler checks the model's capabilities first, then answers the warm-up with done_reason load.
    assert post(ollama, "/api/chat", {"model": "phi3", "messages": [], "tools": b.TOOLS}) == (
        400,
        b.ollama_api_refusal("phi3"),
    )
    response = httpx.post(ollama + "/api/chat", json={"model": "phi3", "messages": []}, timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    assert response.json() == {
        "model": "phi3",
        "created_at": response.json()["created_at"],
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "load",
    }


@pytest.mark.server
def test_ollama_native_call_has_the_real_shape(ollama: str) -> None:
    status, body = post(
        ollama, "/api/chat", {"model": "llama3.2", "messages": MESSAGES, "tools": b.TOOLS, "stream": False}
    )
    assert status == 200
    [call] = body["message"]["tool_calls"]
    # api.ToolCall: id (routes.go toolCallId) and function {index, name, arguments as a JSON object}.
    assert TOOL_CALL_ID.match(call["id"]) and set(call) == {"id", "function"}
    assert call["function"] == {"index": 0, "name": "pod_status", "arguments": {"name": "api-1"}}
    expected = b.ollama_chat_reply("", [call])
    generated = ("model", "created_at", "prompt_eval_count", "eval_count")
    assert body == {**expected, **{key: body[key] for key in generated}}
    assert isinstance(body["prompt_eval_count"], int) and isinstance(body["eval_count"], int)


@pytest.mark.server
def test_ollama_v1_call_has_the_real_shape(ollama: str) -> None:
    request = {"model": "llama3.2", "messages": MESSAGES, "tools": b.TOOLS}
    status, body = post(ollama, "/v1/chat/completions", request)
    assert status == 200
    [call] = body["choices"][0]["message"]["tool_calls"]
    assert TOOL_CALL_ID.match(call["id"])
    # openai/openai.go ToToolCalls: the native id, type, index, arguments serialised to a JSON string.
    expected_call = {**b.openai_tool_call("pod_status", {"name": "api-1"}, call["id"]), "index": 0}
    expected = b.openai_reply("", [expected_call], model="llama3.2", system_fingerprint="fp_ollama")
    assert re.match(r"^chatcmpl-\d+$", body["id"]) and isinstance(body["created"], int)
    assert set(body["usage"]) == set(expected["usage"])
    assert body == {**expected, "id": body["id"], "created": body["created"], "usage": body["usage"]}


def sse_data(text: str) -> list[Any]:
    """The data of each SSE event ("[DONE]" as the string), in order; every event is one `data: ` line."""
    events = text.split("\n\n")
    assert events[-1] == "" and all(e.startswith("data: ") and "\n" not in e for e in events[:-1]), text
    return [e[6:] if e == "data: [DONE]" else json.loads(e[6:]) for e in events[:-1]]


@pytest.mark.server
def test_ollama_streams_ndjson_by_default(ollama: str) -> None:
    # server/routes.go writeChatResponse streams unless "stream" is false; streamResponse writes one
    # json.Marshal(api.ChatResponse) + "\n" per piece, chunked, and ends with the done line.
    response = httpx.post(ollama + "/api/chat", json={"model": "llama3.2", "messages": MESSAGES}, timeout=10)
    assert response.headers["content-type"].startswith("application/x-ndjson")
    assert response.headers["transfer-encoding"] == "chunked"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True] and len(lines) > 2
    assert "".join(line["message"]["content"] for line in lines) == "The pod api-1 is running."
    assert all(list(line)[:4] == ["model", "created_at", "message", "done"] for line in lines)
    assert lines[-1]["message"] == {"role": "assistant", "content": ""} and lines[-1]["done_reason"] == "stop"
    assert {"prompt_eval_count", "eval_count", "total_duration"} <= set(lines[-1])
    assert all(line["model"] == "llama3.2" for line in lines)  # ChatHandler: Model is req.Model, as sent


@pytest.mark.server
def test_ollama_streamed_call_arrives_whole(ollama: str) -> None:
    request = {"model": "llama3.2", "messages": MESSAGES, "tools": b.TOOLS}
    lines = [json.loads(line) for line in httpx.post(ollama + "/api/chat", json=request, timeout=10).text.splitlines()]
    assert [line["done"] for line in lines] == [False, True]
    [call] = lines[0]["message"]["tool_calls"]  # the tool parser holds the text back and sends the call whole
    assert lines[0]["message"]["content"] == "" and TOOL_CALL_ID.match(call["id"])
    assert call["function"] == {"index": 0, "name": "pod_status", "arguments": {"name": "api-1"}}


@pytest.mark.server
@pytest.mark.parametrize(("tools", "finish"), [(True, "tool_calls"), (False, "stop")])
def test_ollama_v1_stream_is_sse(ollama: str, tools: bool, finish: str) -> None:
    # middleware/openai.go ChatWriter.writeResponse: a chunk per native line, the done chunk, usage, [DONE].
    request = {"model": "llama3.2", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    response = httpx.post(ollama + "/v1/chat/completions", json={**request, **({"tools": b.TOOLS} if tools else {})})
    assert response.headers["content-type"] == "text/event-stream"
    *chunks, usage, done = sse_data(response.text)
    assert done == "[DONE]" and usage["choices"] == [] and usage["usage"]["total_tokens"] == 30
    assert all(c["object"] == "chat.completion.chunk" and c["system_fingerprint"] == "fp_ollama" for c in chunks)
    choices = [c["choices"][0] for c in chunks]
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + [finish]
    assert all(c["delta"]["role"] == "assistant" for c in choices)
    if tools:
        [call] = choices[0]["delta"]["tool_calls"]
        assert call["function"] == {"name": "pod_status", "arguments": '{"name":"api-1"}'}  # json.Marshal
        assert call["index"] == 0 and TOOL_CALL_ID.match(call["id"])
    else:
        assert "".join(c["delta"]["content"] for c in choices) == "The pod api-1 is running."


# ------------------------------------------------------------------------------------------------------- SGLang


@pytest.mark.server
def test_sglang_required_without_tools_is_the_real_body(sglang: str) -> None:
    request = {"model": "qwen2.5-coder-0.5b", "messages": MESSAGES, "tool_choice": "required"}
    assert post(sglang, "/v1/chat/completions", request) == (400, b.SGLANG_EMPTY_TOOLS)


@pytest.mark.server
@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        # serving_chat.py OpenAIServingChat._validate_request, in its order.
        ({"messages": [], "tool_choice": "required"}, "Messages cannot be empty."),
        (
            {"messages": MESSAGES, "tool_choice": {"type": "function", "function": {"name": "pod_status"}}},
            "Tools cannot be empty if tool choice is set to a specific tool.",
        ),
        (
            {
                "messages": MESSAGES,
                "tools": b.TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "reboot"}},
            },
            "Tool 'reboot' not found in tools list.",
        ),
    ],
)
def test_sglang_400s_use_the_flat_envelope(sglang: str, request_fields: dict[str, Any], message: str) -> None:
    status, body = post(sglang, "/v1/chat/completions", {"model": "qwen2.5-coder-0.5b", **request_fields})
    # entrypoints/openai/utils.py create_error_response: the envelope of bodies.SGLANG_EMPTY_TOOLS, another message.
    assert (status, body) == (400, {**b.SGLANG_EMPTY_TOOLS, "message": message})


@pytest.mark.server
def test_sglang_stream_is_sse(sglang: str) -> None:
    # serving_chat.py _generate_chat_stream: role chunk, content chunks (msgspec: reasoning_content always
    # there), the finish chunk (matched_stop), the usage chunk with empty choices, [DONE].
    request = {
        "model": "qwen2.5-coder-0.5b",
        "messages": MESSAGES,
        "tools": b.TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = httpx.post(sglang + "/v1/chat/completions", json=request, timeout=10)
    assert response.headers["content-type"] == "text/event-stream"
    first, *middle, finish, usage, done = sse_data(response.text)
    assert done == "[DONE]" and usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10
    assert first["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    content = "".join(m["choices"][0]["delta"]["content"] for m in middle)
    assert content.startswith("```json") and '"pod_status"' in content  # no parser: the call stays text
    assert finish["choices"][0] == {
        "index": 0,
        "delta": {"reasoning_content": None},
        "logprobs": None,
        "finish_reason": "stop",
        "matched_stop": 151645,
    }


@pytest.mark.server
def test_sglang_unparsed_call_is_plain_content(sglang: str) -> None:
    request = {"model": "qwen2.5-coder-0.5b", "messages": MESSAGES, "tools": b.TOOLS}
    status, body = post(sglang, "/v1/chat/completions", request)
    assert status == 200
    content = body["choices"][0]["message"]["content"]
    assert content.startswith("```json") and '"pod_status"' in content
    # No parser: the call stays text, tool_calls null (protocol.py ChatMessage default), finish_reason stop
    # (stacks.md). Compared by the fields bodies.openai_reply describes; other null fields SGLang's pydantic
    # response may carry (e.g. reasoning_content) are not replayed and no classifier reads them.
    expected = b.openai_reply(content, message_extra={"tool_calls": None}, model="qwen2.5-coder-0.5b")
    assert body == {**expected, "created": body["created"], "usage": body["usage"]}
    assert set(body["usage"]) == set(expected["usage"])
