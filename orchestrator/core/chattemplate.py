"""Render a model's own chat template in the harness (the `raw-template` mode's prompt). Pure.

A chat template is untrusted code shipped with the weights: it runs in jinja2's immutable sandbox. The
environment follows what Hugging Face transformers gives templates (`apply_chat_template`: trim_blocks,
lstrip_blocks, the loop-controls extension, `raise_exception`, `strftime_now` (local time), and a `tojson` filter that
keeps non-ASCII text and accepts indent/separators/sort_keys), which is also what vLLM renders with and what
llama.cpp's minja engine imitates, so a template renders here as it does on those stacks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(ValueError):
    """The template cannot be compiled or rendered (named, with jinja's message)."""


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and the special tokens it refers to."""

    text: str
    source: str  # where it was read: "gguf:tokenizer.chat_template", "<dir>/chat_template.jinja", ...
    bos_token: str = ""
    eos_token: str = ""
    adds_bos: bool | None = None  # the tokenizer adds BOS itself (GGUF add_bos_token, HF add_bos_token); None: unknown

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _raise(message: str) -> None:
    raise TemplateError(f"the template raised: {message}")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=32)
def _compiled(text: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)  # local time, as transformers and minja
    try:
        return env.from_string(text)
    except jinja2.TemplateError as exc:
        raise TemplateError(f"the template does not compile: {exc}") from exc


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as templates expect them: a call's `arguments` as an object, not the JSON string the OpenAI API
    carries (vLLM and llama.cpp decode them the same way before rendering)."""
    shaped = []
    for message in messages:
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message = {**message, "tool_calls": [_decoded_call(call) for call in calls]}
        shaped.append(message)
    return shaped


def _decoded_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call  # not JSON: the template gets the string as it was written
    return {**call, "function": {**function, "arguments": arguments}}


def render_chat(template: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The prompt text for `messages` (and `tools`, as the template takes them), ending in the generation prompt."""
    try:
        return _compiled(template.text).render(
            messages=template_messages(messages),
            tools=tools or None,
            add_generation_prompt=True,
            bos_token=template.bos_token,
            eos_token=template.eos_token,
        )
    except TemplateError:
        raise
    except Exception as exc:  # any error inside untrusted template code is the template's, named
        raise TemplateError(f"rendering failed ({template.source}): {type(exc).__name__}: {exc}") from exc
