"""What a reply's text (or a user's message) says, for the product channel's guards. Pure.

The predicates are deliberately plain string rules: a guard that reads too much into prose fires where it
should not, and the articles the guards come from draw their boundaries in exactly these terms (a question
to the user, a refusal, small talk, a final answer that is JSON).
"""

from __future__ import annotations

import json
import re

from orchestrator.core.textcalls import extract_text_calls

# Characters that may trail a question mark without hiding it: quotes, brackets and markdown emphasis.
_TRAILING_DECORATION = " \t\r\n\"'`*_)]}»”’"
_QUESTION_MARKS = ("?", "？")

# Phrases that ask the user for something even without a question mark.
_ASK_PHRASES = re.compile(
    r"\bplease\s+(?:provide|specify|confirm|tell\s+me|let\s+me\s+know|share|clarify|send)\b"
    r"|\blet\s+me\s+know\b"
    r"|\b(?:could|can|would)\s+you\s+(?:please\s+)?(?:provide|tell|share|confirm|specify|clarify|send|give)\b"
    r"|\bI\s+(?:will\s+)?need\s+(?:the|your|a|an|some|more)\b",
    re.IGNORECASE,
)

# Apostrophes are normalised to "'" before these match.
_REFUSAL_PHRASES = re.compile(
    r"\bI\s+can't\b|\bI\s+cannot\b|\bI'm\s+unable\b|\bI\s+am\s+unable\b|\bI\s+won't\b"
    r"|\bI'm\s+not\s+able\b|\bI\s+am\s+not\s+able\b|\bI'm\s+sorry,\s+but\b|\bnot\s+allowed\s+to\b",
    re.IGNORECASE,
)

_SOCIAL_PHRASES = re.compile(
    r"\b(?:hi|hello|hey|hiya|greetings|good\s+(?:morning|afternoon|evening|night)|thanks|thank\s+you|thx|ty"
    r"|cheers|bye|goodbye|see\s+you|see\s+ya|later|how\s+are\s+you|how's\s+it\s+going|that's\s+all|that\s+is\s+all"
    r"|that's\s+it|nice|great|awesome|cool|perfect|ok|okay|appreciate\s+it|have\s+a\s+(?:good|nice|great)\s+\w+)\b",
    re.IGNORECASE,
)

# Words that make a message a task: a verb the tools perform or an object they act on.
_TASK_WORDS = re.compile(
    r"\b(?:form|forms|forming|register|registers|registration|add|adds|create|creates|check|checks|status"
    r"|hash|hashes|encode|encodes|decode|decodes|md5|sha\d*|base64|file|files|filing|submit|update|change"
    r"|remove|delete|cancel|find|look\s*up|lookup|search|compute|calculate|convert|send|book|buy|pay"
    r"|incorporate|company|entity|llc|corp|corporation|agent|shareholders?|shares|address)\b",
    re.IGNORECASE,
)
_SMALL_TALK_MAX_WORDS = 12

_JSON_FENCE = re.compile(r"\A```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)


def _normalise_apostrophes(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("\u02bc", "'")


def is_question(text: str | None) -> bool:
    """Whether the reply asks the user something: a sentence ending in a question mark, or an ask phrase."""
    if not text or not text.strip():
        return False
    stripped = text.rstrip(_TRAILING_DECORATION)
    if stripped.endswith(_QUESTION_MARKS):
        return True
    # A question in the middle of the reply still asks: "Which state? I'll use it for the filing."
    if re.search(r"[?？][\s\"'`*_)\]»”’]*(?:\s|$)", text):
        return True
    return bool(_ASK_PHRASES.search(_normalise_apostrophes(text)))


def is_refusal(text: str | None) -> bool:
    """Whether the reply declines: "I can't", "I'm unable", "I'm sorry, but", "not allowed to", ..."""
    if not text:
        return False
    return bool(_REFUSAL_PHRASES.search(_normalise_apostrophes(text)))


def is_small_talk(user_text: str | None) -> bool:
    """Whether the user's message is social (a greeting, thanks, a goodbye) rather than a task.

    Short, social, without digits (ids, amounts) and without a word naming a task or what it acts on.
    """
    if not user_text or not user_text.strip():
        return False
    text = _normalise_apostrophes(user_text)
    if len(text.split()) > _SMALL_TALK_MAX_WORDS or re.search(r"\d", text):
        return False
    if _TASK_WORDS.search(text):
        return False
    return bool(_SOCIAL_PHRASES.search(text))


def _unfenced(text: str) -> str:
    """`text` stripped, with one ```json fenced block unwrapped when the fence is the whole text."""
    stripped = text.strip()
    fenced = _JSON_FENCE.match(stripped)
    return fenced.group(1).strip() if fenced else stripped


def looks_like_json_answer(text: str | None) -> bool:
    """Whether a final answer is JSON (an object or array, possibly fenced) or a call written as text.

    The article's rule: an answer that starts with "{" or "[" is not an answer for a person. Prose with
    braces in the middle ("The result is {ok}.") is prose.
    """
    if not text or not text.strip():
        return False
    body = _unfenced(text)
    if body.startswith(("{", "[")):
        return True
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        decoded = None
    if isinstance(decoded, dict | list):
        return True
    return extract_text_calls(text).ok


__all__ = ["is_question", "is_refusal", "is_small_talk", "looks_like_json_answer"]
