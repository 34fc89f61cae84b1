"""The agent loop's integrity rules, each against a scripted loopback server (tests/fakes/scripted.py)
replaying a real reply body: a retry only when no model output arrived, a 2xx answer final however empty,
a stack's parser failure as the model's turn, Retry-After honoured within a bound, a dead server ending
the seed as `server_died`, context overflow as its own end, and a cancelled seed writing nothing more."""

from __future__ import annotations

import threading

import httpx
import pytest

from orchestrator.core.types import ToolsMode, TurnRecord
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.turn.agent import SeedCancelled, SeedContext, run_seed
from orchestrator.serving.chatapi import Decoding, post_chat
from orchestrator.serving.registry import load_stack
from tests import bodies as b
from tests.fakes.scripted import Reply, chat_reply, scripted_server
from tests.seedcontexts import seed_context

# Real bodies, each with its source, live in tests/bodies.py (one place).
LLAMA_PARSE_FAILURE_QUOTING = b.LLAMACPP_PARSE_FAILURE  # older builds quote the generated text
LLAMA_PARSE_FAILURE_B11312 = b.LLAMACPP_PARSE_FAILURE_B11312  # the pinned build quotes none of it
LLAMA_CONTEXT_OVERFLOW = b.LLAMACPP_CONTEXT_OVERFLOW
OPENAI_RATE_LIMITED = b.OPENAI_RATE_LIMITED
VALID_TEXT_CALL = '{"name": "pod_status", "arguments": {"name": "api-1"}}'


def context(base_url: str, stack: str = "llamacpp", **overrides: object) -> SeedContext:
    values = dict(
        run_id="r",
        cell_id="c",
        stack_label=f"{stack}-x",
        spec=load_stack(stack),
        parser=None,
        stack_version="v",
        base_url=base_url,
        model="m",
        mode=ToolsMode.TEXT_TOOLS,
        suite=load_suite("ops"),
        seed_id="ops-00",
        decoding=Decoding(temperature=1.0, max_tokens=32, seed=1),
        turn_cap=3,
        loop_repeats=3,
        request_timeout_s=10,
        max_attempts=3,
        backoff_s=0.0,
        headers={},
    )
    values.update(overrides)
    return seed_context(**values)


def run(replies: list[Reply], **overrides: object) -> tuple[list[TurnRecord], int]:
    records: list[TurnRecord] = []
    with scripted_server(replies) as (url, script):
        run_seed(context(url, **overrides), records.append)
    return records, len(script.requests)


@pytest.mark.server
def test_an_empty_200_answer_is_final_and_never_resampled() -> None:
    records, requests = run([Reply(200, chat_reply("")), Reply(200, chat_reply(VALID_TEXT_CALL))])
    assert requests == 1
    assert [(r.outcome.value, r.detail, r.attempt, r.end) for r in records] == [
        ("non_response", "empty:no_content", 0, "empty")
    ]


@pytest.mark.server
@pytest.mark.parametrize(
    ("body", "recoverable"), [(LLAMA_PARSE_FAILURE_QUOTING, True), (LLAMA_PARSE_FAILURE_B11312, False)]
)
def test_a_server_parser_failure_is_the_models_turn_and_not_retried(body: dict, recoverable: bool) -> None:
    records, requests = run([Reply(500, body), Reply(200, chat_reply(VALID_TEXT_CALL))])
    assert requests == 1
    (only,) = records
    assert (only.outcome.value, only.detail, only.end) == (
        "unparseable_text",
        "parse:server_rejected_output",
        "unparseable",
    )
    assert only.text_call_recoverable is recoverable


@pytest.mark.server
def test_a_plain_500_without_model_output_is_retried_and_every_attempt_recorded() -> None:
    plain = {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}}
    records, requests = run([Reply(500, plain)], max_attempts=3)
    assert requests == 3
    assert [(r.attempt, r.outcome.value, r.end) for r in records] == [
        (0, "non_response", None),
        (1, "non_response", None),
        (2, "non_response", "retries_exhausted"),
    ]


@pytest.mark.server
def test_429_is_a_non_response_retried_after_retry_after() -> None:
    replies = [Reply(429, OPENAI_RATE_LIMITED, {"Retry-After": "1"}), Reply(200, chat_reply(VALID_TEXT_CALL))]
    records: list[TurnRecord] = []
    with scripted_server(replies) as (url, script):
        run_seed(context(url, stack="openai", turn_cap=1), records.append)
    first, second = records
    assert (first.outcome.value, first.detail, first.http_status) == ("non_response", "server:rate_limited", 429)
    assert second.attempt == 1 and second.outcome.value == "valid_call"
    waited = script.requests[1][0] - script.requests[0][0]
    assert waited >= 0.9, f"Retry-After: 1 not honoured (waited {waited:.2f}s)"


