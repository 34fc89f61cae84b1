"""Real reply bodies of the four stacks, as documented in shared/reference/stacks.md (read from each
project's source; the vLLM 400 and the llama.cpp b11312 replies were also MEASURED, cpu-recipes.md).
The classifier tests use them; tests/test_replay_honesty.py requests the same situations from the replay
servers (tests/replay) and holds their bodies to these, so the two cannot drift."""

from __future__ import annotations

import json
from typing import Any

VLLM_AUTO_REFUSAL_WRAPPED = {
    "error": {
        "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
VLLM_AUTO_REFUSAL_FLAT = {
    "object": "error",
    "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_REQUIRED_REFUSAL = {
    "error": {
        "message": 'tool_choice="required" requires --tool-call-parser to be set',
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


def ollama_qualified(model: str) -> str:
    """The name Ollama's refusal carries: server/routes.go scheduleRunner prefixes model.Name, the fully qualified
    name with the model's own tag (`:latest` only when none was given)."""
    return f"registry.ollama.ai/library/{model if ':' in model else model + ':latest'}"


def ollama_api_refusal(model: str = "phi3") -> dict[str, Any]:
    return {"error": f"{ollama_qualified(model)} does not support tools"}


def ollama_v1_refusal(model: str = "phi3") -> dict[str, Any]:
    return {
        "error": {
            "message": f"{ollama_qualified(model)} does not support tools",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def ollama_not_found(model: str) -> dict[str, Any]:
    return {"error": f"model '{model}' not found"}


LLAMACPP_NO_JINJA = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}
LLAMACPP_LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
SGLANG_EMPTY_TOOLS = {
    "object": "error",
    "message": "Tools cannot be empty if tool choice is set to required.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}

# llama.cpp's chat parser rejecting the generated text: common/chat.cpp common_chat_peg_parse throws, and
# tools/server/server.cpp ex_wrapper answers 500 server_error with e.what(). Builds before the rewording quote the
# output from the failing position ("Failed to parse input at pos N: " + input.substr(N)); b11312 (the pinned build)
# says "The model produced output that does not match the expected <format> format" and quotes nothing (this exact
# body: mostlygeek/llama-swap issue 856).
LLAMACPP_PARSE_FAILURE = {
    "error": {
        "code": 500,
        "message": "Failed to parse input at pos 0: "
        '```json\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n```',
        "type": "server_error",
    }
}
LLAMACPP_PARSE_FAILURE_UNRECOVERABLE = {
    "error": {
        "code": 500,
        "message": 'Failed to parse input at pos 12: <tool_call>\n{"name": "pod_status", "arguments": {"name": ',
        "type": "server_error",
    }
}
LLAMACPP_PARSE_FAILURE_B11312 = {
    "error": {
        "code": 500,
        "message": "The model produced output that does not match the expected peg-native format",
        "type": "server_error",
    }
}
# llama.cpp context overflow: tools/server/server-context.cpp send_error(ERROR_TYPE_EXCEED_CONTEXT_SIZE), 400 from
# server-common.cpp format_error_response; server-task.cpp server_task_result_error::to_json adds the two counts.
LLAMACPP_CONTEXT_OVERFLOW = {
    "error": {
        "code": 400,
        "message": "request (4170 tokens) exceeds the available context size (4096 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4170,
        "n_ctx": 4096,
    }
}
# vLLM 0.32 context overflow, 400 from entrypoints/serve/exception_handling/error_response.py: renderers/params.py
# TokenizeParams._token_len_check (VLLMValidationError.__str__ appends parameter and value), and
# v1/engine/input_processor.py InputProcessor._validate_prompt_len.
VLLM_CONTEXT_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, your prompt contains 5000 input "
        "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
        "prompt. (parameter=input_tokens, value=5000)",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}
VLLM_PROMPT_TOO_LONG = {
    "error": {
        "message": "The decoder prompt (length 4096) plus the number of requested output tokens (at least 1) is "
        "longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number "
        "of text tokens (prompt + requested output tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
# SGLang srt/managers/tokenizer_manager.py TokenizerManager._validate_token_len, answered by serving_chat.py
# _handle_non_streaming_request with create_error_response (flat envelope, 400).
SGLANG_CONTEXT_OVERFLOW = {
    "object": "error",
    "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
# Ollama runner/ollamarunner/runner.go errorInputTooLong (a prompt over num_ctx that may not be truncated).
OLLAMA_CONTEXT_OVERFLOW = {"error": "the input length exceeds the context length"}
# Ollama harmony/harmonyparser.go HarmonyMessageHandler.Add: a gpt-oss call whose arguments are not JSON, 500 from
# server/routes.go ChatHandler (shape as reported in ollama/ollama issues 12884 and 17638).
OLLAMA_HARMONY_PARSE_FAILURE = {
    "error": 'error parsing tool call: raw=\'{"file_path": "a.py", "content": "x"}]\', '
    "err=invalid character ']' after top-level value"
}
# The OpenAI API's context overflow (error code context_length_exceeded) and rate limit (429).
OPENAI_CONTEXT_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 "
        "tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
OPENAI_RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for requests",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


def openai_reply(
    content: str | None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    finish_reason: str | None = None,
    message_extra: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI-style chat completion (vLLM, SGLang, llama.cpp, Ollama /v1). `message_extra` adds message fields
    (e.g. `reasoning_content`); `finish_reason` overrides the one implied by the calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content, **(message_extra or {})}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        **extra,
    }


def openai_tool_call(name: str, arguments: Any, call_id: str = "chatcmpl-tool-1") -> dict[str, Any]:
    """arguments: a dict is serialised to a JSON string (the OpenAI wire form); a str is sent as is."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def ollama_chat_reply(
    content: str,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    done_reason: str = "stop",
    thinking: str | None = None,
) -> dict[str, Any]:
    """Ollama native /api/chat: arguments are a JSON object, no finish_reason (`done_reason` instead); a thinking
    model's reasoning is in `message.thinking` (api.Message)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking is not None:
        message["thinking"] = thinking
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "model": "qwen2.5-coder:0.5b",
        "created_at": "2026-01-01T00:00:00Z",
        "message": message,
        "done": True,
        "done_reason": done_reason,
        "prompt_eval_count": 10,
        "eval_count": 5,
    }


POD_STATUS_TOOL = {
    "type": "function",
    "function": {
        "name": "pod_status",
        "description": "Status of a pod",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
}
LIST_RECORDS_TOOL = {
    "type": "function",
    "function": {
        "name": "list_records",
        "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": []},
    },
}
TOOLS = [POD_STATUS_TOOL, LIST_RECORDS_TOOL]


# Reasoning-only answers (no content, no call, reasoning beside): vLLM 0.32 entrypoints/openai/chat_completion/
# protocol.py ChatMessage (`reasoning`; content null, empty tool_calls dropped); llama.cpp common/chat.cpp
# common_chat_msg::to_json_oaicompat (`reasoning_content`, content ""); Ollama api.Message `thinking`.
VLLM_REASONING_ONLY = openai_reply(None, message_extra={"reasoning": "The user wants the pod status. I will call"})
LLAMACPP_REASONING_ONLY = openai_reply(
    "", message_extra={"reasoning_content": "I should call pod_status with name api-1."}
)
OLLAMA_THINKING_ONLY = ollama_chat_reply("", thinking="I should call pod_status.")
# Cut at max_tokens: finish_reason "length" (vLLM/SGLang/llama.cpp/Ollama /v1); Ollama /api/chat done_reason "length".
TRUNCATED_CALL_REPLY = openai_reply('{"name": "pod_status", "argu', finish_reason="length")
