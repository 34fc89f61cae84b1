"""The `functionary` family: ``<function=NAME>{...}</function>`` (Functionary v3.1, and Llama 3.1's own
custom-tool format) and Functionary v3.2's ``>>>NAME\\n{...}``.

A ``<function=NAME>`` whose body is not JSON is `qwen3_xml`'s, and ``>>>all`` (v3.2's text channel),
``>>>python`` code or a REPL prompt (``>>> x``) are not calls. The closing ``</function>`` may be missing
only at the very end of the answer. Arguments that are not JSON fail the answer
(`parse:functionary_arguments_not_json`).
"""

from __future__ import annotations

import re

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    BadJSON,
    Context,
    TextCallParse,
    bounded,
    decode_at,
    failed,
    found,
    is_name,
)
from orchestrator.core.callformats.scan import skip_ws
from orchestrator.core.types import ParsedCall

FAMILY = "functionary"
FUNCTION, FUNCTION_END = "<function=", "</function>"
# v3.2: ">>>" then a name on its own line (possessive: never backtracks over a long line).
_RECIPIENT = re.compile(r">>>([^\s<>{}\[\]()\"',;=`]++)[ \t]*+\r?\n")
_LEADING = re.compile(r"\s*+([^\s<>{}\[\]()\"',;=`]++)[ \t]*+\r?\n")
_TEXT_RECIPIENTS = frozenset({"all"})


class _Bad(Exception):
    """A call that cannot be read; its message is the failure reason."""


def _json_at(text: str, position: int) -> tuple[object, int]:
    try:
        return decode_at(text, position)
    except BadJSON:
        raise _Bad("arguments_not_json") from None


def _tagged(text: str) -> list[ParsedCall]:
    calls: list[ParsedCall] = []
    position = 0
    while (opened := text.find(FUNCTION, position)) != -1:
        name_end = text.find(">", opened + len(FUNCTION))
        if name_end == -1:
            break
        body = skip_ws(text, name_end + 1)
        if not text.startswith("{", body):
            position = name_end + 1  # qwen3_xml's <function=NAME><parameter=…>
            continue
        name = text[opened + len(FUNCTION) : name_end].strip()
        if not is_name(name):
            raise _Bad("no_name")
        arguments, end = _json_at(text, body)
        after = skip_ws(text, end)
        if text.startswith(FUNCTION_END, after):
            position = after + len(FUNCTION_END)
        elif after >= len(text):
            position = after
        else:
            raise _Bad("unclosed_function")
        bounded(calls).append(ParsedCall(name=name, arguments=arguments))
    return calls


def _recipients(text: str) -> list[ParsedCall]:
    calls: list[ParsedCall] = []
    for match in _RECIPIENT.finditer(text):
        name = match.group(1)
        if name in _TEXT_RECIPIENTS or not is_name(name) or not text.startswith("{", skip_ws(text, match.end())):
            continue
        arguments, _ = _json_at(text, match.end())
        bounded(calls).append(ParsedCall(name=name, arguments=arguments))
    return calls


def _leading(text: str, context: Context) -> list[ParsedCall]:
    """v3.2's first call: the generation prompt ends with ``>>>``, so the answer opens with ``NAME\n{`` (read
    only when NAME is an offered tool: without the marker nothing else says it is a call)."""
    match = _LEADING.match(text)
    if match is None or not context.offers(match.group(1)) or not text.startswith("{", skip_ws(text, match.end())):
        return []
    arguments, _ = _json_at(text, match.end())
    return [ParsedCall(name=match.group(1), arguments=arguments)]


def parse(text: str, context: Context) -> TextCallParse:
    """Functionary calls in either syntax (tagged ones first, then ``>>>`` ones), or the first failure."""
    try:
        calls = _tagged(text) if FUNCTION in text else []
        calls += _leading(text, context) if context.properties else []
        calls += _recipients(text) if ">>>" in text else []
    except _Bad as exc:
        return failed(FAMILY, str(exc))
    return found(FAMILY, calls) if calls else NOT_ATTEMPTED
