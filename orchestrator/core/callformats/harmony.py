"""The `harmony` family (gpt-oss):
``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>``.

A harmony answer is a run of messages, each a header then ``<|message|>`` then a body that ends at
``<|call|>``, ``<|end|>``, ``<|return|>`` or the next ``<|start|>`` / ``<|channel|>``. A header that names a
recipient (``to=functions.NAME``, before or after the channel) makes its body a call's arguments; the
recipient ``to=`` may also name a built-in tool (``browser.search``, ``python``), kept as the call's name so
the schema check reports it as not offered. Bodies are JSON whatever the declared content type (gpt-oss
writes ``json`` or nothing); one that does not decode fails the answer.

Why not `openai-harmony`: its parser needs the tokens, and `load_harmony_encoding` downloads the o200k
vocabulary on first use ("error downloading or loading vocab file" offline). vLLM's own harmony tool parser
likewise refuses text ("requires token IDs"). The text markers above are what the tokens decode to.
"""

from __future__ import annotations

import re

from orchestrator.core.callformats.base import (
    NOT_ATTEMPTED,
    BadJSON,
    Context,
    TextCallParse,
    bounded,
    failed,
    found,
    is_name,
    loads,
)
from orchestrator.core.callformats.scan import MarkerFinder
from orchestrator.core.types import ParsedCall

FAMILY = "harmony"
MESSAGE = "<|message|>"
_BODY_ENDS = ("<|call|>", "<|end|>", "<|return|>", "<|start|>", "<|channel|>", MESSAGE)
_RECIPIENT = re.compile(r"(?:^|[\s>])to=([^\s<]++)")
_NOT_TOOLS = frozenset({"assistant", "user", "system", "developer", "all"})


def _messages(text: str) -> list[tuple[str, str, str]]:
    """(header, body, terminator) of each message, in order."""
    messages: list[tuple[str, str, str]] = []
    ends = MarkerFinder(text, _BODY_ENDS)
    header_start = 0
    while (marker := text.find(MESSAGE, header_start)) != -1:
        body_start = marker + len(MESSAGE)
        end, terminator = ends.find(body_start) or (len(text), "")
        messages.append((text[header_start:marker], text[body_start:end], terminator))
        header_start = end if terminator in ("<|start|>", "<|channel|>", MESSAGE) else end + len(terminator)
    return messages


def _recipient(header: str) -> str | None:
    """The recipient named in a message header, read from the message's own ``<|start|>`` (or, for an answer
    that continues the prompt's ``<|start|>assistant``, from its first character when it opens with ``to=``,
    else from its ``<|channel|>``), so prose before the first message cannot name one."""
    start = header.rfind("<|start|>")
    if start == -1:
        start = 0 if header.lstrip().startswith("to=") else header.find("<|channel|>")
    if start == -1:
        return None
    match = _RECIPIENT.search(header, start)
    if match is None:
        return None
    recipient = match.group(1).removeprefix("functions.")
    return None if recipient in _NOT_TOOLS else recipient


def parse(text: str, context: Context) -> TextCallParse:
    """Calls addressed to a recipient in harmony messages; prose messages are not attempts."""
    if "to=" not in text:
        return NOT_ATTEMPTED  # no header names a recipient
    calls: list[ParsedCall] = []
    for header, body, _terminator in _messages(text):
        name = _recipient(header)
        if name is None:
            continue
        if not is_name(name):
            return failed(FAMILY, "no_name")
        try:
            arguments = loads(body) if body.strip() else {}
        except BadJSON:
            return failed(FAMILY, "arguments_not_json")
        bounded(calls).append(ParsedCall(name=name, arguments=arguments))
    return found(FAMILY, calls) if calls else NOT_ATTEMPTED
