#!/usr/bin/env python3
"""Capture real streams from a running server into tests/data/streams/captured/ (the unit table's real rows).

For each scenario the same request (same sampling seed, temperature 0) is sent twice: once streamed, once not.
Each fixture keeps the raw stream text exactly as it came over the wire, the non-streamed body beside it, and
the labels both got at capture time (`expected`, reviewed by hand before committing): the unit table then
holds the labeller to them, and to the stream and the plain body agreeing where the stack made them agree.

    python scripts/capture_streams.py --stack llamacpp --url http://127.0.0.1:18080 --model qwen \
        --label "llama.cpp b11312 (jinja), Qwen2.5-Coder-0.5B Q4_K_M"
Loopback only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx

from orchestrator.core.labelling import StreamInput, label_turn
from orchestrator.core.types import ToolsMode
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.turn.prompts import build_request, initial_messages
from orchestrator.serving.chatapi import Decoding, build_payload
from orchestrator.serving.registry import load_stack
from orchestrator.serving.streaming import parse_stream_text

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "streams" / "captured"
SCENARIOS: list[dict[str, Any]] = [
    {"name": "native-auto", "mode": "native", "seed": "ops-00", "extra": {}},
    {"name": "native-required", "mode": "native", "seed": "ops-00", "extra": {"tool_choice": "required"}},
    {"name": "native-hint", "mode": "native+hint", "seed": "ops-01", "extra": {}},
    {"name": "text-tools", "mode": "text-tools", "seed": "ops-02", "extra": {}},
    {"name": "text-tools-cut-at-max-tokens", "mode": "text-tools", "seed": "ops-03", "max_tokens": 8, "extra": {}},
    {"name": "native-named", "mode": "native", "seed": "ops-04",
     "extra": {"tool_choice": {"type": "function", "function": {"name": "pod_status"}}}},
]


def capture(stack: str, url: str, model: str, label: str) -> list[Path]:
    spec = load_stack(stack)
    suite = load_suite("ops")
    written = []
    OUT.mkdir(parents=True, exist_ok=True)
    with httpx.Client(timeout=300) as client:
        for scenario in SCENARIOS:
            mode = ToolsMode(scenario["mode"])
            seed = suite.seed(scenario["seed"])
            request = build_request(mode, initial_messages(mode, suite.system_prompt, seed.request, suite.tools),
                                    suite.tools)
            decoding = Decoding(temperature=0.0, max_tokens=scenario.get("max_tokens", 160), seed=11)
            plain = build_payload(spec, model, request.messages, decoding, tools=request.tools)
            plain.update(scenario["extra"] if request.tools else {})
            streamed = build_payload(spec, model, request.messages, decoding, tools=request.tools, stream=True)
            streamed.update(scenario["extra"] if request.tools else {})
            reply = client.post(url + spec.chat_path, json=plain)
            with client.stream("POST", url + spec.chat_path, json=streamed) as response:
                raw = response.read().decode()
                status = response.status_code
            api = "ollama" if spec.api == "ollama" else "openai"
            signatures = spec.signatures()
            live = label_turn(**signatures, mode=mode, tools=suite.tools, http_status=status,
                              stream=StreamInput(parse_stream_text(raw, api), api))
            plain_verdict = label_turn(**signatures, mode=mode, tools=suite.tools, http_status=reply.status_code,
                                       body=reply.json())
            fixture = {
                "name": f"{stack}-{scenario['name']}",
                "stack": stack,
                "api": api,
                "source": f"captured from {label}, temperature 0, sampling seed 11 (scripts/capture_streams.py)",
                "mode": mode.value,
                "tools": suite.tools,
                "request_extra": scenario["extra"],
                "http_status": status,
                "body": raw,
                "plain_body": reply.json(),
                "expected": {"outcome": live.outcome.value, "detail": live.detail},
                "expected_plain": {"outcome": plain_verdict.outcome.value, "detail": plain_verdict.detail},
            }
            path = OUT / f"{fixture['name']}.json"
            path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
            written.append(path)
            print(f"{path.name}: stream {live.outcome.value} {live.detail} | plain {plain_verdict.outcome.value} "
                  f"{plain_verdict.detail}")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--url", required=True, help="a loopback base URL, e.g. http://127.0.0.1:18080")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--label", required=True, help="what served it (stack, version, config, model)")
    args = parser.parse_args()
    if not args.url.startswith(("http://127.0.0.1", "http://localhost")):
        raise SystemExit("loopback only")
    capture(args.stack, args.url.rstrip("/"), args.model, args.label)


if __name__ == "__main__":
    main()
