"""Facts about a reply that sit beside its outcome. Pure.

Where the message is, why generation stopped (`finish_reason`), the reasoning a message carries beside its
content, whether a constrained answer kept the schema the stack was asked to enforce, and the model output
that a stack's own parser error quotes. The classifier (core/classify.py) turns these into its verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.core.callformats.base import BadJSON, loads
from orchestrator.core.modes import call_schema
from orchestrator.core.toolschemas import linear_validator

TRUNCATED_FLAG = "truncated:max_tokens"  # generation was cut at max_tokens (finish_reason "length")
# The server used fewer prompt tokens than the prompt it was sent renders to: it dropped part of it silently (an
# overflow it refuses is `refused:context_overflow` instead).
PROMPT_TRUNCATED_FLAG = "truncated:prompt"
# raw-template: the model's own template would not render the next prompt (no request sent; runner/turn/agent.py).
TEMPLATE_FAILURE_DETAIL = "template:render_failed"
PROMPT_COUNT_UNAVAILABLE_FLAG = "prompt_count:unavailable"  # the stack can count a prompt but did not: unchecked
CACHE_NOT_CLEARED_FLAG = "cache:not_cleared"  # the seed's start could not clear the server's prompt cache
CACHE_SHARED_FLAG = "cache:shared"  # seeds ran concurrently on one server: records may depend on interleaving
CONSTRAINT_VIOLATED_FLAG = "constraint:violated"  # a constrained answer that is not one schema-valid JSON object
# The stack said it stopped for tool calls and sent none (a stream's lost calls, or a parser that dropped them).
TOOL_CALLS_EMPTY_FLAG = "finish:tool_calls_empty"

# Reasoning beside the content, by stack: llama.cpp common/chat.cpp common_chat_msg::to_json_oaicompat and SGLang
# srt/entrypoints/openai/protocol.py ChatMessage write `reasoning_content`; vLLM 0.32
# entrypoints/openai/chat_completion/protocol.py ChatMessage writes `reasoning` (`reasoning_content` before);
# Ollama writes `thinking` on /api/chat (api.Message) and `reasoning` on /v1 (openai/openai.go Message).
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")

# The model output a stack's parser error quotes. llama.cpp common/chat.cpp common_chat_peg_parse:
# "Failed to parse input at pos N: " + the input from the failing position; Ollama harmony/harmonyparser.go
# HarmonyMessageHandler.Add: "error parsing tool call: raw='<arguments>', err=<why>".
# Anchored at the start: the quoted tail is the model's text and may itself contain anything.
_QUOTED_OUTPUT = (
    re.compile(r"Failed to parse input at pos \d+: (.*)\Z", re.DOTALL),
    re.compile(r"error parsing tool call: raw='(.*)', err=", re.DOTALL),
)


def message_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The assistant message: OpenAI `choices[0].message`, a raw completion's `choices[0].text` (the
    raw-template mode) as the message content, or Ollama /api/chat `message`."""
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if message is None and isinstance(choices[0].get("text"), str):
            return {"role": "assistant", "content": choices[0]["text"]}
        return message if isinstance(message, Mapping) else None
    message = body.get("message")  # Ollama /api/chat
    return message if isinstance(message, Mapping) else None


def content_text(content: Any) -> str | None:
    """A message's content as text: a string, content parts joined, anything else as JSON; None stays None."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(text for p in content if isinstance(p, Mapping) and isinstance(text := p.get("text"), str))
    try:
        return json.dumps(content, default=str)
    except (RecursionError, ValueError):  # nested past what the encoder walks: no text, not a crash
        return None


def finish_reason_of(body: Any) -> str | None:
    """Why generation stopped, as the stack said it: OpenAI `choices[0].finish_reason`, Ollama `done_reason`."""
    if not isinstance(body, Mapping):
        return None
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        reason = choices[0].get("finish_reason")
    else:
        reason = body.get("done_reason")
    return reason if isinstance(reason, str) else None


def reasoning_text(message: Mapping[str, Any]) -> str | None:
    """The first non-blank reasoning field of a message, or None."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return None


def enforced_schema(tools: Sequence[Any]) -> dict[str, Any]:
    """The schema a constrained request asked the stack to enforce (`modes.call_schema`); malformed tool
    entries are skipped rather than raised on."""
    try:
        return call_schema(list(tools or ()))
    except (KeyError, TypeError, IndexError, AttributeError):
        names = []
        for tool in tools or ():
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                names.append({"function": {"name": function["name"]}})
        return call_schema(names)


def violates_constraint(content: str | None, tools: Sequence[Any]) -> bool:
    """True unless the content, stripped of surrounding whitespace, is exactly one JSON object valid against
    the enforced schema. Fenced JSON does not conform: a constrained decoder never writes the fence."""
    try:
        value = loads((content or "").strip())  # bounded, and NaN or Infinity is no JSON: not conforming
    except BadJSON:
        return True
    if not isinstance(value, dict):
        return True
    validator = linear_validator(enforced_schema(tools))  # model output: checked as every argument is
    if validator is None:  # a schema core calls unusable: the answer is not shown to conform
        return True
    try:
        return not validator.is_valid(value)
    except Exception:  # a schema the engine cannot evaluate: the answer is not shown to conform
        return True


def reply_flags(
    *, finish_reason: str | None, constrained: bool, tools: Sequence[Any], status: int | None, body: Any
) -> list[str]:
    """family:reason facts beside the outcome: truncation (any reply), `finish_reason: tool_calls` with no
    call (a 2xx message), constraint violation (a 2xx message in a constrained mode)."""
    flags = [TRUNCATED_FLAG] if finish_reason == "length" else []
    if finish_reason == "tool_calls" and status is not None and 200 <= status < 300 and isinstance(body, Mapping):
        message = message_of(body)
        if message is not None and not message.get("tool_calls"):
            flags.append(TOOL_CALLS_EMPTY_FLAG)
    if constrained and status is not None and 200 <= status < 300 and isinstance(body, Mapping):
        message = message_of(body)
        if message is not None and violates_constraint(content_text(message.get("content")), tools):
            flags.append(CONSTRAINT_VIOLATED_FLAG)
    return flags


def quoted_output(error_text: str) -> str | None:
    """The model output a stack's parser error quotes, or None when the error quotes none."""
    for pattern in _QUOTED_OUTPUT:
        match = pattern.match(error_text)
        if match:
            return match.group(1)
    return None


def prompt_truncated(used: int | None, rendered: int | None) -> bool:
    """The server counted fewer prompt tokens than the rendered prompt has (both known)."""
    return used is not None and rendered is not None and used < rendered
