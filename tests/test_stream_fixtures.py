"""The recorded stream fixtures (tests/data/streams/*.json) are well formed: the fields the stream classifier's
tests read, one of the six outcomes, a body in its api's framing whose terminator agrees with the expected
label, and the replay serves each body byte for byte. What each fixture replays is in its `source` and in
tests/replay/STREAMS.md."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.replay import streamshapes as s

OUTCOMES = {"valid_call", "hallucinated_call", "unparseable_text", "no_call_prose", "rejected_request", "non_response"}
NAMES = s.fixture_names()


def test_there_are_fixtures_for_every_stack() -> None:
    assert len(NAMES) >= 16
    assert {s.fixture(n)["stack"] for n in NAMES} == {"llamacpp", "vllm", "sglang", "ollama"}


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_well_formed(name: str) -> None:
    f = s.fixture(name)
    assert set(f) == {"name", "stack", "api", "source", "mode", "tools", "body", "expected"}
    assert f["name"] == name and f["source"].startswith("replays ")
    assert f["stack"] in {"llamacpp", "vllm", "sglang", "ollama"} and f["api"] in {"openai", "ollama"}
    assert f["mode"] in {"native", "native+hint", "text-tools"}
    assert all(t["type"] == "function" and t["function"]["name"] for t in f["tools"])
    expected = f["expected"]
    assert set(expected) == {"outcome", "detail"} and expected["outcome"] in OUTCOMES
    assert (expected["detail"] is None) == (expected["outcome"] == "valid_call")
    if f["api"] == "ollama":
        assert f["body"].endswith("\n")
        assert all(isinstance(json.loads(line), dict) for line in f["body"].splitlines())
    else:
        events = s.split_events(f["body"])
        assert b"".join(events) == f["body"].encode() and all(e.endswith(b"\n\n") for e in events)
        for event in events:
            for line in filter(None, event.decode().splitlines()):
                field, _, value = line.partition(": ")
                assert line == ":" or field in {"data", "event", "error"}, line
                if field == "data" and value != "[DONE]":
                    json.loads(value)
    # A stream without its terminator is labelled truncated (and the other way round), unless an error event
    # ended it first (llama.cpp b11312 writes no [DONE] after one).
    has_error = any(line.startswith('data: {"error"') or line.startswith('{"error"') for line in f["body"].splitlines())
    truncated = expected["detail"] == "transport:stream_truncated"
    assert s.terminated(f["body"], f["api"]) or truncated or has_error
    if truncated:
        assert not s.terminated(f["body"], f["api"])


@pytest.mark.server
@pytest.mark.parametrize("name", NAMES)
def test_replay_serves_the_fixture_body(name: str) -> None:
    shape = s.fixture_shape(name)
    path = "/api/chat" if shape.api == "ollama" else "/v1/chat/completions"
    with s.StreamReplay(shape) as url:
        response = httpx.post(url + path, json={"stream": True}, timeout=10)
    assert response.content == s.fixture(name)["body"].encode()
