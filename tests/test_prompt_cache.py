"""A seed's records never depend on what the server ran before it: `reset_prompt_cache` empties the prompt
cache at a seed's start as the stack file says (unit tests on a mock transport; integration tests on a real
llama-server b11312 and a real vLLM CPU)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from orchestrator.serving.build import server_config
from orchestrator.serving.cache import reset_prompt_cache
from orchestrator.serving.chatapi import Decoding, build_payload
from orchestrator.serving.launchers import running_server
from orchestrator.serving.registry import load_stack

QWEN = "qwen2.5-coder-0.5b-instruct"


def mock_client(answer) -> tuple[httpx.Client, list[tuple[str, str, Any]]]:
    seen: list[tuple[str, str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append(
            (request.method, request.url.path + (f"?{request.url.query.decode()}" if request.url.query else ""), body)
        )
        return answer(request)

    return httpx.Client(transport=httpx.MockTransport(handler)), seen


def test_llamacpp_erases_every_slot_it_lists() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=[{"id": 0}, {"id": 1}])
        return httpx.Response(200, json={"id_slot": int(request.url.path.rsplit("/", 1)[1]), "n_erased": 12})

    client, seen = mock_client(answer)
    record = reset_prompt_cache(client, "http://s/", load_stack("llamacpp"))
    assert [(m, p) for m, p, _ in seen] == [
        ("GET", "/slots"),
        ("POST", "/slots/0?action=erase"),
        ("POST", "/slots/1?action=erase"),
    ]
    assert (record["policy"], record["ok"], record["cleared"], record["http_status"]) == (
        "clear_per_seed",
        True,
        True,
        200,
    )
    assert record["method"] == "POST /slots/{slot}?action=erase"
    assert record["steps"][1]["body"] == {"id_slot": 0, "n_erased": 12}


def test_a_refused_reset_is_recorded_not_raised() -> None:
    message = {"error": {"code": 501, "message": "This server does not support slots action."}}
    client, _ = mock_client(
        lambda r: httpx.Response(200, json=[{"id": 0}]) if r.method == "GET" else httpx.Response(501, json=message)
    )
    record = reset_prompt_cache(client, "http://s", load_stack("llamacpp"))
    assert (record["ok"], record["cleared"], record["http_status"]) == (False, False, 501)
    assert "501" in record["error"]


def test_vllm_reset_must_report_success() -> None:
    client, seen = mock_client(lambda r: httpx.Response(200, json={"success": False}))
    record = reset_prompt_cache(client, "http://s", load_stack("vllm"))
    assert seen == [("POST", "/reset_prefix_cache", None)]
    assert (record["ok"], record["http_status"]) == (False, 200)
    client, _ = mock_client(lambda r: httpx.Response(200, json={"success": True}))
    assert reset_prompt_cache(client, "http://s", load_stack("vllm"))["cleared"] is True


def test_transport_failure_is_data() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client, _ = mock_client(refuse)
    record = reset_prompt_cache(client, "http://s", load_stack("sglang"))
    assert (record["ok"], record["http_status"]) == (False, None)
    assert "ConnectError" in record["error"]


def test_ollama_unloads_the_model_and_waits_until_it_is_gone() -> None:
    listed = iter([True, True, False])

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/ps":
            models = [{"name": "qwen2.5-coder:0.5b"}] if next(listed) else []
            return httpx.Response(200, json={"models": models})
        return httpx.Response(200, json={"done": True, "done_reason": "unload"})

    client, seen = mock_client(answer)
    record = reset_prompt_cache(client, "http://s", load_stack("ollama"), served_name="qwen2.5-coder:0.5b")
    assert seen[0] == (
        "POST",
        "/api/chat",
        {"model": "qwen2.5-coder:0.5b", "messages": [], "keep_alive": 0, "stream": False},
    )
    assert [p for _, p, _ in seen[1:]] == ["/api/ps"] * 3
    assert record["ok"] and record["cleared"]
    unnamed = reset_prompt_cache(client, "http://s", load_stack("ollama"))
    assert not unnamed["ok"] and "served_name" in unnamed["error"]


def test_a_hosted_api_is_unmanaged_and_gets_no_request() -> None:
    client, seen = mock_client(lambda r: httpx.Response(500))
    record = reset_prompt_cache(client, "http://s", load_stack("openai"))
    assert seen == []
    assert (record["policy"], record["method"], record["ok"], record["cleared"]) == ("unmanaged", "none", True, False)


# --- real servers ----------------------------------------------------------------------------------------------

SYSTEM = (
    "You are an operations assistant. Tools: pod_status(name), restart_pod(name), get_logs(pod, lines). "
    'To call a tool answer with JSON only: {"name": <tool>, "arguments": {...}}.'
)
DECODING = Decoding(temperature=1.0, top_p=1.0, max_tokens=48, seed=1234)


def converse(client: httpx.Client, base: str, question: str, turns: int, system: str = SYSTEM) -> list[dict]:
    """An agent-like conversation: each turn carries the model's earlier answers. Returns the raw bodies."""
    spec = load_stack("llamacpp")
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    bodies = []
    for _ in range(turns):
        reply = client.post(base + spec.chat_path, json=build_payload(spec, QWEN, messages, DECODING), timeout=300)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        bodies.append(body)
        content = body["choices"][0]["message"].get("content") or ""
        messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "Tool result: ok."}]
    return bodies


