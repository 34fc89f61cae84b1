"""Linear-time text scanning shared by the recognisers: fenced code blocks, whitespace, bracket spans.

No regex here can backtrack: every loop advances, and each character is examined a bounded number of times.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

_FENCE = "```"
_LANG = re.compile(r"[ \t]*+([A-Za-z0-9_+-]*+)")
# One token of a Python-like expression that matters for bracket matching; strings are skipped whole
# (possessive: a string that never closes falls through to the lone quote, never backtracks).
_PY_TOKEN = re.compile(r"""[\[\](){}]|'(?:[^'\\\n]|\\.)*+'|"(?:[^"\\\n]|\\.)*+"|['"#]""")
_WS = re.compile(r"[ \t\r\n]*+")
_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")
WHITESPACE = " \t\r\n"


class Fence(NamedTuple):
    """A fenced code block: its language word (lower case), body, and span in the text."""

    lang: str
    body: str
    start: int
    end: int  # just past the closing fence, or the text's end when it never closes


def fences(text: str, position: int = 0) -> Iterator[Fence]:
    """Every fenced block from `position` on, as ```` ```lang ...\\nBODY``` ```` (an unclosed block runs to the
    end)."""
    newline = -1
    while (start := text.find(_FENCE, position)) != -1:
        if newline < start + 3:
            newline = text.find("\n", start + 3)
            if newline == -1:
                return  # no info line ends: no later fence can open either
        lang_match = _LANG.match(text, start + 3, newline)
        lang = lang_match.group(1).lower() if lang_match else ""
        close = text.find(_FENCE, newline + 1)
        body_end = len(text) if close == -1 else close
        end = len(text) if close == -1 else close + 3
        yield Fence(lang=lang, body=text[newline + 1 : body_end], start=start, end=end)
        position = end


def mask_fences(text: str, keep: frozenset[str], replacement: str = " ", found: list[Fence] | None = None) -> str:
    """The text with every fenced block whose language is not in `keep` replaced by `replacement` (`found`:
    the text's fences, when already listed)."""
    parts: list[str] = []
    position = 0
    for fence in fences(text) if found is None else found:
        if fence.lang in keep:
            continue
        parts.append(text[position : fence.start])
        parts.append(replacement)
        position = fence.end
    if not parts:
        return text
    parts.append(text[position:])
    return "".join(parts)


def skip_ws(text: str, position: int) -> int:
    """The first index at or after `position` that is not whitespace."""
    return _WS.match(text, position).end()  # type: ignore[union-attr]  # _WS matches anywhere (maybe empty)


def bracket_end(text: str, start: int, limit: int | None = None) -> int | None:
    """Index just past the bracket that closes the one at `start`, skipping quoted strings; None if it never
    closes (or a string is unterminated, or a line comment starts) before `limit`."""
    depth = 0
    stop = len(text) if limit is None else min(limit, len(text))
    for match in _PY_TOKEN.finditer(text, start, stop):
        token = match.group()
        if token in _OPENERS:
            depth += 1
        elif token in _CLOSERS:
            depth -= 1
            if depth <= 0:
                return match.end()
        elif token in ("'", '"', "#"):
            return None
    return None


def rest_of_line_blank(text: str, position: int) -> bool:
    """Whether only whitespace follows `position` up to the end of its line."""
    while position < len(text) and text[position] in " \t\r":
        position += 1
    return position >= len(text) or text[position] == "\n"


class MarkerFinder:
    """The next occurrence of any of several markers, each searched at most once per position it passes."""

    def __init__(self, text: str, markers: tuple[str, ...]) -> None:
        self.text = text
        self.next_at = {marker: -2 for marker in markers}

    def find(self, position: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for marker, at in self.next_at.items():
            if at != -1 and at < position:
                at = self.next_at[marker] = self.text.find(marker, position)
            if at != -1 and (best is None or at < best[0]):
                best = (at, marker)
        return best


# Reasoning blocks: what a model thinks is not what it calls (llama.cpp parses these before the calls).
REASONING_TAGS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"), ("<seed:think>", "</seed:think>"))


def strip_reasoning(text: str) -> str:
    """`text` without reasoning blocks. A closing tag with no opening before it ends reasoning that the
    generation prompt opened (everything before it goes); an opening tag that never closes is left alone, with
    what follows it (Kimi-K2-Thinking writes its calls inside an unclosed ``<think>``)."""
    for opening, closing in REASONING_TAGS:
        if closing not in text and opening not in text:
            continue
        first_close = text.find(closing)
        first_open = text.find(opening)
        if first_close != -1 and (first_open == -1 or first_close < first_open):
            text = text[first_close + len(closing) :]
        parts: list[str] = []
        position = 0
        while (start := text.find(opening, position)) != -1:
            end = text.find(closing, start + len(opening))
            if end == -1:
                break  # never closes: where reasoning ends is unknown, so the rest stays (Kimi-K2-Thinking calls)
            parts.append(text[position:start])
            position = end + len(closing)
        parts.append(text[position:])
        text = "".join(parts)
    return text
