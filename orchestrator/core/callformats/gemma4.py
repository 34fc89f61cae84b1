"""The `gemma4` family: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42,flag:true,o:{k:v},l:[a,b]}<tool_call|>``.

Read from vLLM's gemma4 parser and llama.cpp's: calls are concatenated without separators; keys are bare
(or, rarely, wrapped in ``<|"|>``); strings are delimited by ``<|"|>`` (so they may hold any character);
other values are bare ``true``/``false``/``null`` or numbers. A bare word that is none of these is kept as a
string, as the stacks do. An unterminated string, object or list fails the call
(`parse:gemma4_arguments_not_json`).

The reader walks the argument text once with an explicit stack (no recursion), so nesting depth costs
memory proportional to the text, never the Python stack.
"""

from __future__ import annotations

from typing import Any

from orchestrator.core.callformats.base import BadJSON, TextCallParse, loads
from orchestrator.core.callformats.tokens import BadCall, TokenSpec, recogniser

STRING = '<|"|>'
_BARE_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None, "none": None, "nil": None}
_BARE_STOP = frozenset(",}]")


def _split(block: str) -> tuple[str, str]:
    body = block.strip()
    if not body.startswith("call:"):
        raise BadCall("no_name")
    brace = body.find("{")
    if brace == -1 or not body.endswith("}"):
        raise BadCall("no_arguments")
    return body[5:brace], body[brace + 1 : -1]


def _bare(word: str) -> Any:
    word = word.strip()
    if word.lower() in _BARE_WORDS:
        return _BARE_WORDS[word.lower()]
    try:
        value = loads(word)  # NaN, Infinity and 1e999 are no JSON numbers: kept as words
    except BadJSON:
        return word
    return value if isinstance(value, int | float) and not isinstance(value, bool) else word


class _Reader:
    """One pass over Gemma 4's argument text, building nested objects and lists with an explicit stack."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0
        self.stack: list[tuple[dict[str, Any] | list[Any], str | None]] = [({}, None)]  # (container, pending key)

    def read(self) -> dict[str, Any]:
        while True:
            self._skip_separators()
            if self.position >= len(self.text):
                break
            char = self.text[self.position]
            if char in "}]":
                self._close(char)
            elif isinstance(self.stack[-1][0], dict) and self.stack[-1][1] is None:
                self._key()
            else:
                self._value()
        if len(self.stack) == 1 and self.stack[0][1] is not None:
            self._store("")  # `key:` with nothing after it: an empty string, as vLLM reads it
        if len(self.stack) != 1:
            raise BadJSON("unterminated object or list")
        root = self.stack[0][0]
        assert isinstance(root, dict)
        return root

    def _skip_separators(self) -> None:
        while self.position < len(self.text) and self.text[self.position] in " ,\n\t\r":
            self.position += 1

    def _key(self) -> None:
        if self.text.startswith(STRING, self.position):
            key = self._string()
            colon = self.text.find(":", self.position)
            if colon == -1 or self.text[self.position : colon].strip():
                raise BadJSON("key without value")
        else:
            colon = self.text.find(":", self.position)
            if colon == -1:
                raise BadJSON("key without value")
            key = self.text[self.position : colon].strip()
        self.position = colon + 1
        container, _ = self.stack.pop()
        self.stack.append((container, key))

    def _value(self) -> None:
        self._skip_separators()
        text = self.text
        if text.startswith(STRING, self.position):
            self._store(self._string())
        elif self.position < len(text) and text[self.position] in "{[":
            self.stack.append(({} if text[self.position] == "{" else [], None))
            self.position += 1
        else:
            start = self.position
            while self.position < len(text) and text[self.position] not in _BARE_STOP:
                self.position += 1
            self._store(_bare(text[start : self.position]))

    def _string(self) -> str:
        start = self.position + len(STRING)
        end = self.text.find(STRING, start)
        if end == -1:
            raise BadJSON("unterminated string")
        self.position = end + len(STRING)
        return self.text[start:end]

    def _close(self, char: str) -> None:
        container, key = self.stack[-1]
        if len(self.stack) == 1 or key is not None or (char == "}") != isinstance(container, dict):
            raise BadJSON(f"unexpected {char}")
        self.stack.pop()
        self.position += 1
        self._store(container)

    def _store(self, value: Any) -> None:
        container, key = self.stack.pop()
        if isinstance(container, dict):
            if key is None:
                raise BadJSON("value without key")
            container[key] = value
        else:
            container.append(value)
        self.stack.append((container, None))


def parse_arguments(text: str) -> dict[str, Any]:
    """Gemma 4's argument text (between the call's braces) as a dict; BadJSON when it is malformed."""
    return _Reader(text).read() if text.strip() else {}


GEMMA4 = TokenSpec(
    family="gemma4",
    begin=("<|tool_call>",),
    end=("<tool_call|>",),
    split=_split,
    arguments=parse_arguments,
)

parse = recogniser(GEMMA4)

__all__ = ["GEMMA4", "STRING", "TextCallParse", "parse", "parse_arguments"]