@pytest.mark.server
def test_retry_after_is_bounded() -> None:
    replies = [Reply(429, OPENAI_RATE_LIMITED, {"Retry-After": "3600"}), Reply(200, chat_reply(VALID_TEXT_CALL))]
    records: list[TurnRecord] = []
    with scripted_server(replies) as (url, script):
        run_seed(context(url, stack="openai", turn_cap=1, max_retry_after_s=0.2), records.append)
    assert [r.attempt for r in records] == [0, 1]
    assert script.requests[1][0] - script.requests[0][0] < 1.0  # 0.2 s bound, not the server's hour


@pytest.mark.server
def test_a_dead_server_ends_the_seed_as_server_died_not_finished() -> None:
    plain = {"error": {"code": 503, "message": "Service Unavailable", "type": "unavailable_error"}}
    records, requests = run([Reply(503, plain)], max_attempts=5, server_alive=lambda: False)
    assert requests == 1
    assert [(r.outcome.value, r.end) for r in records] == [("non_response", "server_died")]


@pytest.mark.server
def test_context_overflow_is_a_refusal_with_its_own_end() -> None:
    records, _ = run([Reply(400, LLAMA_CONTEXT_OVERFLOW)])
    assert [(r.outcome.value, r.detail, r.end) for r in records] == [
        ("rejected_request", "refused:context_overflow", "context_overflow")
    ]


@pytest.mark.server
def test_finish_reason_and_truncation_flag_reach_the_turn_record() -> None:
    cut = chat_reply('{"name": "list_pods", "argu', finish_reason="length")
    records, _ = run([Reply(200, cut)])
    (only,) = records
    assert only.finish_reason == "length" and "truncated:max_tokens" in only.flags


@pytest.mark.server
def test_the_cache_reset_result_goes_on_the_first_record_and_a_failed_reset_is_flagged() -> None:
    replies = [Reply(200, chat_reply(VALID_TEXT_CALL)), Reply(200, chat_reply("done."))]
    reset = {"method": "POST /slots/0?action=erase", "ok": False, "cleared": False}
    records, _ = run(replies, reset_cache=lambda _client: reset)
    assert records[0].prompt_cache == reset
    assert "cache:not_cleared" in records[0].flags
    assert records[1].prompt_cache is None


@pytest.mark.server
def test_a_cancelled_seed_writes_nothing_more() -> None:
    cancelled = threading.Event()
    records: list[TurnRecord] = []

    def record(turn: TurnRecord) -> None:
        records.append(turn)
        cancelled.set()  # Ctrl-C arrives after the first record

    with scripted_server([Reply(200, chat_reply(VALID_TEXT_CALL))]) as (url, script), pytest.raises(SeedCancelled):
        run_seed(context(url, cancelled=cancelled, turn_cap=5), record)
    assert len(records) == 1 and len(script.requests) == 1


@pytest.mark.parametrize("error", [httpx.WriteError, httpx.WriteTimeout, httpx.ProxyError, httpx.UnsupportedProtocol])
def test_every_transport_error_class_is_data_never_raised(error: type[httpx.HTTPError]) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error("planted", request=request)

    with httpx.Client(transport=httpx.MockTransport(fail)) as client:
        exchange = post_chat(client, "http://127.0.0.1:9/v1/chat/completions", {"messages": []}, 5)
    assert exchange.http_status is None and exchange.transport_error is not None
    assert error.__name__ in exchange.transport_error.message


@pytest.mark.server
def test_ctrl_c_during_a_retry_wait_writes_nothing_more() -> None:
    plain = {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}}
    cancelled = threading.Event()
    records: list[TurnRecord] = []

    def record(turn: TurnRecord) -> None:
        records.append(turn)
        threading.Timer(0.2, cancelled.set).start()  # Ctrl-C arrives while the agent waits to retry

    with scripted_server([Reply(500, plain)]) as (url, script), pytest.raises(SeedCancelled):
        run_seed(context(url, cancelled=cancelled, max_attempts=5, backoff_s=30.0), record)
    assert [(r.attempt, r.end) for r in records] == [(0, None)]
    assert len(script.requests) == 1
