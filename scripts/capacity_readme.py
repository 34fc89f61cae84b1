"""The README's "Capacity on paper" section, rendered from capacity.json, so every number in it comes from the
committed output (`scripts/capacity.py --readme` prints it; tests/test_capacity.py checks the README holds it)."""

from __future__ import annotations

import textwrap
from typing import Any

NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM", "sglang": "SGLang", "ollama": "Ollama"}
KEYS = ("seed_runs", "requests", "prompt_tokens", "completion_tokens", "gpu_h")
PREMISE_LARGEST_B = 14  # the premise: a dozen models up to 14B, 8 seeds, four or more modes


def num(value: float) -> str:
    """A count or token total as the README shows it (k / M), a rate to 3 significant digits."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def stack_sum(rows: list[dict[str, Any]], stack: str) -> dict[str, float]:
    return {key: sum(row[key] for row in rows if row["stack"] == stack) for key in KEYS}


def _fill(text: str, first: str = "", rest: str = "") -> str:
    """A paragraph wrapped as the README is (116 columns), `first` before its first line, `rest` before the others."""
    return textwrap.fill(
        text, 116, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    )


def _name(stack: str) -> str:
    return NAMES.get(stack, stack)


def _intro(r: dict[str, Any]) -> list[str]:
    m, w = r["matrix"], r["workload"]
    path = r["inputs"]["matrix"]["path"]
    measured = ", ".join(sorted({row["model"] for row in r["cpu_rates"]}))
    own = [s for s in ("llamacpp", "vllm", "sglang", "ollama") if s in w]
    pooled_for = " and ".join(_name(s) for s in NAMES if s not in w and any(g["stack"] == s for g in r["gpu_rates"]))
    per_seed = " / ".join(f"{w[s]['requests_per_seed']:.2f} {_name(s)}" for s in own)
    prompt = " / ".join(f"{w[s]['prompt_per_request']:.0f}" for s in [*own, "pooled"])
    growth = " / ".join(f"{w[s]['prompt_at_turn0']:.0f} + {w[s]['prompt_growth_per_turn']:.1f}" for s in own)
    growth += f" / {w['pooled']['prompt_at_turn0']:.0f} + {w['pooled']['prompt_growth_per_turn']:.1f}"
    ho, gs = r["harness_overhead_s"], r["gpu_start"]
    containers = ", ".join(f"{_name(s)} {v:.0f} s" for s, v in sorted(gs["container_s"].items()))
    cap = max(m["turn_caps"])
    formulas = [
        f"requests      = seed runs × requests per seed run (lower: measured, {per_seed}, both pooled "
        f"({w['pooled']['requests_per_seed']:.2f}) for {pooled_for}; upper: the turn cap, {cap})",
        f"prompt tokens = requests × measured mean (lower: {prompt}; upper: a + b × turn over {cap} turns: {growth})",
        "GPU seconds   = prompt / prefill tok/s + completion / decode tok/s + requests × harness s/request "
        f"({ho['lower']}–{ho['upper']})",
        "decode s/tok  = weight bytes / (efficiency × bandwidth) + step overhead (efficiency: the anchors' fit, at "
        f"most {r['efficiency_ceiling']}; overhead: the largest any anchor needs, so no anchor is predicted faster "
        "than published)",
        f"start         = container ({containers}) + the server's weights read from local disk at "
        f"{gs['disk_read_gbs']} GB/s",
    ]
    intro = (
        f"What `{path}` costs on GPUs before anyone runs it: {m['servers']} servers, {m['cells']} cells, "
        f"{num(m['seed_runs'])} seed runs ({m['seed_runs'] // m['cells']} seeds a cell), turn cap {cap}, concurrency "
        f"{m['concurrency']}. The workload comes from the committed CPU runs (requests of {measured} in the modes "
        f"the matrix has); the speed from published single-stream figures, scaled to one {r['reference_gpu']} by the "
        "rules in `scripts/capacity_rates.yaml`, which cites each figure's source, GPU and batch. Output: "
        "`results/examples/capacity-full/capacity.md` (and `.json`, with the inputs' hashes and commit). This "
        "section is printed by `scripts/capacity.py --readme`; `tests/test_capacity.py` fails when the README "
        "differs from it."
    )
    return [_fill(intro), "", *(_fill(line, " " * 4, " " * 20) for line in formulas)]


def _table(r: dict[str, Any]) -> list[str]:
    lower, upper = r["bounds"]["lower"], r["bounds"]["upper"]
    lines = [
        "| stack | servers | seed runs | requests | prompt tokens | completion tokens | GPU-h (lower–upper) "
        "| starts h |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for stack in dict.fromkeys(row["stack"] for row in lower["rows"]):
        low, high = stack_sum(lower["rows"], stack), stack_sum(upper["rows"], stack)
        servers = [s for s in r["per_server"] if s["stack"] == stack and s["bound"] == "lower"]
        lines.append(
            f"| {_name(stack)} | {len(servers)} | {num(low['seed_runs'])} | {num(low['requests'])}–"
            f"{num(high['requests'])} | {num(low['prompt_tokens'])}–{num(high['prompt_tokens'])} | "
            f"{num(low['completion_tokens'])}–{num(high['completion_tokens'])} | {low['gpu_h']:.3f}–"
            f"{high['gpu_h']:.3f} | {sum(s['start_h'] for s in servers):.2f} |"
        )
    lt, ut = lower["totals"], upper["totals"]
    lines.append(
        f"| **total** | {r['matrix']['servers']} | {num(lt['seed_runs'])} | {num(lt['requests'])}–"
        f"{num(ut['requests'])} | {num(lt['prompt_tokens'])}–{num(ut['prompt_tokens'])} | "
        f"{num(lt['completion_tokens'])}–{num(ut['completion_tokens'])} | {lt['gpu_h']:.2f}–{ut['gpu_h']:.2f} | "
        f"{lt['start_h']:.2f} |"
    )
    return lines


def _hosts(r: dict[str, Any]) -> list[str]:
    lower, upper = r["bounds"]["lower"], r["bounds"]["upper"]
    largest = max(r["matrix"]["models"], key=lambda m: m["params_b"])
    decode = ", ".join(
        f"{_name(g['stack'])} {g['decode_tps']:.0f}" for g in r["gpu_rates"] if g["model"] == largest["name"]
    )

    def at(bound: dict[str, Any]) -> str:
        h, half = bound["hosts"], bound["hosts_at_half_rate"]
        return (
            f"{bound['totals']['gpu_h'] + bound['totals']['start_h']:.2f} GPU-h with starts, {h['hosts_1gpu']} "
            f"one-GPU host(s), longest stream {h['longest_stream_h']:.2f} h; at half the derived GPU rates "
            f"{half['hosts_1gpu']} host(s), longest stream {half['longest_stream_h']:.2f} h"
        )

    return [
        _fill(
            f"Decode on the H100 for the largest model, {largest['name']} (tok/s): {decode}. In a "
            f"{lower['hosts']['window_h']:.0f}-hour night: lower bound (measured workload) {at(lower)}; upper bound "
            f"(workload at the turn cap) {at(upper)}. One 8-GPU host covers either bound "
            f"({max(lower['hosts']['hosts_8gpu'], upper['hosts']['hosts_8gpu'])} needed). The upper bound is on the "
            "workload (every seed run to the cap, every request answered), not on the GPU rates: both bounds use the "
            'same rates, and the half-rate figures are the sensitivity to those (capacity.md, "Decode rule", compares '
            "the rule with figures held out of its fit)."
        )
    ]


def _premise(r: dict[str, Any]) -> list[str]:
    m, upper = r["matrix"], r["bounds"]["upper"]
    models = ", ".join(f"{x['name']} ({x['params_b']}B)" for x in sorted(m["models"], key=lambda x: x["params_b"]))
    largest = max(x["params_b"] for x in m["models"])
    missing = f" It has none of the {PREMISE_LARGEST_B}B models the issue names." if largest < PREMISE_LARGEST_B else ""
    per_request = upper["totals"]["gpu_h"] * 3600 / upper["totals"]["requests"]
    fits = upper["hosts"]["longest_stream_h"] <= upper["hosts"]["window_h"] and upper["hosts"]["hosts_1gpu"] == 1
    night = "stays inside one night on one GPU" if fits else "needs more than one GPU-night"
    text = (
        'Why hours and not the issue\'s "days of GPU time on one host": that premise counted about a dozen models '
        f"up to {PREMISE_LARGEST_B}B, 8 seeds and four or more modes. `{r['inputs']['matrix']['path']}` as committed "
        f"has {len(m['models'])} models, {models}; {len(m['modes'])} modes ({', '.join(m['modes'])}); "
        f"{m['seed_runs'] // m['cells']} seeds a cell.{missing} Served one request at a time, a request of these "
        f"models costs {per_request:.2f} GPU-s on average at the upper bound, and the measured seed runs stop after "
        f"{r['workload']['pooled']['requests_per_seed']:.1f} requests on average; even every seed run at the cap of "
        f"{max(m['turn_caps'])} {night}. The premise's larger matrix is not computed here: add its models to "
        "`scripts/capacity_rates.yaml` and a matrix, and run the script on it."
    )
    return [_fill(text)]


def _caveats(r: dict[str, Any]) -> list[str]:
    pooled = r["workload"]["pooled"]
    alt = r.get("at_concurrency_8")
    gains = ""
    if alt:
        published = ", ".join(f"{_name(s)} {g:.1f}×" for s, g in sorted(alt["gains"].items()) if g > 1)
        gains = (
            f" At concurrency 8 the published batching gains ({published}) bring it to "
            f"{alt['lower']['totals']['gpu_h']:.2f}–{alt['upper']['totals']['gpu_h']:.2f} GPU-h before starts."
        )
    measured = " and ".join(sorted({row["model"] for row in r["cpu_rates"]}))
    return [
        _fill(
            f"What this leaves out: only {measured} were measured (larger models may need fewer or more turns); "
            f"{pooled['capped_share']:.0%} of the measured seed runs reached their run's turn cap, so the lower bound "
            "is low; prefill is charged for the whole prompt each turn (no prefix cache); image pulls and weight "
            "downloads are left out (once per host, before the window); Ollama has no published A100/H100 figure here "
            f"and uses llama.cpp's rule; SGLang's start is vLLM's assumption.{gains} Regenerate:"
        )
    ]


def readme_section(r: dict[str, Any]) -> str:
    """The whole "## Capacity on paper" section, heading to the end of its last code block."""
    lines = [
        "## Capacity on paper",
        "",
        *_intro(r),
        "",
        *_table(r),
        "",
        *_hosts(r),
        "",
        *_premise(r),
        "",
        *_caveats(r),
        "",
        "```bash",
        ".venv/bin/python scripts/capacity.py            # rewrites results/examples/capacity-full/",
        ".venv/bin/python scripts/capacity.py --check    # exits 1 when the committed output is stale",
        ".venv/bin/python scripts/capacity.py --readme   # prints this section from the committed capacity.json",
        "```",
    ]
    return "\n".join(lines) + "\n"
