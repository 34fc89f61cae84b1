"""Find tool calls written as text in a model's content. Pure.

Each call format (JSON objects, Python-style lists, Mistral's ``[TOOL_CALLS]``, Qwen3 / GLM / MiniMax XML,
DeepSeek, Kimi K2, gpt-oss harmony, Gemma 4, Command R, Functionary) has its own recogniser in
`orchestrator.core.callformats`; `auto` tries them in the fixed order `FORMATS` and records which one
claimed the text.

A call *attempt* needs structure, not vocabulary: prose that merely says "function" or "tool_call", code
that calls functions, or quoted JSON data is not an attempt. Malformed output in a family's own format
(a marker followed by arguments that do not decode, an unclosed tag) is an attempt that failed to parse:
``failure`` is ``parse:<reason>`` (``parse:<family>_<reason>`` outside the JSON family).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.core.callformats import AUTO, FORMATS, recognise
from orchestrator.core.callformats.base import ArgumentsNotJSON, TextCallParse, decode_arguments

__all__ = ["AUTO", "FORMATS", "ArgumentsNotJSON", "TextCallParse", "decode_arguments", "extract_text_calls"]


def extract_text_calls(
    content: str | None, *, tools: Sequence[Mapping[str, Any]] | None = None, call_format: str = AUTO
) -> TextCallParse:
    """Every call written in `content`, whether a call attempt failed, or nothing (prose).

    `auto` tries every recogniser in a fixed order and records which matched; a named format tries only that
    one (an unknown name raises ValueError naming the known ones). `tools` (OpenAI tool specs) types
    XML-style parameter values by their schemas.
    """
    return recognise(content, tools=tools, call_format=call_format)
