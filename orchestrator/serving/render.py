"""What the server itself makes of a request before any generation: the prompt it renders with its own chat
template (the canary, and each turn's prompt length) and the sampler it applies to fields a request leaves out.

How a stack renders is data in its stack file (`render:`, `sampling_defaults:`); a stack that cannot render
gets `None` here and its cells say so. Nothing here raises on a bad reply: an error is recorded as text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.serving.readiness import field_at
from orchestrator.serving.stackspec import StackSpec

# One fixed conversation with tools, rendered by every stack so two cells' prompts can be diffed: a system
# prompt, a question, an assistant tool call, its result, and a follow-up (every message kind a template treats).
CANARY_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "pod_status",
            "description": "Get the status of a Kubernetes pod by name.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "Pod name"}},
                "required": ["name"],
            },
        },
    }
]
CANARY_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an operations assistant. Use the tools."},
    {"role": "user", "content": "What is the status of pod api-1?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "pod_status", "arguments": '{"name": "api-1"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "name": "pod_status", "content": '{"status": "Running"}'},
    {"role": "user", "content": "And pod api-2?"},
]
RENDER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Rendered:
    """A prompt as the server rendered it: its text and length in the server's tokens, or why not."""

    text: str | None
    n_tokens: int | None
    error: str | None = None


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> Any:
    try:
        reply = client.post(url, json=body, timeout=RENDER_TIMEOUT_S)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        # A kept-alive connection the server closed after a streamed answer: rendering does no model work and
        # is idempotent, so it is sent once more on a fresh connection.
        reply = client.post(url, json=body, timeout=RENDER_TIMEOUT_S)
    if reply.status_code != 200:
        raise ValueError(f"POST {url} -> HTTP {reply.status_code}: {reply.text[:300]}")
    return reply.json()


def render_conversation(
    client: httpx.Client,
    base_url: str,
    spec: StackSpec,
    served_name: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    want_text: bool = True,
) -> Rendered:
    """The server's own rendering of a chat request (text and token count); an error as text, never raised."""
    render = spec.render
    if render is None:
        return Rendered(None, None, f"stack {spec.name!r} offers no way to render a prompt without generating")
    base = base_url.rstrip("/")
    chat: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
    try:
        if render.kind == "apply_template":
            text = _post(client, base + (render.path or ""), chat).get(render.field)
            if not isinstance(text, str):
                return Rendered(None, None, f"{render.path}: no text at {render.field!r}")
            return Rendered(text, count_text_tokens(client, base_url, spec, served_name, text))
        body = {"model": served_name, **chat, "add_generation_prompt": True}
        tokens = _post(client, base + render.tokenize_path, body).get("tokens")
        if not isinstance(tokens, list):
            return Rendered(None, None, f"{render.tokenize_path}: no tokens in the reply")
        text = None
        if want_text and render.detokenize_path:
            text = _post(client, base + render.detokenize_path, {"model": served_name, "tokens": tokens}).get("prompt")
        return Rendered(text if isinstance(text, str) else None, len(tokens))
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return Rendered(None, None, f"{type(exc).__name__}: {exc}")


def count_text_tokens(client: httpx.Client, base_url: str, spec: StackSpec, served_name: str, text: str) -> int | None:
    """A prompt text's length in the server's tokens, counted as a completion request would; None if unknown."""
    if spec.render is None:
        return None
    url = base_url.rstrip("/") + spec.render.tokenize_path
    body = (
        {"content": text, "add_special": True}
        if spec.render.kind == "apply_template"
        else {"model": served_name, "prompt": text}
    )
    try:
        tokens = _post(client, url, body).get("tokens")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return len(tokens) if isinstance(tokens, list) else None


# (client, messages, tools or None, raw prompt text or None) -> the server's token count, or None
PromptCounter = Callable[[httpx.Client, list[dict[str, Any]], Any, "str | None"], "int | None"]


