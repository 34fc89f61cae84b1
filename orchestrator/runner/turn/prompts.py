"""Prompts and conversation shape for each mode: renders the jinja2 templates a mode names
(orchestrator/templates; their hashes are recorded with every cell) and continues the conversation in the
form the mode's parse path used. The rules themselves live in one `Mode` object each (core/modes.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from jinja2 import DictLoader, Environment, PackageLoader, StrictUndefined

from orchestrator.core.chattemplate import ChatTemplate, render_chat
from orchestrator.core.modes import mode_of
from orchestrator.core.types import Classification, ParsedCall, ToolsMode
from orchestrator.runner.suites.tasks import ToolResult


@cache
def _sources() -> dict[str, str]:
    """The prompt templates, read once per process: what a seed renders and the hash its cell records are the
    same text, however long the run and whatever is edited under orchestrator/templates meanwhile (an edit is
    drift a resume refuses: runner/run/provenance.py)."""
    package = PackageLoader("orchestrator", "templates")
    files = Environment(loader=package)
    return {name: package.get_source(files, name)[0] for name in package.list_templates()}


@cache
def _env() -> Environment:
    return Environment(
        loader=DictLoader(_sources()), undefined=StrictUndefined, keep_trailing_newline=False, autoescape=False
    )


def _source(name: str) -> str:
    return _sources()[name]


def template_sha256(mode: ToolsMode) -> str:
    digest = hashlib.sha256()
    for name in mode_of(mode).templates:
        digest.update(name.encode() + b"\0" + _source(name).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    response_schema: dict[str, Any] | None
    prompt: str | None = None  # raw-template: the harness-rendered prompt text (sent to the completion endpoint)


def initial_messages(
    mode: ToolsMode, system_prompt: str, user_request: str, tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_text(mode, system_prompt, tools)},
        {"role": "user", "content": user_request},
    ]


def system_text(mode: ToolsMode, system_prompt: str, tools: list[dict[str, Any]]) -> str:
    """The system message a mode sends: the task's own, or its prompt template rendered over it."""
    template = mode_of(mode).system_template
    return (
        system_prompt
        if template is None
        else _env().get_template(template).render(system_prompt=system_prompt, tools=tools)
    )


def raw_prompt(template: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The raw-template prompt text. Where the tokenizer adds BOS itself, a BOS the template wrote is dropped
    here: the completion endpoint tokenizes with the model's special tokens (llama.cpp add_bos from the GGUF,
    vLLM add_special_tokens), while the chat path adds none on top of the template's (llama.cpp strips the
    rendered BOS; vLLM tokenizes chat prompts without special tokens), so the model sees one BOS either way."""
    prompt = render_chat(template, messages, tools)
    bos = template.bos_token
    return prompt[len(bos) :] if template.adds_bos and bos and prompt.startswith(bos) else prompt


def build_request(
    mode: ToolsMode, messages: list[dict[str, Any]], tools: list[dict[str, Any]], template: ChatTemplate | None = None
) -> Request:
    """The next request. raw-template renders the model's own template here (tools as the template takes them);
    it raises TemplateError when the template cannot render, and ValueError when the cell has none."""
    rules = mode_of(mode)
    if rules.renders_template:
        if template is None:
            raise ValueError(f"mode {mode.value} needs the model's chat template")
        return Request(
            messages=messages, tools=None, response_schema=None, prompt=raw_prompt(template, messages, tools)
        )
    return Request(
        messages=messages, tools=tools if rules.sends_tools else None, response_schema=rules.response_schema(tools)
    )


def call_ids(calls: list[ParsedCall], turn: int) -> list[str]:
    return [call.id or f"call_{turn}_{index}" for index, call in enumerate(calls)]


def continue_messages(
    api: str, verdict: Classification, results: list[ToolResult], turn: int, *, mode: ToolsMode
) -> list[dict[str, Any]]:
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
    if mode_of(mode).renders_template and verdict.calls:
        # The model's text exactly as generated (its calls included), then the results as `tool` messages: the
        # model's own template renders both, as the stack's would after its parser took the calls.
        ids = call_ids(verdict.calls, turn)
        tool_messages = [
            {"role": "tool", "tool_call_id": call_id, "name": result.call.name, "content": json.dumps(result.result)}
            for call_id, result in zip(ids, results, strict=True)
        ]
        return [{"role": "assistant", "content": verdict.raw_content or ""}, *tool_messages]
    text = _env().get_template(mode_of(mode).result_template).render(results=results).strip()
    return [{"role": "assistant", "content": verdict.raw_content or ""}, {"role": "user", "content": text}]
