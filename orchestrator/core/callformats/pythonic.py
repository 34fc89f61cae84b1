"""The `pythonic` family: calls written as Python, ``[get_weather(city='SF', metric='celsius')]``.

Where (as vLLM's ``pythonic`` / ``llama4_pythonic`` / ``lfm2``, llama.cpp and SGLang read them):
- between the family's tokens: Llama 4 ``<|python_start|>…<|python_end|>``, LFM2
  ``<|tool_call_start|>…<|tool_call_end|>`` (the closing token may be missing at the very end);
- in a Gemma 3 ```` ```tool_code ```` block (a call, a list of calls, or ``print(call)``);
- bare: a bracketed list of calls that ends its line and opens it or follows a sentence ("I will check.
  [get_weather(city='Tokyo')]"), also after Llama 3.2's ``<|python_tag|>``; never inside an expression.

Inside tokens or a tool_code block the body is an attempt (a JSON body there is left to the `json` family);
one that is not valid Python is read again after repairing what LFM2 writes (raw newlines and unescaped
quotes inside strings, zero-padded integers), as vLLM does. Bare, only a list whose every element is a call,
at least one of them with keyword arguments, none, or an offered tool's name, is one (``[Smith(2020)]`` is a
citation, as vLLM's regex has it); a syntax error counts as an attempt only when it opens like a call with a
keyword argument (``[foo(x=…``). Arguments must be keywords with literal values (read by walking `ast` nodes, never
evaluated); a call with a positional or computed argument is dropped when a sibling converts (vLLM keeps the
good calls) and fails the answer when none does. Code in a fenced block of another language
(```` ```python ````) is never read.

Bounds: a region longer than 256k characters is not parsed (`parse:pythonic_too_large` when it is an
attempt); at most 8192 bare candidates are examined per answer; Python's parser refuses nesting deeper than
~200 brackets (a syntax error); RecursionError and MemoryError from `ast` count as a syntax error.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from orchestrator.core.callformats.base import NOT_ATTEMPTED, Context, TextCallParse, bounded, failed, found
from orchestrator.core.callformats.scan import bracket_end, fences, mask_fences, rest_of_line_blank, skip_ws
from orchestrator.core.callformats.values import is_literal, python_literal
from orchestrator.core.types import ParsedCall

FAMILY = "pythonic"
WRAPPERS = (("<|python_start|>", "<|python_end|>"), ("<|tool_call_start|>", "<|tool_call_end|>"))
TOOL_CODE = "tool_code"
PYTHON_TAG = "<|python_tag|>"
MAX_SOURCE = 256_000
MAX_CANDIDATES = 8192  # bare lists examined per answer (each costs one `ast.parse`)
# Fenced blocks whose body may hold bare calls; every other language is code, masked out.
_CALL_FENCES = frozenset({"", TOOL_CODE})
_BARE_START = re.compile(r"\[[ \t]*+[A-Za-z_][\w.]*+[ \t]*+\(")
_KEYWORD_START = re.compile(r"\[\s*+[A-Za-z_][\w.]*+\s*+\(\s*+[A-Za-z_]\w*+\s*+=(?!=)")
_PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)


class _Bad(Exception):
    """An attempt that cannot be read; its message is the failure reason."""


def _dotted(node: ast.expr) -> str | None:
    """The name a call is made to: ``f`` or ``a.b.f``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return f"{owner}.{node.attr}" if owner else None
    return None


def _call(node: ast.Call) -> ParsedCall:
    name = _dotted(node.func)
    if name is None:
        raise _Bad("not_a_call")
    if node.args or any(keyword.arg is None for keyword in node.keywords):
        raise _Bad("positional_arguments")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        value = python_literal(keyword.value)
        if not is_literal(value):
            raise _Bad("non_literal_argument")
        arguments[str(keyword.arg)] = value
    return ParsedCall(name=name, arguments=arguments)


def _list_calls(elements: list[ast.Call]) -> list[ParsedCall]:
    """The calls of a list; a call whose arguments are not literals is dropped when a sibling converts (vLLM
    keeps the good calls), and fails the list when none does."""
    calls: list[ParsedCall] = []
    first_problem: _Bad | None = None
    for element in elements:
        try:
            calls.append(_call(element))
        except _Bad as exc:
            first_problem = first_problem or exc
    if not calls and first_problem is not None:
        raise first_problem
    return calls


def _expression_calls(node: ast.expr) -> list[ParsedCall]:
    """A call, a list or tuple of calls, or ``print(call)``."""
    if isinstance(node, ast.List | ast.Tuple):
        if not node.elts or not all(isinstance(element, ast.Call) for element in node.elts):
            raise _Bad("not_a_call")
        return _list_calls([element for element in node.elts if isinstance(element, ast.Call)])
    if isinstance(node, ast.Call):
        inner = node.args[0] if len(node.args) == 1 else None
        if _dotted(node.func) == "print" and isinstance(inner, ast.Call) and not node.keywords:
            return [_call(inner)]
        return [_call(node)]
    raise _Bad("not_a_call")


def _parse_source(source: str, mode: str) -> ast.AST:
    if len(source) > MAX_SOURCE:
        raise _Bad("too_large")
    try:
        return ast.parse(source, mode=mode)
    except _PARSE_ERRORS:
        raise _Bad("syntax") from None


