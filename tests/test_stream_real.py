"""Streaming and request semantics against the real stacks: llama.cpp b11312 and vLLM CPU 0.32.0 (hermes).

The same request (temperature 0, a fixed sampling seed) is sent streamed and not: the streamed answer, read by
the harness's SSE reader and assembled, must be the non-streamed answer, and both must get the same label. A
small matrix run on real llama.cpp records streams in side files that `--reclassify` re-labels identically,
and its report pairs the two paths and scores tool_choice compliance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from orchestrator.core.labelling import StreamInput, label_turn
from orchestrator.core.streams import assemble
from orchestrator.core.types import ToolsMode
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.turn.prompts import build_request, initial_messages
from orchestrator.serving.build import server_config
from orchestrator.serving.chatapi import Decoding, build_payload, post_chat, post_chat_stream
from orchestrator.serving.launchers import running_server
from orchestrator.serving.registry import load_stack
from orchestrator.serving.streaming import StreamTimeouts

pytestmark = pytest.mark.integration
QWEN = "qwen2.5-coder-0.5b-instruct"
REPO = Path(__file__).resolve().parent.parent
TIMEOUTS = StreamTimeouts(first_byte_s=120, gap_s=30, total_s=180)


def both_ways(base_url: str, stack: str, served: str, mode: ToolsMode, extra: dict[str, Any]) -> dict[str, Any]:
    """One ops request sent plain and streamed; both labelled."""
    spec, suite = load_stack(stack), load_suite("ops")
    seed = suite.seed("ops-00")
    request = build_request(mode, initial_messages(mode, suite.system_prompt, seed.request, suite.tools), suite.tools)
    decoding = Decoding(temperature=0.0, max_tokens=64, seed=5)
    payloads = [
        {**build_payload(spec, served, request.messages, decoding, tools=request.tools, stream=s), **extra}
        for s in (False, True)
    ]
    url = base_url + spec.chat_path
    with httpx.Client() as client:
        plain = post_chat(client, url, payloads[0], 180)
        streamed = post_chat_stream(client, url, payloads[1], "openai", TIMEOUTS)
    assert streamed.stream is not None and streamed.stream.cut is None
    common = {**spec.signatures(), "mode": mode, "tools": suite.tools}
    return {
        "plain": plain,
        "streamed": streamed,
        "plain_verdict": label_turn(**common, http_status=plain.http_status, body=plain.body),
        "stream_verdict": label_turn(**common, http_status=200, stream=StreamInput(streamed.stream.events, "openai")),
        "assembled": assemble(streamed.stream.events, "openai").body,
    }


def message(body: dict[str, Any]) -> dict[str, Any]:
    return body["choices"][0]["message"]


def test_llamacpp_streamed_answers_equal_plain_ones(llama_server_binary: str) -> None:
    config = server_config(spec=load_stack("llamacpp"), stack="llamacpp", tool_config="jinja", launcher="process",
                           model=QWEN, binary=llama_server_binary, ready_timeout_s=180, progress=lambda _m: None)
    with running_server(config, run_id="test-stream") as handle:
        served = config.model.name
        for mode in (ToolsMode.NATIVE, ToolsMode.TEXT_TOOLS):
            got = both_ways(handle.base_url, "llamacpp", served, mode, {})
            assert message(got["assembled"])["content"] == message(got["plain"].body)["content"]
            assert got["stream_verdict"].outcome == got["plain_verdict"].outcome
            assert got["stream_verdict"].detail == got["plain_verdict"].detail
            capture = got["streamed"].stream
            assert 0 < capture.ttfb_s <= capture.duration_s and capture.events[-1].data == "[DONE]"
            assert got["assembled"]["usage"]["completion_tokens"] == got["plain"].body["usage"]["completion_tokens"]
        # tool_choice required: b11312 answers with the call written in the content, not as tool_calls.
        required = both_ways(handle.base_url, "llamacpp", served, ToolsMode.NATIVE, {"tool_choice": "required"})
        assert message(required["assembled"]).get("tool_calls") is None
        assert message(required["assembled"])["content"] == message(required["plain"].body)["content"]


def test_vllm_hermes_streams_tool_call_deltas_that_assemble_to_the_plain_call(vllm_python: str) -> None:
    config = server_config(spec=load_stack("vllm"), stack="vllm", tool_config="hermes", launcher="process",
                           model=QWEN, python=vllm_python, ready_timeout_s=400, progress=lambda _m: None)
    with running_server(config, run_id="test-stream") as handle:
        served = config.model.name
        got = both_ways(handle.base_url, "vllm", served, ToolsMode.NATIVE, {"tool_choice": "required"})
        deltas = [e for e in got["streamed"].stream.events if "tool_calls" in e.data]
        assert len(deltas) > 1, "the call arrives in pieces"
        streamed_calls = message(got["assembled"])["tool_calls"]
        plain_calls = message(got["plain"].body)["tool_calls"]
        assert [c["function"] for c in streamed_calls] == [c["function"] for c in plain_calls]
        assert got["stream_verdict"].outcome == got["plain_verdict"].outcome
        assert got["stream_verdict"].stream_facts["call_indexes"] == [0]
        text = both_ways(handle.base_url, "vllm", served, ToolsMode.TEXT_TOOLS, {})
        assert message(text["assembled"])["content"] == message(text["plain"].body)["content"]
        # the streamed usage chunk omits the *_details keys the plain body carries as null: compare the counts
        counts = ("prompt_tokens", "completion_tokens", "total_tokens")
        assert [text["assembled"]["usage"][k] for k in counts] == [text["plain"].body["usage"][k] for k in counts]


def test_a_streamed_matrix_on_real_llamacpp_is_recorded_paired_and_reclassified(tmp_path: Path) -> None:
    matrix = {
        "name": "stream-smoke",
        "stacks": [{"stack": "llamacpp", "tool_config": "jinja", "launcher": "process", "ctx": 2048}],
        "models": [{"name": QWEN, "sources": {"llamacpp": {"asset": QWEN}}}],
        "modes": ["native"],
        "stream": [False, True],
        "tool_choice": ["auto", "required"],
        "tasks": [{"suite": "ops", "seeds": ["ops-00", "ops-01"]}],
        "decoding": {"temperature": 1.0, "max_tokens": 48, "seed": 7},
        "turn_cap": 2,
        "timeouts": {"request_s": 120, "ready_s": 300, "first_byte_s": 60, "stream_gap_s": 20},
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(matrix))
    results = tmp_path / "results"
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "orchestrator", "matrix", str(path), "--results", str(results)],
                          capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Not a terminal: plain progress lines, one per finished seed and per finished cell.
    assert done.stdout.count(" seed ops-0") == 8 and done.stdout.count(" cell ") >= 4
    run = next(results.iterdir())
    turns = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]
    streamed = [t for t in turns if t["stream"]]
    assert streamed and all(t["stream_ref"] and t["raw_body"] is None for t in streamed)
    for turn in streamed:
        file, line = turn["stream_ref"].rsplit(":", 1)
        stored = json.loads((run / file).read_text().splitlines()[int(line) - 1])
        assert stored["key"]["seed"] == turn["seed"] and stored["events"][-1][3] == "[DONE]"
        assert turn["stream_facts"]["ttft_s"] is not None
    required = [t for t in turns if t["tool_choice"] == "required"]
    # judged, or (llama.cpp's required runs to max_tokens here) left unjudged because the answer was cut
    assert required and all(
        t["constraint_honoured"] is not None
        or ("constraint:unjudged_truncated" in t["flags"] and t["finish_reason"] == "length")
        for t in required
    )
    assert all(t["constraint_honoured"] is None for t in turns if t["tool_choice"] is None)
    long_live = (run / "report" / "cells_long.csv").read_text()
    pairs = (run / "report" / "stream_pairs.csv").read_text().splitlines()
    constraints = (run / "report" / "constraints.csv").read_text().splitlines()
    assert len(pairs) == 1 + 2 and len(constraints) == 1 + 2
    again = subprocess.run([sys.executable, "-m", "orchestrator", "report", str(run), "--reclassify"],
                           capture_output=True, text=True, timeout=300, cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert (run / "report" / "cells_long.csv").read_text() == long_live
