"""The mode axis: one pure (build request, continue conversation) pair per mode.

- native: only `tools=`; the stack's own tool_calls are the calls.
- native+hint: `tools=` plus the tool list and the JSON call format in the system prompt.
- text-tools: no `tools=`; tool list and format in the prompt; calls parsed from the text.
- constrained: no `tools=`; decoding constrained (the stack's own knob) to a JSON schema whose tool-name
  field is an enum of the offered tools.
Prompts are jinja2 templates in orchestrator/templates; their hashes are recorded with every cell.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from orchestrator.core.types import Classification, ParsedCall, ToolsMode
from orchestrator.runner.tasks import ToolResult


@cache
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("orchestrator", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )


def _source(name: str) -> str:
    loader = _env().loader
    assert loader is not None
    return loader.get_source(_env(), name)[0]


TEMPLATES_BY_MODE: dict[ToolsMode, tuple[str, ...]] = {
    ToolsMode.NATIVE: ("tool_result.j2",),
    ToolsMode.NATIVE_HINT: ("tool_list.j2", "tool_result.j2"),
    ToolsMode.TEXT_TOOLS: ("tool_list.j2", "tool_result.j2"),
    ToolsMode.CONSTRAINED: ("constrained.j2", "tool_result.j2"),
}


def template_sha256(mode: ToolsMode) -> str:
    digest = hashlib.sha256()
    for name in TEMPLATES_BY_MODE[mode]:
        digest.update(name.encode() + b"\0" + _source(name).encode())
    return digest.hexdigest()


def sends_tools(mode: ToolsMode) -> bool:
    return mode in (ToolsMode.NATIVE, ToolsMode.NATIVE_HINT)


def injects_hint(mode: ToolsMode) -> bool:
    return mode is not ToolsMode.NATIVE


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The constrained-decoding schema: a tool name from an enum, and an arguments object."""
    names = [tool["function"]["name"] for tool in tools]
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    response_schema: dict[str, Any] | None


def initial_messages(
    mode: ToolsMode, system_prompt: str, user_request: str, tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if mode is ToolsMode.NATIVE:
        system = system_prompt
    elif mode is ToolsMode.CONSTRAINED:
        system = _env().get_template("constrained.j2").render(system_prompt=system_prompt, tools=tools)
    else:
        system = _env().get_template("tool_list.j2").render(system_prompt=system_prompt, tools=tools)
    return [{"role": "system", "content": system}, {"role": "user", "content": user_request}]


def build_request(mode: ToolsMode, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Request:
    return Request(
        messages=messages,
        tools=tools if sends_tools(mode) else None,
        response_schema=call_schema(tools) if mode is ToolsMode.CONSTRAINED else None,
    )


def call_ids(calls: list[ParsedCall], turn: int) -> list[str]:
    return [call.id or f"call_{turn}_{index}" for index, call in enumerate(calls)]


def continue_messages(api: str, verdict: Classification, results: list[ToolResult], turn: int) -> list[dict[str, Any]]:
    """The assistant turn and the tool results, in the form the parse path used: `tool` messages with
    `tool_call_id` for server-parsed calls, text for harness-parsed ones."""
    if verdict.parse_path == "server" and verdict.calls:
        ids = call_ids(verdict.calls, turn)
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": call.name,
                    # Ollama's native API takes an object; OpenAI-compatible APIs a JSON string.
                    "arguments": call.arguments if api == "ollama" else json.dumps(call.arguments),
                },
            }
            for call_id, call in zip(ids, verdict.calls, strict=True)
        ]
        assistant = {"role": "assistant", "content": verdict.raw_content or "", "tool_calls": tool_calls}
        tool_messages = [
            {"role": "tool", "tool_call_id": call_id, "name": result.call.name, "content": json.dumps(result.result)}
            for call_id, result in zip(ids, results, strict=True)
        ]
        return [assistant, *tool_messages]
    text = _env().get_template("tool_result.j2").render(results=results).strip()
    return [{"role": "assistant", "content": verdict.raw_content or ""}, {"role": "user", "content": text}]
