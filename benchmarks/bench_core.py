"""Benchmarks of the pure core, each against a baseline measured in the same run.

- bootstrap: the vectorised seed-level bootstrap vs a plain Python resampling loop (the obvious baseline);
- classify: turns/s of the classifier over a mix of real reply bodies vs only decoding the JSON bodies
  (the floor any classifier pays), so the ratio is the classifier's cost over a JSON parse.
Run: .venv/bin/python benchmarks/bench_core.py
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.core.classify import classify
from orchestrator.core.stats import BootstrapSettings, bootstrap_mean_interval
from orchestrator.serving.registry import load_stack
from tests import bodies as b


def best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def python_bootstrap(values: list[float], resamples: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def main() -> None:
    values = np.random.default_rng(0).random(8)
    settings = BootstrapSettings(resamples=10_000, rng_seed=1)
    fast = best_of(lambda: bootstrap_mean_interval(values, settings))
    slow = best_of(lambda: python_bootstrap(values.tolist(), 10_000, 1), repeats=3)
    print(
        f"bootstrap 8 seeds x 10k resamples: numpy {fast * 1e3:.2f} ms, python loop {slow * 1e3:.2f} ms, "
        f"speed-up x{slow / fast:.1f}"
    )

    refusals = load_stack("vllm").refusals
    fenced = '```json\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n```'
    corpus = [
        (400, b.VLLM_AUTO_REFUSAL_WRAPPED),
        (200, b.openai_reply(fenced)),
        (200, b.openai_reply("", [b.openai_tool_call("pod_status", {"name": "a"})])),
        (200, b.openai_reply("The pod is running fine, nothing to call.")),
    ] * 500
    raw = [(status, json.dumps(body)) for status, body in corpus]
    tools = b.TOOLS

    def run_classify() -> None:
        for status, text in raw:
            classify(refusals=refusals, mode="native+hint", tools=tools, http_status=status, body=json.loads(text))

    def run_decode() -> None:
        for _status, text in raw:
            json.loads(text)

    classify_s = best_of(run_classify, 3)
    decode_s = best_of(run_decode, 3)
    print(
        f"classify: {len(raw) / classify_s:,.0f} turns/s; JSON decode only: {len(raw) / decode_s:,.0f} bodies/s; "
        f"classifier cost x{classify_s / decode_s:.1f} a JSON parse"
    )


if __name__ == "__main__":
    main()