def prompt_counter(spec: StackSpec, base_url: str, served_name: str) -> PromptCounter | None:
    """Per turn: the length of the prompt the server was sent, rendered and counted by the server itself (a
    raw prompt text is counted as it is); None when the stack cannot render."""
    if spec.render is None:
        return None

    def count(client: httpx.Client, messages: list[dict[str, Any]], tools: Any, prompt: str | None) -> int | None:
        if prompt is not None:
            return count_text_tokens(client, base_url, spec, served_name, prompt)
        return render_conversation(client, base_url, spec, served_name, messages, tools, want_text=False).n_tokens

    return count


def _record(spec: StackSpec, rendered: Rendered, conversation: list[Any]) -> dict[str, Any]:
    return {
        "via": None if spec.render is None else spec.render.kind,
        "prompt": rendered.text,
        "sha256": hashlib.sha256(rendered.text.encode()).hexdigest() if rendered.text is not None else None,
        "n_tokens": rendered.n_tokens,
        "error": rendered.error,
        "conversation_sha256": hashlib.sha256(json.dumps(conversation, sort_keys=True).encode()).hexdigest(),
    }


def canary(base_url: str, spec: StackSpec, served_name: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The canary conversation as this server renders it, for the cell record: text, sha256, token count; and
    `plain`, its first two messages without tools, which every template renders (llama.cpp without jinja
    refuses any conversation with tools) and which is what a mode that sends no tools shows the model."""
    with httpx.Client(headers=headers) as client:
        full = render_conversation(client, base_url, spec, served_name, CANARY_MESSAGES, CANARY_TOOLS)
        plain = render_conversation(client, base_url, spec, served_name, CANARY_MESSAGES[:2], None)
    return {
        **_record(spec, full, [CANARY_MESSAGES, CANARY_TOOLS]),
        "plain": _record(spec, plain, [CANARY_MESSAGES[:2], None]),
    }


def _modelfile_lines(text: str) -> dict[str, Any]:
    """Ollama's /api/show `parameters`: one 'name value' per line (a name may repeat, e.g. stop)."""
    values: dict[str, Any] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        value = value.strip().strip('"')
        try:
            values.setdefault(name, float(value) if "." in value else int(value))
        except ValueError:
            values.setdefault(name, value)
    return values


def _reported(spec: StackSpec, capabilities: dict[str, Any] | None) -> dict[str, Any] | None:
    declared = spec.sampling_defaults
    if not declared.capability:
        return None
    raw = field_at((capabilities or {}).get(declared.capability), declared.field)
    if declared.format == "modelfile_lines" and isinstance(raw, str):
        raw = _modelfile_lines(raw)
    return raw if isinstance(raw, dict) else None


def sampling_defaults(spec: StackSpec, capabilities: dict[str, Any] | None) -> dict[str, Any]:
    """The sampler this server applies to fields a request leaves out, in canonical names, with its source:
    what the server reports over the pinned version's documented defaults; and the stack-only stages (never
    sent) that are not at their 'off' value (`active_unsent`)."""
    declared = spec.sampling_defaults
    reported = _reported(spec, capabilities)
    if reported is None and not declared.builtin:
        return {"source": None, "values": None, "unsent_stages": None, "active_unsent": None,
                "note": f"stack {spec.name!r}: no source for its sampler defaults"}  # fmt: skip
    values: dict[str, Any] = {name: value for name, value in declared.builtin.items()}  # str keys
    sources = [f"stack file (documented defaults): {declared.note}"] if declared.builtin else []
    stages: dict[str, Any] = {}
    if reported is not None:
        values.update({c: reported[name] for c, name in declared.names.items() if name in reported})
        stages = {name: reported.get(name) for name in declared.unsent_off}
        sources.insert(0, f"server:{declared.capability}.{declared.field}".rstrip("."))
    active: list[str] | None = sorted(
        name for name, value in stages.items() if value is not None and value != declared.unsent_off[name]
    )
    if declared.unsent_off and (reported is None or any(value is None for value in stages.values())):
        active = None  # stages the server did not report: unknown, not off
    return {"source": " over ".join(sources), "values": values, "unsent_stages": stages, "active_unsent": active}
