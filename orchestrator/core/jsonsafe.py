"""Model output made recordable: every value a verdict carries serialises as UTF-8 JSON. Pure.

A reply decoded from JSON may hold a lone surrogate (``"\\ud800"`` is valid JSON, but no UTF-8) and nest as
deep as the decoder allows (~1,000 levels), while pydantic serialises 255 levels at most: either would make
the turn record unwritable. `json_safe` replaces lone surrogates with U+FFFD and any container nested deeper
than `MAX_RECORD_DEPTH` with a marker string. The walk is bounded by that depth and linear in the size.
"""

from __future__ import annotations

import re
from typing import Any

MAX_RECORD_DEPTH = 200  # well under pydantic's 255, leaving room for the record's own nesting
TOO_DEEP = f"<nested deeper than {MAX_RECORD_DEPTH} levels: not recorded>"
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (ASCII text is returned as is, at once)."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` with surrogates replaced and over-deep containers cut (see the module docstring). Values that
    are not JSON (Python callers' own objects) pass through untouched."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict | list | tuple) and depth >= MAX_RECORD_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {safe_text(k) if isinstance(k, str) else k: json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item, depth + 1) for item in value]
    return value