def contents(bodies: list[dict]) -> list[str]:
    return [body["choices"][0]["message"].get("content") or "" for body in bodies]


@pytest.mark.integration
def test_llamacpp_reset_makes_a_seed_independent_of_earlier_traffic(llama_server_binary: str) -> None:
    config = server_config(
        spec=load_stack("llamacpp"), stack="llamacpp",
        tool_config="jinja",
        launcher="process",
        model=QWEN,
        binary=llama_server_binary,
        ctx=2048,
        ready_timeout_s=180,
        progress=lambda _m: None,
    )
    spec = load_stack("llamacpp")
    question = "Pod api-1 keeps crashing. Find out why."
    with running_server(config, run_id="test-prompt-cache") as handle, httpx.Client() as client:
        argv = handle.describe()["argv"]
        base = handle.base_url
        first = reset_prompt_cache(client, base, spec)
        fresh = converse(client, base, question, turns=2)
        converse(client, base, "Restart pod web-2.", turns=2)
        # Without a reset the next seed starts on the previous seed's cached prefix (the shared system prompt).
        warm = converse(client, base, question, turns=1)
        assert warm[0]["timings"]["cache_n"] > 0
        record = reset_prompt_cache(client, base, spec)
        again = converse(client, base, question, turns=2)
    assert "--cache-ram" in argv and "--slot-save-path" in argv
    assert first["ok"] and first["cleared"] and first["http_status"] == 200
    assert (record["ok"], record["cleared"], record["http_status"]) == (True, True, 200)
    erase = record["steps"][-1]
    assert erase["path"] == "/slots/0?action=erase" and erase["body"]["n_erased"] > 0
    assert again[0]["timings"]["cache_n"] == 0  # nothing of the earlier seeds was reused
    assert contents(again) == contents(fresh)  # byte for byte, as on the fresh server
    assert fresh[0]["timings"]["cache_n"] == 0 and again[1]["timings"]["cache_n"] > 0  # the cache works within a seed


@pytest.mark.integration
def test_vllm_reset_prefix_cache_on_the_real_server(vllm_python: str) -> None:
    config = server_config(
        spec=load_stack("vllm"), stack="vllm",
        tool_config="default",
        launcher="process",
        model=QWEN,
        python=vllm_python,
        ctx=2048,
        ready_timeout_s=400,
        progress=lambda _m: None,
    )
    spec = load_stack("vllm")
    with running_server(config, run_id="test-prompt-cache") as handle, httpx.Client() as client:
        described = handle.describe()
        payload = build_payload(spec, QWEN, [{"role": "user", "content": "Say hi."}], DECODING)
        assert client.post(handle.base_url + spec.chat_path, json=payload, timeout=300).status_code == 200
        record = reset_prompt_cache(client, handle.base_url, spec)
    assert described["argv"][described["argv"].index("--generation-config") + 1] == "vllm"
    assert described["env"]["VLLM_SERVER_DEV_MODE"] == "1" and described["env"]["HF_HUB_OFFLINE"] == "1"
    assert (record["ok"], record["cleared"], record["http_status"]) == (True, True, 200)
    assert record["steps"] == [
        {"method": "POST", "path": "/reset_prefix_cache", "http_status": 200, "body": {"success": True}}
    ]
