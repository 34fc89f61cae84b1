"""Streams that go wrong on the wire, over real HTTP (tests/replay/streamshapes/ on loopback): a stream that
stalls with its socket open, one cut in the middle of the arguments, one whose first byte never comes. Each
ends as one recorded outcome within its recorded limit; nothing hangs, nothing raises."""

from __future__ import annotations

import time

import httpx
import pytest

from orchestrator.core.types import Outcome, SeedEnd, ToolsMode, TurnRecord
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.turn.agent import SeedContext, run_seed
from orchestrator.serving.chatapi import Decoding, post_chat_stream
from orchestrator.serving.registry import load_stack
from orchestrator.serving.streaming import StreamTimeouts
from tests.replay import streamshapes as shapes
from tests.seedcontexts import seed_context

pytestmark = pytest.mark.server

GAP_S = 1.0


def context(base_url: str, **overrides: object) -> SeedContext:
    values = dict(
        run_id="r",
        cell_id="c",
        stack_label="vllm-hermes",
        spec=load_stack("vllm"),
        parser="hermes",
        stack_version="0.32.0",
        base_url=base_url,
        model="m",
        mode=ToolsMode.NATIVE,
        suite=load_suite("ops"),
        seed_id="ops-00",
        decoding=Decoding(temperature=0, max_tokens=32),
        turn_cap=3,
        loop_repeats=3,
        request_timeout_s=30,
        max_attempts=3,
        backoff_s=0.0,
        headers={},
        stream=True,
        stream_timeouts=StreamTimeouts(first_byte_s=3 * GAP_S, gap_s=GAP_S, total_s=30),
    )
    values.update(overrides)
    streams: list[dict] = []
    values.setdefault("record_stream", lambda record: streams.append(record) or f"streams/c.jsonl:{len(streams)}")
    return seed_context(**values)


def test_a_stalled_stream_ends_within_the_gap_limit_as_stalled_and_is_not_retried() -> None:
    records: list[TurnRecord] = []
    with shapes.StreamReplay(shapes.vllm_stall(after_events=3)) as url:
        started = time.monotonic()
        run_seed(context(url), records.append)
        took = time.monotonic() - started
    assert took < GAP_S + 5, f"took {took:.1f}s"
    assert [(r.outcome, r.detail, r.attempt) for r in records] == [
        (Outcome.NON_RESPONSE, "transport:stream_stalled", 0)
    ]  # it had model output: final, no second attempt
    facts = records[0].stream_facts
    assert facts["cut"] == "stalled" and facts["max_gap_s"] >= GAP_S and facts["output_seen"]
    assert records[0].end is SeedEnd.EMPTY


def test_a_stream_cut_mid_arguments_is_truncated_and_final() -> None:
    records: list[TurnRecord] = []
    with shapes.StreamReplay(shapes.vllm_cut_in_arguments()) as url:
        run_seed(context(url), records.append)
    assert [(r.outcome, r.detail, r.attempt) for r in records] == [
        (Outcome.NON_RESPONSE, "transport:stream_truncated", 0)
    ]
    assert records[0].raw_tool_calls and records[0].calls == []  # kept as evidence, never executed


def test_no_first_byte_is_a_retried_timeout_bounded_by_its_limit() -> None:
    records: list[TurnRecord] = []
    silent = shapes.script([], end="hang")  # headers, then nothing
    with shapes.StreamReplay(silent) as url:
        started = time.monotonic()
        run_seed(context(url, max_attempts=2), records.append)
        took = time.monotonic() - started
    assert [(r.outcome, r.detail, r.attempt) for r in records] == [
        (Outcome.NON_RESPONSE, "transport:timeout", 0),
        (Outcome.NON_RESPONSE, "transport:timeout", 1),
    ]  # no model output arrived: retried, then the seed ends
    assert records[-1].end is SeedEnd.RETRIES_EXHAUSTED
    assert 2 * 3 * GAP_S <= took < 2 * 3 * GAP_S + 8


def test_an_error_before_the_stream_is_labelled_as_a_plain_reply() -> None:
    refusal = {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                         "to be set", "type": "BadRequestError", "code": 400}}
    records: list[TurnRecord] = []
    with shapes.StreamReplay(shapes.json_error(400, refusal)) as url:
        run_seed(context(url), records.append)
    assert [(r.outcome, r.detail, r.stream_ref) for r in records] == [
        (Outcome.REJECTED_REQUEST, "refused:no_tool_parser", None)
    ]


def test_a_streamed_call_runs_the_loop_and_every_attempt_keeps_its_events() -> None:
    records: list[TurnRecord] = []
    stored: list[dict] = []
    shape = shapes.with_comments(shapes.vllm_tool_call())
    replay = shapes.StreamReplay(shape)
    with replay as url:
        ctx = context(url, record_stream=lambda r: stored.append(r) or f"streams/c.jsonl:{len(stored)}")
        run_seed(ctx, records.append)
    assert records and records[0].stream and records[0].stream_ref == "streams/c.jsonl:1"
    assert len(stored) == len(records)
    assert stored[0]["key"]["turn"] == 0 and stored[0]["events"][-1][3] == "[DONE]"
    assert any(kind == "comment" for _, kind, _, _ in stored[0]["events"])
    body = replay.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_the_reader_hands_back_control_while_the_socket_stays_open() -> None:
    with shapes.StreamReplay(shapes.vllm_stall(after_events=2)) as url, httpx.Client() as client:
        started = time.monotonic()
        exchange = post_chat_stream(client, url + "/v1/chat/completions", {"stream": True}, "openai",
                                    StreamTimeouts(first_byte_s=5, gap_s=0.5, total_s=30))
        assert time.monotonic() - started < 5
    assert exchange.stream is not None and exchange.stream.cut == "stalled"
    assert exchange.http_status == 200 and exchange.transport_error is None


def test_a_whole_stream_whose_socket_then_hangs_is_whole_not_stalled() -> None:
    records: list[TurnRecord] = []
    with shapes.StreamReplay(shapes.vllm_text().ending("hang")) as url:  # [DONE], then the socket stays open
        started = time.monotonic()
        run_seed(context(url), records.append)
        took = time.monotonic() - started
    assert took < GAP_S + 3, f"took {took:.1f}s"
    assert [(r.outcome, r.detail) for r in records] == [(Outcome.NO_CALL_PROSE, "prose:no_call")]
    assert records[0].stream_facts["terminated"] and records[0].stream_facts["cut"] is None


def test_a_stream_that_keeps_trickling_is_cut_at_the_request_deadline() -> None:
    records: list[TurnRecord] = []
    events = [e.decode() for e in shapes.split_events(shapes.vllm_text().body)]
    trickle = [shapes.Piece(events[0].encode())] + [
        shapes.Piece(piece.encode(), delay_s=0.4) for piece in [events[1]] * 20  # each gap 0.4 s < the 1 s limit
    ]
    timeouts = StreamTimeouts(first_byte_s=3 * GAP_S, gap_s=GAP_S, total_s=2.5)
    with shapes.StreamReplay(shapes.script(trickle, end="hang")) as url:
        started = time.monotonic()
        run_seed(context(url, stream_timeouts=timeouts), records.append)
        took = time.monotonic() - started
    assert took < 2.5 + 2, f"took {took:.1f}s"
    assert [(r.outcome, r.detail, r.attempt) for r in records] == [
        (Outcome.NON_RESPONSE, "transport:stream_deadline", 0)
    ]
    facts = records[0].stream_facts
    assert facts["cut"] == "deadline" and facts["max_gap_s"] < GAP_S and facts["duration_s"] >= 2.5
