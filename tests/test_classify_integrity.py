"""The classifier's half of measurement integrity (issue 8): when a retry is allowed, rate limits, a stack's
parser failing on the model's output, empty and reasoning-only answers, context overflow, finish_reason and
flags, and constrained answers that break the enforced schema. Real bodies from tests/bodies.py."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.classify import CONTEXT_OVERFLOW_DETAIL, classify, is_context_overflow
from orchestrator.core.types import Classification, Outcome, TransportError
from orchestrator.serving.registry import load_stack, stack_names
from tests import bodies as b

BARE_CALL = '{"name": "pod_status", "arguments": {"name": "api-1"}}'
FENCED_CALL = f"```json\n{BARE_CALL}\n```"


def verdict(
    stack: str, status: int | None, body: Any, mode: str = "native", tools: Any = None, **extra: Any
) -> Classification:
    spec = load_stack(stack)
    return classify(
        refusals=spec.refusals,
        parser_failures=spec.parser_failures,
        mode=mode,
        tools=b.TOOLS if tools is None else tools,
        http_status=status,
        body=body,
        **extra,
    )


# --- 1. retryable: only when no model output arrived --------------------------------------------------------------

RETRYABLE = [
    ("llamacpp-503-loading", "llamacpp", 503, b.LLAMACPP_LOADING),
    ("llamacpp-500-plain", "llamacpp", 500, {"error": {"code": 500, "message": "slot unavailable"}}),
    ("vllm-502-html", "vllm", 502, "<html>Bad Gateway</html>"),
    ("openai-429", "openai", 429, b.OPENAI_RATE_LIMITED),
    ("no-status", "vllm", None, None),
]
FINAL = [
    ("200-empty", "vllm", 200, b.openai_reply("")),
    ("200-reasoning-only", "vllm", 200, b.VLLM_REASONING_ONLY),
    ("200-non-json", "vllm", 200, "<html>ok</html>"),
    ("200-error-in-200", "vllm", 200, {"error": {"message": "boom"}}),
    ("200-no-choices", "vllm", 200, {"id": "x"}),
    ("200-valid-call", "vllm", 200, b.openai_reply(None, [b.openai_tool_call("pod_status", {"name": "a"})])),
    ("400-tool-refusal", "vllm", 400, b.VLLM_AUTO_REFUSAL_WRAPPED),
    ("400-context-overflow", "llamacpp", 400, b.LLAMACPP_CONTEXT_OVERFLOW),
    ("500-refusal-signature", "llamacpp", 500, b.LLAMACPP_NO_JINJA),
    ("500-parser-failure", "llamacpp", 500, b.LLAMACPP_PARSE_FAILURE),
]


@pytest.mark.parametrize(("stack", "status", "body"), [c[1:] for c in RETRYABLE], ids=[c[0] for c in RETRYABLE])
def test_retryable_when_no_model_output_arrived(stack: str, status: int | None, body: Any) -> None:
    result = verdict(stack, status, body)
    assert result.retryable is True
    assert result.outcome is Outcome.NON_RESPONSE


@pytest.mark.parametrize(("stack", "status", "body"), [c[1:] for c in FINAL], ids=[c[0] for c in FINAL])
def test_an_answer_or_a_refusal_is_final(stack: str, status: int | None, body: Any) -> None:
    assert verdict(stack, status, body).retryable is False


@pytest.mark.parametrize("kind", ["timeout", "connection", "protocol"])
def test_transport_errors_are_retryable(kind: str) -> None:
    result = verdict("ollama", None, None, transport_error=TransportError(kind=kind, message="x"))
    assert (result.outcome, result.detail, result.retryable) == (Outcome.NON_RESPONSE, f"transport:{kind}", True)


# --- 2. HTTP 429 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", stack_names())
def test_429_is_a_rate_limited_non_response_not_a_refusal(stack: str) -> None:
    result = verdict(stack, 429, b.OPENAI_RATE_LIMITED)
    assert (result.outcome, result.detail, result.retryable) == (Outcome.NON_RESPONSE, "server:rate_limited", True)
    assert result.error is not None and result.error.type == "http_429"


# --- 3. a stack's parser failing on the model's output is the model's turn ------------------------------------------


@pytest.mark.parametrize("mode", ["native", "native+hint", "text-tools", "constrained"])
def test_llamacpp_parse_failure_is_the_models_unparseable_turn(mode: str) -> None:
    result = verdict("llamacpp", 500, b.LLAMACPP_PARSE_FAILURE, mode=mode)
    assert (result.outcome, result.detail, result.retryable) == (
        Outcome.UNPARSEABLE_TEXT,
        "parse:server_rejected_output",
        False,
    )
    assert result.raw_content == FENCED_CALL  # the text the error quotes, after "pos N: "
    assert result.text_call_recoverable is True
    assert (result.parse_path, result.calls) == ("server", [])
    assert result.error is not None and (result.error.type, result.error.body) == ("http_500", b.LLAMACPP_PARSE_FAILURE)


def test_a_quoted_output_the_harness_cannot_read_is_not_recoverable() -> None:
    result = verdict("llamacpp", 500, b.LLAMACPP_PARSE_FAILURE_UNRECOVERABLE)
    assert (result.outcome, result.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:server_rejected_output")
    assert result.raw_content == '<tool_call>\n{"name": "pod_status", "arguments": {"name": '
    assert result.text_call_recoverable is False


def test_b11312_parse_failure_quotes_no_output() -> None:
    result = verdict("llamacpp", 500, b.LLAMACPP_PARSE_FAILURE_B11312)
    assert (result.outcome, result.detail, result.retryable) == (
        Outcome.UNPARSEABLE_TEXT,
        "parse:server_rejected_output",
        False,
    )
    assert (result.raw_content, result.text_call_recoverable) == (None, False)


def test_ollama_harmony_parse_failure_is_the_models_turn() -> None:
    result = verdict("ollama", 500, b.OLLAMA_HARMONY_PARSE_FAILURE)
    assert (result.outcome, result.detail, result.retryable) == (
        Outcome.UNPARSEABLE_TEXT,
        "parse:server_rejected_output",
        False,
    )
    assert result.raw_content == '{"file_path": "a.py", "content": "x"}]'  # the call's arguments, as quoted
    assert result.text_call_recoverable is False


def test_parser_failure_signatures_are_stack_specific() -> None:
    other = verdict("vllm", 500, b.LLAMACPP_PARSE_FAILURE)
    assert (other.outcome, other.detail, other.retryable) == (Outcome.NON_RESPONSE, "server:http_500", True)


def test_a_parser_failure_only_under_its_status() -> None:
    # The signature is a 500; the same text under a 400 is a plain refusal of the request.
    result = verdict("llamacpp", 400, b.LLAMACPP_PARSE_FAILURE)
    assert (result.outcome, result.detail) == (Outcome.REJECTED_REQUEST, "refused:http_400")


def test_model_text_quoted_by_a_parser_failure_never_reads_as_a_refusal() -> None:
    body = {"error": {"code": 500, "message": "Failed to parse input at pos 0: tools param requires --jinja flag"}}
    result = verdict("llamacpp", 500, body)
    assert (result.outcome, result.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:server_rejected_output")
    assert result.raw_content == "tools param requires --jinja flag"


def test_without_parser_failures_the_500_stays_a_server_failure() -> None:
    # The keyword defaults to no signatures: callers that pass none keep the old reading.
    result = classify(
        refusals=load_stack("llamacpp").refusals,
        mode="native",
        tools=b.TOOLS,
        http_status=500,
        body=b.LLAMACPP_PARSE_FAILURE,
    )
    assert (result.outcome, result.detail) == (Outcome.NON_RESPONSE, "server:http_500")


# --- 4. empty and reasoning-only answers ----------------------------------------------------------------------------

REASONING_ONLY = [
    ("vllm-reasoning", "vllm", b.VLLM_REASONING_ONLY),
    ("llamacpp-reasoning-content", "llamacpp", b.LLAMACPP_REASONING_ONLY),
    ("sglang-reasoning-content", "sglang", b.LLAMACPP_REASONING_ONLY),
    ("ollama-thinking", "ollama", b.OLLAMA_THINKING_ONLY),
]


@pytest.mark.parametrize(("stack", "body"), [c[1:] for c in REASONING_ONLY], ids=[c[0] for c in REASONING_ONLY])
@pytest.mark.parametrize("mode", ["native", "text-tools"])
def test_reasoning_only_answer_is_a_final_non_response(stack: str, body: Any, mode: str) -> None:
    result = verdict(stack, 200, body, mode=mode)
    assert (result.outcome, result.detail, result.retryable) == (Outcome.NON_RESPONSE, "empty:reasoning_only", False)


def test_blank_reasoning_is_just_empty() -> None:
    body = b.openai_reply("", message_extra={"reasoning_content": "  \n"})
    assert verdict("llamacpp", 200, body).detail == "empty:no_content"


def test_reasoning_beside_prose_or_a_call_does_not_change_the_outcome() -> None:
    prose = b.openai_reply("The pod is fine.", message_extra={"reasoning": "thinking"})
    call = b.openai_reply(None, [b.openai_tool_call("pod_status", {"name": "a"})], message_extra={"reasoning": "t"})
    assert verdict("vllm", 200, prose).outcome is Outcome.NO_CALL_PROSE
    assert verdict("vllm", 200, call).outcome is Outcome.VALID_CALL


# --- 5. context overflow is not a tool refusal ----------------------------------------------------------------------

OVERFLOWS = [
    ("llamacpp", b.LLAMACPP_CONTEXT_OVERFLOW),
    (
        "llamacpp",
        {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it"}},
    ),
    ("llamacpp", {"error": {"code": 400, "message": "reworded", "type": "exceed_context_size_error"}}),
    ("vllm", b.VLLM_CONTEXT_OVERFLOW),
    ("vllm", b.VLLM_PROMPT_TOO_LONG),
    ("vllm", {"object": "error", "message": b.VLLM_CONTEXT_OVERFLOW["error"]["message"], "code": 400}),
    ("sglang", b.SGLANG_CONTEXT_OVERFLOW),
    ("ollama", b.OLLAMA_CONTEXT_OVERFLOW),
    ("openai", b.OPENAI_CONTEXT_OVERFLOW),
    ("openai", {"error": {"message": "Your input exceeds the context window.", "code": "context_length_exceeded"}}),
]


@pytest.mark.parametrize(("stack", "body"), OVERFLOWS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(OVERFLOWS)])
def test_context_overflow_is_its_own_refusal(stack: str, body: Any) -> None:
    result = verdict(stack, 400, body)
    assert (result.outcome, result.detail, result.retryable) == (
        Outcome.REJECTED_REQUEST,
        CONTEXT_OVERFLOW_DETAIL,
        False,
    )
    assert is_context_overflow(result.detail)


TOOL_REFUSALS = [
    ("vllm", 400, b.VLLM_AUTO_REFUSAL_WRAPPED, "refused:no_tool_parser"),
    ("vllm", 400, b.VLLM_AUTO_REFUSAL_FLAT, "refused:no_tool_parser"),
    ("vllm", 400, b.VLLM_REQUIRED_REFUSAL, "refused:no_tool_parser"),
    ("ollama", 400, b.ollama_api_refusal(), "refused:model_lacks_tools"),
    ("ollama", 400, b.ollama_v1_refusal(), "refused:model_lacks_tools"),
    ("ollama", 404, b.ollama_not_found("x"), "refused:unknown_model"),
    ("llamacpp", 500, b.LLAMACPP_NO_JINJA, "refused:no_jinja"),
    ("sglang", 400, b.SGLANG_EMPTY_TOOLS, "refused:bad_tool_choice"),
]


@pytest.mark.parametrize(("stack", "status", "body", "detail"), TOOL_REFUSALS)
def test_tool_refusals_still_match_first(stack: str, status: int, body: Any, detail: str) -> None:
    assert verdict(stack, status, body).detail == detail


@pytest.mark.parametrize("stack", stack_names())
def test_no_overflow_signature_catches_any_stacks_tool_refusal(stack: str) -> None:
    for _, status, body, _ in TOOL_REFUSALS:
        assert not is_context_overflow(verdict(stack, status, body).detail)


def test_is_context_overflow_only_for_its_detail() -> None:
    assert is_context_overflow("refused:context_overflow")
    assert not is_context_overflow("refused:no_tool_parser")
    assert not is_context_overflow(None)


# --- 6. finish_reason and the truncation flag -----------------------------------------------------------------------


def test_finish_reason_is_read_from_every_stack_shape() -> None:
    call = b.openai_tool_call("pod_status", {"name": "a"})
    assert verdict("vllm", 200, b.openai_reply("hi")).finish_reason == "stop"
    assert verdict("vllm", 200, b.openai_reply(None, [call])).finish_reason == "tool_calls"
    assert verdict("ollama", 200, b.ollama_chat_reply("hi")).finish_reason == "stop"
    assert verdict("ollama", 200, b.ollama_chat_reply("hi", done_reason="length")).finish_reason == "length"
    no_reason = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    assert verdict("vllm", 200, no_reason).finish_reason is None
    odd = {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": 7}]}
    assert verdict("vllm", 200, odd).finish_reason is None
    assert verdict("vllm", 400, b.VLLM_AUTO_REFUSAL_WRAPPED).finish_reason is None


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [
        ("native", Outcome.UNPARSEABLE_TEXT),
        ("text-tools", Outcome.UNPARSEABLE_TEXT),
        ("native+hint", Outcome.UNPARSEABLE_TEXT),
    ],
)
def test_length_cut_is_flagged_whatever_the_outcome(mode: str, outcome: Outcome) -> None:
    result = verdict("vllm", 200, b.TRUNCATED_CALL_REPLY, mode=mode)
    assert result.outcome is outcome
    assert (result.finish_reason, result.flags) == ("length", ["truncated:max_tokens"])


def test_length_flag_on_prose_and_on_ollama() -> None:
    prose = verdict("vllm", 200, b.openai_reply("The pod", finish_reason="length"))
    ollama = verdict("ollama", 200, b.ollama_chat_reply("The pod", done_reason="length"))
    assert prose.outcome is Outcome.NO_CALL_PROSE and prose.flags == ["truncated:max_tokens"]
    assert ollama.flags == ["truncated:max_tokens"]


def test_no_flags_on_a_complete_answer() -> None:
    assert verdict("vllm", 200, b.openai_reply(BARE_CALL), mode="text-tools").flags == []


# --- 7. constraint:violated -----------------------------------------------------------------------------------------

CONSTRAINED = [
    ("valid-object", BARE_CALL, Outcome.VALID_CALL, []),
    ("surrounding-whitespace", f"\n  {BARE_CALL}\n", Outcome.VALID_CALL, []),
    ("fenced", FENCED_CALL, Outcome.VALID_CALL, ["constraint:violated"]),
    ("prose", "The pod is fine.", Outcome.NO_CALL_PROSE, ["constraint:violated"]),
    ("empty", "", Outcome.NON_RESPONSE, ["constraint:violated"]),
    ("name-not-in-enum", '{"name": "reboot", "arguments": {}}', Outcome.HALLUCINATED_CALL, ["constraint:violated"]),
    ("extra-key", '{"name": "list_records", "arguments": {}, "id": "1"}', Outcome.VALID_CALL, ["constraint:violated"]),
    ("no-arguments", '{"name": "list_records"}', Outcome.VALID_CALL, ["constraint:violated"]),
    ("list", f"[{BARE_CALL}]", Outcome.VALID_CALL, ["constraint:violated"]),
    ("two-objects", f"{BARE_CALL}\n{BARE_CALL}", Outcome.VALID_CALL, ["constraint:violated"]),
    ("tag-wrapped", f"<tool_call>{BARE_CALL}</tool_call>", Outcome.VALID_CALL, ["constraint:violated"]),
]


@pytest.mark.parametrize(("content", "outcome", "flags"), [c[1:] for c in CONSTRAINED], ids=[c[0] for c in CONSTRAINED])
def test_constrained_answer_is_checked_against_the_enforced_schema(
    content: str, outcome: Outcome, flags: list[str]
) -> None:
    result = verdict("vllm", 200, b.openai_reply(content), mode="constrained")
    assert (result.outcome, result.flags) == (outcome, flags)


def test_constrained_answer_given_as_tool_calls_broke_the_constraint() -> None:
    body = b.openai_reply(None, [b.openai_tool_call("pod_status", {"name": "a"})])
    result = verdict("vllm", 200, body, mode="constrained")
    assert result.outcome is Outcome.VALID_CALL and result.flags == ["constraint:violated"]


def test_constraint_check_on_ollama_and_with_truncation() -> None:
    ollama = verdict("ollama", 200, b.ollama_chat_reply(BARE_CALL), mode="constrained")
    cut = verdict("vllm", 200, b.TRUNCATED_CALL_REPLY, mode="constrained")
    assert ollama.flags == []
    assert cut.flags == ["truncated:max_tokens", "constraint:violated"]


@pytest.mark.parametrize("mode", ["native", "native+hint", "text-tools"])
def test_unconstrained_modes_never_get_the_constraint_flag(mode: str) -> None:
    assert verdict("vllm", 200, b.openai_reply("The pod is fine."), mode=mode).flags == []


def test_the_constraint_is_only_checked_on_a_2xx_message() -> None:
    assert verdict("vllm", 400, b.VLLM_AUTO_REFUSAL_WRAPPED, mode="constrained").flags == []
    assert verdict("vllm", 200, {"id": "x"}, mode="constrained").flags == []
    assert verdict("vllm", 200, "<html>ok</html>", mode="constrained").flags == []


def test_malformed_tools_never_make_the_constraint_check_raise() -> None:
    tools = [{"function": {"name": "pod_status"}}, 3, {"type": "function"}, {"function": "x"}]
    result = verdict("vllm", 200, b.openai_reply('{"name": "pod_status", "arguments": {}}'), "constrained", tools)
    assert result.flags == []


@pytest.mark.parametrize(
    "body",
    [
        "the request exceeds the available context size, try increasing it",  # a non-JSON 200 quoting a signature
        {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'}},
        {"error": "the input length exceeds the context length"},
    ],
)
def test_a_2xx_is_never_a_refusal_whatever_it_quotes(body: object) -> None:
    for stack in ("llamacpp", "vllm", "ollama"):
        spec = load_stack(stack)
        verdict = classify(
            refusals=spec.refusals,
            parser_failures=spec.parser_failures,
            mode="text-tools",
            tools=[],
            http_status=200,
            body=body,
        )
        assert verdict.outcome is Outcome.NON_RESPONSE and not verdict.retryable, (stack, verdict.detail)


def test_the_probe_tells_a_parser_that_failed_from_one_that_is_missing() -> None:
    from orchestrator.serving.probe import verdict_for

    spec = load_stack("llamacpp")
    failed = {
        "error": {
            "code": 500,
            "message": "The model produced output that does not match the expected Hermes 2 Pro format",
            "type": "server_error",
        }
    }
    text = {"choices": [{"message": {"role": "assistant", "content": '{"name": "f", "arguments": {}}'}}]}
    kwargs = {"refusals": spec.refusals, "parser_failures": spec.parser_failures, "mode": "native", "tools": []}
    assert verdict_for(classify(http_status=500, body=failed, **kwargs)) == "parser_rejected"
    assert verdict_for(classify(http_status=200, body=text, **kwargs)) == "text_only"
