"""Capacity on paper: what a matrix (default `matrices/full.yaml`) costs on GPUs, from the committed runs.

The workload (requests per seed run, prompt and completion tokens per request, per stack) is measured in the
runs under `results/examples/*/` on the models the matrix shares with them (capacity_workload.py); GPU time comes
from published single-stream figures in `scripts/capacity_rates.yaml`, scaled to the reference GPU by the rules
written there (capacity_model.py). This module renders the result (capacity.md, the README section) and is the CLI.

Usage: python scripts/capacity.py [--matrix M] [--runs DIR] [--rates Y] [--out DIR] [--check | --readme]
(writes OUT/capacity.json and OUT/capacity.md; --check compares them with what it computes and exits 1 on a
difference; --readme prints the README's "Capacity on paper" section, rendered from OUT/capacity.json)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from capacity_model import DEFAULT_MATRIX, DEFAULT_OUT, DEFAULT_RATES, DEFAULT_RUNS, compute
from capacity_readme import num as _n
from capacity_readme import readme_section
from capacity_readme import stack_sum as _stack_sum
from capacity_workload import POOLED

BOUND_NAMES = {"lower": "lower (measured workload)", "upper": "upper (workload at the turn cap)"}


def _table(result: dict[str, Any]) -> list[str]:
    lower, upper = result["bounds"]["lower"], result["bounds"]["upper"]
    rates = {(r["stack"], r["model"]): r for r in result["gpu_rates"]}
    lines = [
        "| stack | model | seed runs | requests | prompt tokens | completion tokens | prefill / decode tok/s | GPU-h |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for low, high in zip(lower["rows"], upper["rows"], strict=True):
        rate = rates[(low["stack"], low["model"])]
        lines.append(
            f"| {low['stack']} | {low['model']} | {_n(low['seed_runs'])} | {_n(low['requests'])}–{_n(high['requests'])}"
            f" | {_n(low['prompt_tokens'])}–{_n(high['prompt_tokens'])}"
            f" | {_n(low['completion_tokens'])}–{_n(high['completion_tokens'])}"
            f" | {_n(rate['prefill_tps'])} / {_n(rate['decode_tps'])} | {low['gpu_h']:.3f}–{high['gpu_h']:.3f} |"
        )
    lines += ["", "Per stack (tool configurations and models summed):", "", *lines[:2]]
    for stack in dict.fromkeys(row["stack"] for row in lower["rows"]):
        low, high = (_stack_sum(bound["rows"], stack) for bound in (lower, upper))
        lines.append(
            f"| {stack} | | {_n(low['seed_runs'])} | {_n(low['requests'])}–{_n(high['requests'])}"
            f" | {_n(low['prompt_tokens'])}–{_n(high['prompt_tokens'])}"
            f" | {_n(low['completion_tokens'])}–{_n(high['completion_tokens'])}"
            f" | | {low['gpu_h']:.3f}–{high['gpu_h']:.3f} |"
        )
    lt, ut = lower["totals"], upper["totals"]
    lines.append(
        f"| **total** | | {_n(lt['seed_runs'])} | {_n(lt['requests'])}–{_n(ut['requests'])}"
        f" | {_n(lt['prompt_tokens'])}–{_n(ut['prompt_tokens'])} | {_n(lt['completion_tokens'])}–"
        f"{_n(ut['completion_tokens'])} | | {lt['gpu_h']:.2f}–{ut['gpu_h']:.2f} (+{lt['start_h']:.2f} starts) |"
    )
    return lines


def _workload_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        "| measured on | requests | seed runs (cap >= 6) | requests / seed run | reached cap | prompt / request"
        " | completion / request | prompt = a + b x turn |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, w in sorted(result["workload"].items(), key=lambda item: (item[0] == POOLED, item[0])):
        lines.append(
            f"| {name} | {w['requests']} | {w['seed_runs']} | {w['requests_per_seed']:.2f} | {w['capped_share']:.0%}"
            f" | {w['prompt_per_request']:.0f} | {w['completion_per_request']:.1f}"
            f" | {w['prompt_at_turn0']:.0f} + {w['prompt_growth_per_turn']:.1f} x turn |"
        )
    return lines


def _cpu_lines(result: dict[str, Any]) -> list[str]:
    lines = ["| stack | model | requests | prefill tok/s | decode tok/s | completion tok/s of wall time |"]
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in result["cpu_rates"]:
        prefill = "—" if r["prefill_tps"] is None else f"{r['prefill_tps']:.3g}"
        decode = "—" if r["decode_tps"] is None else f"{r['decode_tps']:.3g}"
        lines.append(
            f"| {r['stack']} | {r['model']} | {r['requests']} | {prefill} | {decode} | {r['completion_tps_wall']:.3g} |"
        )
    starts = ", ".join(
        f"{stack} median {s['median_s']:.1f} s (max {s['max_s']:.1f} s, {s['launches']} launches)"
        for stack, s in result["start_times"].items()
    )
    return [*lines, "", f"Server start (launch to ready) on that CPU: {starts}."]


def _decode_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        "| stack | anchors' own fit | efficiency used | step overhead | figure | GPU | published tok/s | rule tok/s |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for rule in result["decode_rules"]:
        fit = "—" if rule["efficiency_fit"] is None else f"{rule['efficiency_fit']:.3f}"
        for f in rule["figures"]:
            lines.append(
                f"| {rule['stack']} | {fit} | {rule['efficiency']:.3f} | {rule['step_overhead_s'] * 1e3:.3f} ms"
                f" | {f['role']}: {f['model']} | {f['gpu']} | {f['published_tps']:.1f} | {f['rule_tps']:.1f} |"
            )
    start = result["gpu_start"]
    containers = ", ".join(f"{stack} {s:.0f} s" for stack, s in sorted(start["container_s"].items()))
    return [
        *lines,
        "",
        f"GPU server start: container ({containers}) + the server's weights read from local disk at "
        f"{start['disk_read_gbs']} GB/s (assumptions, capacity_rates.yaml `gpu_start`); no image pull or download.",
    ]


def _hosts_line(name: str, bound: dict[str, Any]) -> str:
    h, half = bound["hosts"], bound["hosts_at_half_rate"]
    return (
        f"- {name}: {bound['totals']['gpu_h'] + bound['totals']['start_h']:.2f} GPU-h with starts; "
        f"{h['hosts_1gpu']} one-GPU host(s) ({h['hosts_8gpu']} eight-GPU host), longest stream "
        f"{h['longest_stream_h']:.2f} h of {h['window_h']:.0f} h; at half the derived GPU rates: "
        f"{half['hosts_1gpu']} one-GPU host(s), longest stream {half['longest_stream_h']:.2f} h"
    )


def render(result: dict[str, Any]) -> str:
    """capacity.md: the numbers of capacity.json as tables."""
    m, inp = result["matrix"], result["inputs"]
    lines = [
        f"# Capacity on paper: `{inp['matrix']['path']}`",
        "",
        f"Generated by `python scripts/capacity.py` from {inp['matrix']['path']} (sha256 "
        f"{inp['matrix']['sha256'][:12]}), {inp['rates']['path']} (sha256 {inp['rates']['sha256'][:12]}) and the "
        f"committed runs {', '.join(r['run'] for r in inp['runs'])} (last commit touching these inputs: "
        f"{inp['commit']}).",
        "",
        f"Matrix `{m['name']}`: {m['servers']} servers, {m['cells']} cells, {_n(m['seed_runs'])} seed runs, turn cap "
        f"{', '.join(map(str, m['turn_caps']))}, concurrency {m['concurrency']}. Reference GPU: "
        f"{result['reference_gpu']}, one server at a time per GPU.",
        "",
        "## Workload per request, measured (models the matrix shares with the runs)",
        "",
        *_workload_lines(result),
        "",
        "## CPU rates measured (2 cores; least squares of latency on prompt and completion tokens)",
        "",
        *_cpu_lines(result),
        "",
        f"## Decode rule (efficiency at most {result['efficiency_ceiling']}; overhead: the largest an anchor needs)",
        "",
        *_decode_lines(result),
        "",
        "## GPU-hours per stack and model (lower – upper: workload measured – at the turn cap)",
        "",
        "Lower: measured requests per seed run and tokens per request. Upper: every seed run to the turn cap,",
        "prompts growing by the fitted tokens per turn, every request answered.",
        "GPU s = prompt tokens / prefill tok/s + completion tokens / decode tok/s + requests x harness s/request",
        "(rates and the harness's per-request time, lower/upper: capacity_rates.yaml).",
        "",
        *_table(result),
        "",
        "## Hosts for an overnight window",
        "",
        _hosts_line(BOUND_NAMES["lower"], result["bounds"]["lower"]),
        _hosts_line(BOUND_NAMES["upper"], result["bounds"]["upper"]),
    ]
    alt = result.get("at_concurrency_8")
    if alt:
        lines.append(
            f"- at concurrency 8 (published gains: vLLM, SGLang only): {alt['lower']['totals']['gpu_h']:.2f}–"
            f"{alt['upper']['totals']['gpu_h']:.2f} GPU-h before starts"
        )
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (out / "capacity.md").write_text(render(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--rates", type=Path, default=DEFAULT_RATES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="compare with the files in --out; write nothing")
    parser.add_argument("--readme", action="store_true", help="print the README section from --out's capacity.json")
    args = parser.parse_args(argv)
    if args.readme:
        print(readme_section(json.loads((args.out / "capacity.json").read_text())), end="")
        return 0
    result = compute(args.matrix, args.runs, args.rates)
    if args.check:
        same = (args.out / "capacity.json").read_text() == json.dumps(result, indent=1, sort_keys=True) + "\n"
        same = same and (args.out / "capacity.md").read_text() == render(result)
        print("capacity output up to date" if same else f"capacity output in {args.out} differs: regenerate it")
        return 0 if same else 1
    write(result, args.out)
    print((args.out / "capacity.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
