"""Real reply bodies of the four stacks, as documented in shared/reference/stacks.md (read from each
project's source; the vLLM 400 and the llama.cpp b11312 replies were also MEASURED, cpu-recipes.md).
Shared by the classifier tests and the replay servers so the two cannot drift."""

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


def ollama_api_refusal(model: str = "phi3") -> dict[str, Any]:
    return {"error": f"registry.ollama.ai/library/{model}:latest does not support tools"}


def ollama_v1_refusal(model: str = "phi3") -> dict[str, Any]:
    return {
        "error": {
            "message": f"registry.ollama.ai/library/{model}:latest does not support tools",
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


def openai_reply(content: str | None, tool_calls: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """An OpenAI-style chat completion (vLLM, SGLang, llama.cpp, Ollama /v1)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    finish = "tool_calls" if tool_calls else "stop"
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


def ollama_chat_reply(content: str, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Ollama native /api/chat: arguments are a JSON object, no finish_reason."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "model": "qwen2.5-coder:0.5b",
        "created_at": "2026-01-01T00:00:00Z",
        "message": message,
        "done": True,
        "done_reason": "stop",
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
