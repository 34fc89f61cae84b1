"""Table-driven classifier tests over real reply bodies of every stack (see tests/bodies.py)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.classify import classify
from orchestrator.core.types import Outcome, TransportError
from orchestrator.serving.registry import load_stack
from tests import bodies as b

FENCED_CALL = '```json\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n```'
BARE_CALL = '{"name": "pod_status", "arguments": {"name": "api-1"}}'
TRUNCATED_CALL = '```json\n{"name": "pod_status", "arguments": {"name": "api'
GOOD = b.openai_tool_call("pod_status", {"name": "api-1"})
# The rows whose reply carried no model output: the only ones a runner may send again.
RETRYABLE_DETAILS = {"server:loading", "server:http_500", "server:http_502", "server:rate_limited"}

CASES: list[tuple[str, str, str, int | None, Any, Outcome, str | None]] = [
    # id, stack, mode, status, body, outcome, detail
    (
        "vllm-wrapped-400",
        "vllm",
        "native",
        400,
        b.VLLM_AUTO_REFUSAL_WRAPPED,
        Outcome.REJECTED_REQUEST,
        "refused:no_tool_parser",
    ),
    (
        "vllm-flat-400",
        "vllm",
        "native",
        400,
        b.VLLM_AUTO_REFUSAL_FLAT,
        Outcome.REJECTED_REQUEST,
        "refused:no_tool_parser",
    ),
    (
        "vllm-required-400",
        "vllm",
        "native+hint",
        400,
        b.VLLM_REQUIRED_REFUSAL,
        Outcome.REJECTED_REQUEST,
        "refused:no_tool_parser",
    ),
    (
        "vllm-unknown-4xx",
        "vllm",
        "native",
        422,
        {"detail": [{"msg": "bad"}]},
        Outcome.REJECTED_REQUEST,
        "refused:http_422",
    ),
    (
        "ollama-api-400",
        "ollama",
        "native",
        400,
        b.ollama_api_refusal(),
        Outcome.REJECTED_REQUEST,
        "refused:model_lacks_tools",
    ),
    (
        "ollama-v1-400",
        "ollama",
        "native",
        400,
        b.ollama_v1_refusal(),
        Outcome.REJECTED_REQUEST,
        "refused:model_lacks_tools",
    ),
    ("ollama-404", "ollama", "native", 404, b.ollama_not_found("x"), Outcome.REJECTED_REQUEST, "refused:unknown_model"),
    (
        "llamacpp-500-refusal",
        "llamacpp",
        "native",
        500,
        b.LLAMACPP_NO_JINJA,
        Outcome.REJECTED_REQUEST,
        "refused:no_jinja",
    ),
    ("llamacpp-503-loading", "llamacpp", "native", 503, b.LLAMACPP_LOADING, Outcome.NON_RESPONSE, "server:loading"),
    (
        "llamacpp-500-other",
        "llamacpp",
        "native",
        500,
        {"error": {"code": 500, "message": "boom"}},
        Outcome.NON_RESPONSE,
        "server:http_500",
    ),
    ("html-502", "vllm", "native", 502, "<html>Bad Gateway</html>", Outcome.NON_RESPONSE, "server:http_502"),
    ("200-non-json", "vllm", "native", 200, "<html>ok</html>", Outcome.NON_RESPONSE, "body:not_json"),
    ("200-no-choices", "vllm", "native", 200, {"id": "x"}, Outcome.NON_RESPONSE, "body:no_message"),
    (
        "sglang-400-flat",
        "sglang",
        "native",
        400,
        b.SGLANG_EMPTY_TOOLS,
        Outcome.REJECTED_REQUEST,
        "refused:bad_tool_choice",
    ),
    (
        "sglang-200-text",
        "sglang",
        "native",
        200,
        b.openai_reply(FENCED_CALL),
        Outcome.UNPARSEABLE_TEXT,
        "parse:call_in_text",
    ),
    ("sglang-200-text-hint", "sglang", "native+hint", 200, b.openai_reply(FENCED_CALL), Outcome.VALID_CALL, None),
    ("llamacpp-native-ok", "llamacpp", "native", 200, b.openai_reply("", [GOOD]), Outcome.VALID_CALL, None),
    ("vllm-native-ok-null-content", "vllm", "native", 200, b.openai_reply(None, [GOOD]), Outcome.VALID_CALL, None),
    (
        "args-as-object",
        "ollama",
        "native",
        200,
        b.ollama_chat_reply("", [{"function": {"name": "pod_status", "arguments": {"name": "a"}}}]),
        Outcome.VALID_CALL,
        None,
    ),
    (
        "args-as-string",
        "vllm",
        "native",
        200,
        b.openai_reply("", [b.openai_tool_call("pod_status", '{"name": "a"}')]),
        Outcome.VALID_CALL,
        None,
    ),
    (
        "args-bad-json",
        "vllm",
        "native",
        200,
        b.openai_reply("", [b.openai_tool_call("pod_status", '{"name": ')]),
        Outcome.UNPARSEABLE_TEXT,
        "parse:arguments_not_json",
    ),
    (
        "unknown-tool",
        "vllm",
        "native",
        200,
        b.openai_reply("", [b.openai_tool_call("delete_pod", {"name": "a"})]),
        Outcome.HALLUCINATED_CALL,
        "call:unknown_tool",
    ),
    (
        "missing-required",
        "vllm",
        "native",
        200,
        b.openai_reply("", [b.openai_tool_call("pod_status", {})]),
        Outcome.HALLUCINATED_CALL,
        "schema:missing_required",
    ),
    (
        "wrong-type",
        "vllm",
        "native",
        200,
        b.openai_reply("", [b.openai_tool_call("pod_status", {"name": 3})]),
        Outcome.HALLUCINATED_CALL,
        "schema:wrong_type",
    ),
    (
        "additional-property",
        "vllm",
        "native",
        200,
        b.openai_reply("", [b.openai_tool_call("pod_status", {"name": "a", "zone": "x"})]),
        Outcome.HALLUCINATED_CALL,
        "schema:unexpected_property",
    ),
    (
        "multi-call-one-bad",
        "vllm",
        "native",
        200,
        b.openai_reply("", [GOOD, b.openai_tool_call("list_records", {"page": "two"}, "c2")]),
        Outcome.HALLUCINATED_CALL,
        "schema:wrong_type",
    ),
    (
        "multi-call-all-good",
        "vllm",
        "native",
        200,
        b.openai_reply("", [GOOD, b.openai_tool_call("list_records", {"page": 2}, "c2")]),
        Outcome.VALID_CALL,
        None,
    ),
    (
        "tool-calls-empty-list-prose",
        "vllm",
        "native",
        200,
        b.openai_reply("The pod is fine.", []),
        Outcome.NO_CALL_PROSE,
        "prose:no_call",
    ),
    (
        "tool-calls-empty-list-blank",
        "vllm",
        "native",
        200,
        b.openai_reply("", []),
        Outcome.NON_RESPONSE,
        "empty:no_content",
    ),
    (
        "tool-calls-null-blank",
        "vllm",
        "native",
        200,
        b.openai_reply("  \n", None),
        Outcome.NON_RESPONSE,
        "empty:no_content",
    ),
    (
        "prose-mentions-function",
        "llamacpp",
        "text-tools",
        200,
        b.openai_reply("I would use the function pod_status via a tool_call."),
        Outcome.NO_CALL_PROSE,
        "prose:no_call",
    ),
    (
        "truncated-json-text",
        "llamacpp",
        "text-tools",
        200,
        b.openai_reply(TRUNCATED_CALL),
        Outcome.UNPARSEABLE_TEXT,
        "parse:malformed_json",
    ),
    (
        "truncated-json-native",
        "llamacpp",
        "native",
        200,
        b.openai_reply(TRUNCATED_CALL),
        Outcome.UNPARSEABLE_TEXT,
        "parse:malformed_json",  # the recogniser's own detail
    ),
    ("text-tools-bare", "llamacpp", "text-tools", 200, b.openai_reply(BARE_CALL), Outcome.VALID_CALL, None),
    (
        "text-tools-unknown",
        "llamacpp",
        "text-tools",
        200,
        b.openai_reply('{"name": "reboot", "arguments": {}}'),
        Outcome.HALLUCINATED_CALL,
        "call:unknown_tool",
    ),
    ("constrained-json", "vllm", "constrained", 200, b.openai_reply(BARE_CALL), Outcome.VALID_CALL, None),
    (
        "text-tools-args-string-bad",
        "llamacpp",
        "text-tools",
        200,
        b.openai_reply('{"name": "pod_status", "arguments": "{name: api}"}'),
        Outcome.UNPARSEABLE_TEXT,
        "parse:arguments_not_json",
    ),
    ("openai-cloud-native", "openai", "native", 200, b.openai_reply(None, [GOOD]), Outcome.VALID_CALL, None),
    # Measurement integrity (issue 8); more in tests/test_classify_integrity.py.
    ("openai-429", "openai", "native", 429, b.OPENAI_RATE_LIMITED, Outcome.NON_RESPONSE, "server:rate_limited"),
    (
        "llamacpp-500-parse-failure",
        "llamacpp",
        "native",
        500,
        b.LLAMACPP_PARSE_FAILURE,
        Outcome.UNPARSEABLE_TEXT,
        "parse:server_rejected_output",
    ),
    (
        "llamacpp-400-context-overflow",
        "llamacpp",
        "native",
        400,
        b.LLAMACPP_CONTEXT_OVERFLOW,
        Outcome.REJECTED_REQUEST,
        "refused:context_overflow",
    ),
    (
        "vllm-400-context-overflow",
        "vllm",
        "native",
        400,
        b.VLLM_CONTEXT_OVERFLOW,
        Outcome.REJECTED_REQUEST,
        "refused:context_overflow",
    ),
    (
        "vllm-reasoning-only",
        "vllm",
        "native",
        200,
        b.VLLM_REASONING_ONLY,
        Outcome.NON_RESPONSE,
        "empty:reasoning_only",
    ),
]


@pytest.mark.parametrize(
    ("stack", "mode", "status", "body", "outcome", "detail"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classify_real_bodies(
    stack: str, mode: str, status: int | None, body: Any, outcome: Outcome, detail: str | None
) -> None:
    spec = load_stack(stack)
    verdict = classify(
        refusals=spec.refusals,
        parser_failures=spec.parser_failures,
        mode=mode,
        tools=b.TOOLS,
        http_status=status,
        body=body,
    )
    assert verdict.outcome is outcome
    assert verdict.detail == detail
    assert verdict.retryable is (detail in RETRYABLE_DETAILS)


def test_every_outcome_is_covered_by_the_table() -> None:
    assert {c[5] for c in CASES} == set(Outcome)


def test_llamacpp_refusal_signature_is_stack_specific_not_status_class() -> None:
    # Same 500 body on a stack without that signature is a server failure, not a refusal.
    other = classify(
        refusals=load_stack("vllm").refusals, mode="native", tools=b.TOOLS, http_status=500, body=b.LLAMACPP_NO_JINJA
    )
    assert other.outcome is Outcome.NON_RESPONSE


@pytest.mark.parametrize("kind", ["timeout", "connection"])
def test_transport_errors_are_non_responses(kind: str) -> None:
    verdict = classify(
        refusals=[],
        mode="native",
        tools=b.TOOLS,
        http_status=None,
        body=None,
        transport_error=TransportError(kind=kind, message="x"),
    )
    assert (verdict.outcome, verdict.detail, verdict.error.type) == (Outcome.NON_RESPONSE, f"transport:{kind}", kind)


def test_native_text_call_is_recoverable_only_when_harness_parses_it() -> None:
    ok = classify(refusals=[], mode="native", tools=b.TOOLS, http_status=200, body=b.openai_reply(FENCED_CALL))
    broken = classify(refusals=[], mode="native", tools=b.TOOLS, http_status=200, body=b.openai_reply(TRUNCATED_CALL))
    assert ok.text_call_recoverable and not ok.calls
    assert not broken.text_call_recoverable


def test_native_hint_prefers_server_calls_then_text() -> None:
    server = classify(
        refusals=[],
        mode="native+hint",
        tools=b.TOOLS,
        http_status=200,
        body=b.openai_reply('{"name": "reboot", "arguments": {}}', [GOOD]),
    )
    text = classify(refusals=[], mode="native+hint", tools=b.TOOLS, http_status=200, body=b.openai_reply(BARE_CALL))
    assert (server.outcome, server.parse_path) == (Outcome.VALID_CALL, "server")
    assert (text.outcome, text.parse_path) == (Outcome.VALID_CALL, "harness")
    assert text.calls[0].arguments == {"name": "api-1"}


def test_rejection_keeps_status_and_body() -> None:
    verdict = classify(
        refusals=load_stack("vllm").refusals,
        mode="native",
        tools=b.TOOLS,
        http_status=400,
        body=b.VLLM_AUTO_REFUSAL_WRAPPED,
    )
    assert verdict.error.type == "http_400"
    assert verdict.error.body == b.VLLM_AUTO_REFUSAL_WRAPPED
