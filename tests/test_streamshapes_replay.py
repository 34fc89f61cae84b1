"""The scripted stream replay (tests/replay/streamshapes/) over real HTTP with httpx: what arrives is the
script, byte for byte; "cut" ends the body without its terminator (httpx raises on a chunked body cut short);
"hang" keeps the socket open until the client's read timeout; a JSON error comes before any stream.
Only the replay is checked here; what the shapes mean is tests/data/streams and the stream classifier's."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest

from tests.replay import streamshapes as s

TIMEOUT = httpx.Timeout(10.0, read=5.0)


def stream_bytes(url: str, path: str = "/v1/chat/completions", timeout: httpx.Timeout = TIMEOUT,
                 on_bytes: Callable[[bytes], None] | None = None):
    """(response, bytes received, the exception that ended the iteration or None); `on_bytes` sees what has
    arrived so far after each chunk."""
    got = bytearray()
    request = {"stream": True, "messages": []}
    with httpx.Client(timeout=timeout) as client, client.stream("POST", url + path, json=request) as response:
        try:
            for chunk in response.iter_bytes():
                got += chunk
                if on_bytes is not None:
                    on_bytes(bytes(got))
        except httpx.TransportError as exc:
            return response, bytes(got), exc
    return response, bytes(got), None


@pytest.mark.server
@pytest.mark.parametrize("name", sorted(s.SHAPES))
def test_every_shape_arrives_byte_for_byte(name: str) -> None:
    shape = s.SHAPES[name]()
    timeout = httpx.Timeout(10.0, read=0.5) if shape.script.end == "hang" else TIMEOUT
    path = "/api/chat" if shape.api == "ollama" else "/v1/chat/completions"
    with s.StreamReplay(shape) as url:
        response, got, error = stream_bytes(url, path, timeout)
    assert got == shape.script.body
    assert response.status_code == 200 and response.headers["transfer-encoding"] == "chunked"
    assert response.headers["content-type"] == (s.NDJSON if shape.api == "ollama" else s.SSE)
    expected = {"finish": None, "cut": httpx.RemoteProtocolError, "hang": httpx.ReadTimeout}[shape.script.end]
    assert (type(error) if error else None) is expected


@pytest.mark.server
def test_finish_ends_cleanly_and_requests_are_recorded() -> None:
    replay = s.StreamReplay(s.ollama_text())
    url = replay.start()
    try:
        response = httpx.post(url + "/api/chat", json={"model": "llama3.2", "stream": True}, timeout=TIMEOUT)
        assert response.text == s.ollama_text().body
        replay.serve(s.vllm_text())
        assert httpx.post(url + "/v1/chat/completions", json={"n": 2}, timeout=TIMEOUT).text == s.vllm_text().body
        assert httpx.post(url + "/v1/completions", json={}, timeout=TIMEOUT).status_code == 404
    finally:
        replay.stop()
    assert [(r.path, r.body) for r in replay.requests] == [
        ("/api/chat", {"model": "llama3.2", "stream": True}),
        ("/v1/chat/completions", {"n": 2}),
        ("/v1/completions", {}),
    ]
    assert url.startswith("http://127.0.0.1:")


@pytest.mark.server
def test_cut_with_chunked_framing_raises_after_the_scripted_bytes() -> None:
    shape = s.vllm_cut_in_arguments()
    with s.StreamReplay(shape) as url:
        _response, got, error = stream_bytes(url)
    assert isinstance(error, httpx.RemoteProtocolError)
    assert got == shape.script.body and b"[DONE]" not in got


@pytest.mark.server
def test_cut_with_close_framing_just_ends() -> None:
    # A body delimited by the close (no length, no chunking): the cut looks like an end; only the missing
    # terminator says otherwise.
    shape = s.vllm_cut_in_arguments()
    shape = replace(shape, script=replace(shape.script, framing="close"))
    with s.StreamReplay(shape) as url:
        response, got, error = stream_bytes(url)
    assert error is None and got == shape.script.body
    assert "transfer-encoding" not in response.headers
    assert not s.terminated(got.decode(), "openai")


@pytest.mark.server
def test_reset_is_a_transport_error() -> None:
    with s.StreamReplay(s.vllm_text().ending("reset")) as url:
        _response, got, error = stream_bytes(url)
    assert isinstance(error, httpx.ReadError | httpx.RemoteProtocolError)
    assert s.vllm_text().script.body.startswith(got)


@pytest.mark.server
def test_hang_keeps_the_socket_open_until_the_read_timeout() -> None:
    shape = s.stall_after(s.llamacpp_tool_call(), 2)
    with s.StreamReplay(shape) as url:
        started = time.monotonic()
        _response, got, error = stream_bytes(url, timeout=httpx.Timeout(10.0, read=0.5))
        waited = time.monotonic() - started
    assert isinstance(error, httpx.ReadTimeout)  # not an end of body: the peer kept the connection
    assert got == shape.script.body and waited < 8


@pytest.mark.server
def test_stop_ends_a_stalled_stream() -> None:
    replay = s.StreamReplay(s.vllm_stall())
    url = replay.start()
    before_the_stall = s.vllm_stall().script.body
    stalled = threading.Event()  # the client holds every byte sent before the stall: only then is stop() tested

    def arrived(got: bytes) -> None:
        if got == before_the_stall:
            stalled.set()

    outcome: list[object] = []
    client = threading.Thread(
        target=lambda: outcome.append(stream_bytes(url, timeout=httpx.Timeout(30.0), on_bytes=arrived))
    )
    client.start()
    assert stalled.wait(20), "the stream's bytes before the stall never arrived"
    replay.stop(timeout_s=5)
    client.join(10)
    assert not client.is_alive()
    [(_response, got, error)] = outcome
    assert got == s.vllm_stall().script.body
    assert isinstance(error, httpx.RemoteProtocolError)  # closed without the chunked terminator


@pytest.mark.server
def test_json_error_before_any_stream() -> None:
    body = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}
    with s.StreamReplay(s.json_error(500, body)) as url:
        response = httpx.post(url + "/v1/chat/completions", json={"stream": True}, timeout=TIMEOUT)
    assert response.status_code == 500 and response.json() == body
    assert response.headers["content-type"] == s.JSON
    assert response.headers["content-length"] == str(len(json.dumps(body)))


@pytest.mark.server
def test_delays_and_transformations_keep_the_bytes() -> None:
    shape = s.with_crlf(s.with_comments(s.sglang_text(), ": ping\n\n"))
    delayed = replace(shape.script, pieces=tuple(replace(p, delay_s=0.01) for p in shape.script.pieces))
    with s.StreamReplay(delayed) as url:
        _response, got, error = stream_bytes(url)
    assert error is None and got == shape.script.body
    assert got.count(b": ping\r\n\r\n") == len(s.sglang_text().script.pieces) - 1
    assert b"\n" not in got.replace(b"\r\n", b"")
    assert [e.replace(b"\r\n", b"\n") for e in s.split_events(got) if not e.startswith(b":")] == s.split_events(
        s.sglang_text().body
    )


def test_script_rejects_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError):
        s.script([b"x"], end="stall")
    with pytest.raises(ValueError):
        s.script([b"x"], framing="length", end="cut")
