"""What triage compares between a cell and its peers: the first prompt and answer of each seed, the canary a
mode's requests resemble, the sampler each server applies."""

from __future__ import annotations

import difflib
from typing import Any

HUNK_LINES = 24


def effective_sampler(config: dict[str, Any]) -> dict[str, Any]:
    """What the server samples with: each canonical field as sent, else the server's default; plus the
    stack-only stages the server runs with a non-off default."""
    decoding = dict(config.get("decoding") or {})
    not_sent = set(((config.get("sampler") or {}).get("not_sent") or {}).keys())
    defaults = (config.get("sampling_defaults") or {}).get("values") or {}
    sampler = {
        name: (defaults.get(name, "unknown") if name in not_sent else value)
        for name, value in decoding.items()
        if name not in ("seed", "extra")
    }
    active = (config.get("sampling_defaults") or {}).get("active_unsent")
    return {**sampler, "active_stack_stages": active}


def known(value: Any) -> bool:
    """A stack that cannot say (None, 'unknown') is not evidence of a difference."""
    return value is not None and value != "unknown"


def canary_hunk(before: str, after: str, names: tuple[str, str]) -> list[str]:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), *names, n=1, lineterm="")
    return list(lines)[:HUNK_LINES]


def first_turn_prompts(turns: list[dict[str, Any]]) -> dict[str, int]:
    """Seed -> the prompt tokens of its first turn, as the server used them (the same request on every stack)."""
    return {
        str(t["seed"]): t["tokens"]["prompt"]
        for t in turns
        if t.get("turn") == 0 and isinstance((t.get("tokens") or {}).get("prompt"), int)
    }


def canary_for(config: dict[str, Any], sends_tools: bool) -> tuple[dict[str, Any], str]:
    """The canary a mode's requests resemble: with tools for modes that send them, else the tool-less one (a
    run recorded before it existed has only the tools canary)."""
    canary = config.get("canary") or {}
    if sends_tools or "plain" not in canary:
        return canary, "canary prompt (with tools)"
    return canary["plain"] or {}, "canary prompt (no tools)"


def first_answers(turns: list[dict[str, Any]]) -> dict[str, str | None]:
    answered = (t for t in turns if t.get("turn") == 0 and 200 <= (t.get("http_status") or 0) < 300)
    return {str(t["seed"]): t.get("raw_content") for t in answered}  # a refusal is no answer to compare


def agreement(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    common = sorted(set(ours) & set(theirs))
    return f"{sum(ours[seed] == theirs[seed] for seed in common)}/{len(common)}"