def _wrapped_calls(body: str) -> list[ParsedCall]:
    """A token- or tool_code-wrapped body: expression statements, each a call or a list of calls. A body that
    is not valid Python is read once more after `_repair` (as vLLM's LFM2 parser recovers it)."""
    try:
        tree = _parse_source(body.strip(), "exec")
    except _Bad as exc:
        if str(exc) != "syntax":
            raise
        tree = _parse_source(_repair(body.strip()), "exec")
    assert isinstance(tree, ast.Module)
    if not tree.body or not all(isinstance(statement, ast.Expr) for statement in tree.body):
        raise _Bad("not_a_call")
    return [call for statement in tree.body if isinstance(statement, ast.Expr) for call in _guarded(statement.value)]


def _repair(source: str) -> str:
    """Python the way small models write it: raw newlines inside strings become escapes, a quote inside a
    string that is not followed by `,` `)` `]` `}` `:` or the end is escaped, zero-padded integers lose their
    zeros. One pass, linear."""
    out: list[str] = []
    quote: str | None = None
    index, length = 0, len(source)
    while index < length:
        char = source[index]
        if quote is None:
            if char in "'\"":
                quote = char
            elif char == "0" and not _in_word(source, index):
                end = index
                while end + 1 < length and source[end] == "0" and source[end + 1].isdigit():
                    end += 1
                if end > index:
                    index = end
                    continue
        elif char == "\\" and index + 1 < length:
            out.append(source[index : index + 2])
            index += 2
            continue
        elif char == "\n":
            char = "\\n"
        elif char == quote:
            following = skip_ws(source, index + 1)
            if following >= length or source[following] in ",)]}:":
                quote = None
            else:
                char = "\\" + char
        out.append(char)
        index += 1
    return "".join(out)


def _in_word(source: str, index: int) -> bool:
    """Whether the character before `index` continues a name or number (so a 0 there is not padding)."""
    return index > 0 and (source[index - 1].isalnum() or source[index - 1] in "_.")


def _wrapped_regions(text: str) -> list[str]:
    regions: list[str] = []
    for begin, end in WRAPPERS:
        position = 0
        while (start := text.find(begin, position)) != -1:
            stop = text.find(end, start)
            if stop == -1:  # unclosed: runs to the end, and no later region can close either
                regions.append(text[start + len(begin) :])
                break
            regions.append(text[start + len(begin) : stop])
            position = stop + len(end)
    regions.extend(fence.body for fence in fences(text) if fence.lang == TOOL_CODE)
    return [region for region in regions if not region.lstrip().startswith(("{", "[{", "[ {", "[\n{"))]


def _bare_candidate(text: str, start: int, context: Context) -> tuple[list[ParsedCall] | None, int | None]:
    """Calls of the bracketed list at `start` (None: not a call attempt) and where it ends (None: never)."""
    end = bracket_end(text, start, start + MAX_SOURCE + 1)
    attempt = bool(_KEYWORD_START.match(text, start))
    if end is None:
        if attempt:
            raise _Bad("too_large" if len(text) - start > MAX_SOURCE else "syntax")
        return None, None
    if text[end - 1] != "]":  # the list closed with another bracket: `[foo(x=1])]`
        if attempt:
            raise _Bad("syntax")
        return None, end
    if not rest_of_line_blank(text, end):
        return None, end
    try:
        tree = _parse_source(text[start:end], "eval")
    except _Bad:
        if attempt:
            raise
        return None, end
    body = tree.body if isinstance(tree, ast.Expression) else None
    if not isinstance(body, ast.List) or not body.elts or not all(isinstance(e, ast.Call) for e in body.elts):
        return None, end
    elements = [e for e in body.elts if isinstance(e, ast.Call)]
    if not any(e.keywords or not e.args or context.offers(_dotted(e.func) or "") for e in elements):
        return None, end  # positional arguments only, to no offered tool: a citation or an expression
    return _guarded(body), end


def _guarded(node: ast.expr) -> list[ParsedCall]:
    try:
        return _expression_calls(node)
    except RecursionError:  # a literal nested past Python's recursion limit
        raise _Bad("syntax") from None


def _stands_alone(text: str, start: int) -> bool:
    """A bare list opens a line, or follows a sentence ("I will check. [get_weather(…)]"), never an expression
    (``x = [f(a=1)]``, ``y[f(a=1)]``) or a Python prompt (``>>> [f(a=1)]``)."""
    index = start - 1
    while index >= 0 and text[index] in " \t":
        index -= 1
    if index >= 2 and text[index - 2 : index + 1] == ">>>":
        return False
    return index < 0 or text[index] in "\n.:!?>"


def _bare_calls(text: str, context: Context) -> list[ParsedCall]:
    source = mask_fences(text.replace(PYTHON_TAG, "\n"), _CALL_FENCES, "\n")
    calls: list[ParsedCall] = []
    position, candidates = 0, 0
    while (match := _BARE_START.search(source, position)) is not None and candidates <= MAX_CANDIDATES:
        if not _stands_alone(source, match.start()):
            position = match.start() + 1
            continue
        candidates += 1
        found_calls, end = _bare_candidate(source, match.start(), context)
        if end is None:
            break  # never closes: nothing after it stands alone
        bounded(calls).extend(found_calls or [])
        position = end
    return calls


def parse(text: str, context: Context) -> TextCallParse:
    """Python-style calls (wrapped, tool_code, or a bare list), or the first failure; prose and code are not."""
    try:
        regions = _wrapped_regions(text)
        if regions:
            return found(FAMILY, [call for region in regions for call in _wrapped_calls(region)])
        calls = _bare_calls(text, context)
    except _Bad as exc:
        return failed(FAMILY, str(exc))
    return found(FAMILY, calls) if calls else NOT_ATTEMPTED
