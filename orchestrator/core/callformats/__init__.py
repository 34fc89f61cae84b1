"""Recognisers of tool calls written as text, one per call format, and the fixed order `auto` tries them in.

`auto` asks each recogniser in `FORMATS` order and keeps the first that reads calls from the text, or, when
none does, the first that claims it (a failed attempt), so a text is claimed by one family only, and its name
is recorded (`TextCallParse.call_format`). A failed claim does not end the search: an earlier family's marker
may sit inside a later family's argument string (``<function=write>{"text": "[TOOL_CALLS]"}</function>``).
A text that is one JSON value as a whole is the `json` family's alone: any other family's marker in it sits
inside a string (a JSON call writing a file that quotes ``<invoke …>``, ``[TOOL_CALLS]`` or ``</think>``).
The order goes from the most specific markers to the most permissive reading:

1. special tokens, which never occur in prose: harmony, then Step-3 and DeepSeek DSML (whose calls sit
   inside DeepSeek-style tokens, so they go before `deepseek`), deepseek, kimi_k2, gemma4, mistral,
   command_r, granite (its ``<tool_call> [`` text prefix must be seen before the XML and JSON readers of
   ``<tool_call>``);
2. XML-style tags: minimax, seed_oss (Qwen's elements in ``<seed:tool_call>``, so before qwen3_xml),
   qwen3_xml, glm_xml; then functionary, whose ``<function=NAME>{json}`` qwen3_xml leaves alone;
3. a marker word (functools), Python-style lists (pythonic), and last plain JSON, which reads JSON anywhere.

Reasoning is not a call: ``<think>…</think>``, ``[THINK]…[/THINK]`` and ``<seed:think>…</seed:think>`` blocks
are removed first, and so is everything before a closing tag whose opening the generation prompt wrote.

Every recogniser is pure, linear in the text's length, and never raises on model output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from orchestrator.core.callformats import (
    command_r,
    functionary,
    gemma4,
    harmony,
    invokes,
    jsonlists,
    jsonshapes,
    mistral,
    pythonic,
    tokens,
    xmltags,
)
from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    ArgumentsNotJSON,
    Context,
    Recogniser,
    TextCallParse,
    context_of,
    decode_arguments,
)
from orchestrator.core.callformats.scan import strip_reasoning

AUTO = "auto"

# The fixed `auto` order, most specific markers first (see the module docstring).
RECOGNISERS: tuple[Recogniser, ...] = (
    # special tokens
    Recogniser("harmony", harmony.parse, markers=(harmony.MESSAGE,)),
    Recogniser("step3", invokes.recogniser(invokes.STEP3), markers=(invokes.STEP3.invoke,)),
    Recogniser("deepseek_dsml", invokes.recogniser(invokes.DSML), markers=("｜DSML｜",)),
    Recogniser("deepseek", tokens.recogniser(tokens.DEEPSEEK), markers=("｜",)),
    Recogniser("kimi_k2", tokens.recogniser(tokens.KIMI_K2), markers=tokens.KIMI_K2.markers),
    Recogniser("gemma4", gemma4.parse, markers=gemma4.GEMMA4.markers),
    Recogniser("mistral", mistral.parse, markers=(mistral.TOOL_CALLS,)),
    Recogniser("command_r", command_r.parse, markers=(command_r.START_ACTION, "Action:")),
    Recogniser("granite", jsonlists.parse_granite, markers=(jsonlists.GRANITE_TOKEN, jsonlists.GRANITE_TEXT)),
    # XML-style tags
    Recogniser("minimax", invokes.recogniser(invokes.MINIMAX), markers=(invokes.MINIMAX.invoke,)),
    Recogniser("seed_oss", xmltags.parse_seed, markers=(xmltags.SEED_OSS.requires or "",)),
    Recogniser("qwen3_xml", xmltags.parse_qwen, markers=(xmltags.FUNCTION,)),
    Recogniser("glm_xml", xmltags.parse_glm, markers=(xmltags.TOOL_CALL,)),
    Recogniser("functionary", functionary.parse),
    # marker words, Python-style lists, plain JSON
    Recogniser("functools", jsonlists.parse_functools, markers=(jsonlists.FUNCTOOLS,)),
    Recogniser("pythonic", pythonic.parse, markers=("(",)),
    Recogniser("json", jsonshapes.parse),
)
FORMATS: tuple[str, ...] = tuple(recogniser.name for recogniser in RECOGNISERS)
_BY_NAME: dict[str, Recogniser] = {recogniser.name: recogniser for recogniser in RECOGNISERS}


def recognise(
    content: str | None, *, tools: Sequence[Mapping[str, Any]] | None = None, call_format: str = AUTO
) -> TextCallParse:
    """The calls written in `content` by the named format, or by the first format in `FORMATS` that reads calls
    from it (failing that, the first that claims it)."""
    if call_format != AUTO and call_format not in _BY_NAME:
        known = ", ".join((AUTO, *FORMATS))
        raise ValueError(f"unknown call format {call_format!r}; known: {known}")
    if not isinstance(content, str) or not content.strip():
        return NOT_ATTEMPTED
    context = context_of(tools)
    if call_format == AUTO and jsonshapes.is_one_value(content):
        candidates: tuple[Recogniser, ...] = (_BY_NAME[jsonshapes.FAMILY],)  # markers, `</think>`: in strings
    else:
        content = strip_reasoning(content)
        candidates = RECOGNISERS if call_format == AUTO else (_BY_NAME[call_format],)
    first_failure: TextCallParse | None = None
    for recogniser in candidates:
        result = recogniser(content, context)
        if result.ok:
            return replace(result, call_format=recogniser.name)
        if result.attempted and first_failure is None:
            first_failure = replace(result, call_format=recogniser.name)
    return first_failure or NOT_ATTEMPTED


__all__ = [
    "AUTO",
    "FORMATS",
    "RECOGNISERS",
    "ArgumentsNotJSON",
    "Context",
    "TextCallParse",
    "decode_arguments",
    "recognise",
]
