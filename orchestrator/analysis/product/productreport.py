"""The channels of a finished run, from its files alone: the cases' expectations and core set as the run
recorded them (manifest `cases`), the side-by-side model/product table, the gates, and an ablation's table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.analysis.product.channelverdicts import (
    CaseId,
    CaseVerdict,
    case_verdicts,
    channel_table,
    render_markdown,
)
from orchestrator.analysis.product.gate import GateResult, evaluate_gates, format_gate_results
from orchestrator.analysis.product.guardeffects import AblationRow, ablation_rows, render_ablation_markdown
from orchestrator.core.scoring import CHANNELS, Expectation, applicable_dimensions
from orchestrator.core.stats import BootstrapSettings
from orchestrator.runner.config.matrix import expand
from orchestrator.runner.run.runs import recorded_matrix
from orchestrator.runner.store.rundir import read_run
from orchestrator.runner.store.runpaths import owned_dir, write_bytes_atomic
from orchestrator.runner.store.runstore import RunStore, counted_turns, write_json_atomic

# The report files the page takes sections from (analysis/report/htmlreport.py), named once.
CHANNELS_FILE, GATE_FILE, ABLATION_FILE = "channels.json", "gate.json", "ablation.json"


class NoChannelsError(ValueError):
    """A run whose matrix has no channel axis: there is no model/product table to write."""


def recorded_cases(manifest: dict[str, Any]) -> tuple[dict[CaseId, Expectation], set[CaseId]]:
    """What each case declared right when the run started, and its core cases."""
    expectations: dict[CaseId, Expectation] = {}
    core: set[CaseId] = set()
    for suite, facts in (manifest.get("cases") or {}).items():
        for seed, expect in (facts.get("expect") or {}).items():
            expectations[(suite, seed)] = Expectation.model_validate(expect)
        core |= {(suite, seed) for seed in facts.get("core") or []}
    return expectations, core


def counted_records(store: RunStore) -> list[dict[str, Any]]:
    """The run's counted records, read by the one rule (runner/store/rundir.py read_run: a copied or lost record,
    a missing cell file are errors, or damage listed under --allow-damaged)."""
    return counted_turns(read_run(store).turns)


def run_verdicts(store: RunStore) -> tuple[list[CaseVerdict], set[CaseId]]:
    """Every case's verdicts; a case the run planned but never finished in a group is there too, unscored (a
    gate never passes on a case that did not run)."""
    manifest = store.manifest()
    expectations, core = recorded_cases(manifest)
    cells = planned_cells(store)
    # Records carry the name the stack served (an Ollama tag); tables and gates use the matrix entry's label.
    labels = {cell["cell_id"]: cell["model"] for cell in cells}
    records = [{**r, "model": labels.get(r["cell_id"], r["model"])} for r in counted_records(store)]
    verdicts = case_verdicts(records, expectations, core)
    planned = {
        (cell["stack_label"], cell["model"], cell["tools_mode"], cell["channel"], cell["without"], suite, seed)
        for cell in cells
        for suite, seed in cell["cases"]
        if (suite, seed) in expectations
    }
    found = {(v.stack_config, v.model, v.tools_mode, v.channel, v.without, v.suite, v.seed) for v in verdicts}
    for key in sorted(planned - found, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        verdicts += _unrun(key, expectations[(key[5], key[6])], (key[5], key[6]) in core)
    return verdicts, core


def planned_cells(store: RunStore) -> list[dict[str, Any]]:
    """The channel cells the run's matrix plans (a cell that never started has no cell file), with the matrix
    entry's model label; from the cell files when the recorded matrix no longer validates against the run's own
    stacks and suites (its snapshot: today's checkout is never read)."""
    try:
        matrix = recorded_matrix(store.dir, store.manifest())
    except (ValidationError, ValueError):
        matrix = None
    if matrix is not None:
        return [
            {
                "cell_id": c.cell_id,
                "stack_label": c.stack.label,
                "model": c.model.name,
                "tools_mode": c.mode.value,
                "channel": c.channel,
                "without": c.without,
                "cases": c.seeds,
            }
            for plan in expand(matrix)
            for c in plan.cells
            if c.channel in CHANNELS
        ]
    return [
        {
            "cell_id": c["cell_id"],
            "stack_label": c.get("stack_label"),
            "model": c["model"],
            "tools_mode": c["tools_mode"],
            "channel": c.get("channel"),
            "without": c.get("without"),
            "cases": [(suite, seed) for suite in c.get("suites") or [] for seed in c.get("seeds") or []],
        }
        for c in store.read_cells()
        if c.get("channel") in CHANNELS
    ]


def _unrun(key: tuple[Any, ...], expect: Expectation, core: bool) -> list[CaseVerdict]:
    stack_config, model, mode, channel, without, suite, seed = key
    return [
        CaseVerdict(
            stack_config=stack_config,
            model=model,
            tools_mode=mode,
            channel=channel,
            without=without,
            suite=suite,
            seed=seed,
            dimension=dimension,
            passed=False,
            tie=False,
            n_pass=0,
            n_votes=0,
            n_samples=0,
            unscored=True,
            core=core,
        )
        for dimension in applicable_dimensions(expect, channel)
    ]


def gate_results(store: RunStore) -> list[GateResult]:
    gates = store.manifest().get("matrix", {}).get("gate") or []
    verdicts, core = run_verdicts(store)
    return evaluate_gates(gates, verdicts, core) if gates else []


def first_answer_agreement(records: list[dict[str, Any]]) -> tuple[int, int]:
    """(same, pairs): case runs whose model-channel answer is byte-identical to the product channel's first
    answer. Both send the same first request with the same sampling seed, so a deterministic stack agrees on
    every pair; a disagreement is the stack's nondeterminism, and it bounds what any channel difference means."""
    first: dict[tuple[Any, ...], dict[str, str | None]] = {}
    for record in records:
        if record.get("channel") not in CHANNELS or record.get("without") or record["turn"] != 0:
            continue
        key = (
            record.get("stack_config"),
            record["model"],
            record["tools_mode"],
            record.get("suite"),
            record["seed"],
            record.get("sample", 0),
        )
        first.setdefault(key, {})[record["channel"]] = record.get("raw_content")  # the last attempt wins
    pairs = [answers for answers in first.values() if len(answers) == 2]
    return sum(a["model"] == a["product"] for a in pairs), len(pairs)


def write_channel_report(store: RunStore) -> tuple[str, list[GateResult], list[Path]]:
    """report/channels.{md,json} and report/gate.json; returns the markdown and the gate results. A run without
    product channels is NoChannelsError, and nothing is written."""
    if not store.manifest().get("matrix", {}).get("channels"):
        raise NoChannelsError(f"{store.dir}: this run has no product channels (its matrix has no `channels` axis)")
    verdicts, core = run_verdicts(store)
    rows = channel_table(verdicts, core)
    same, pairs = first_answer_agreement(counted_records(store))
    markdown = render_markdown(rows)
    if pairs:
        markdown += (
            f"\n\nFirst answers identical in the two channels (same request, same sampling seed): {same} of {pairs}."
        )
    results = gate_results(store)
    out = owned_dir(store.dir, store.dir / "report")
    written = [out / "channels.md", out / CHANNELS_FILE, out / "case_verdicts.json"]
    text = markdown + ("\n\n" + format_gate_results(results) + "\n" if results else "\n")
    write_bytes_atomic(written[0], text.encode(), run_dir=store.dir)
    write_json_atomic(written[1], [row.model_dump() for row in rows], run_dir=store.dir)
    write_json_atomic(written[2], [v.model_dump() for v in verdicts], run_dir=store.dir)
    if results:
        write_json_atomic(out / GATE_FILE, [r.model_dump() for r in results], run_dir=store.dir)
        written.append(out / GATE_FILE)
    return markdown, results, written


def ablation_report(parent: RunStore, ablation: RunStore) -> tuple[list[AblationRow], str]:
    """Per guard: the paired change it is responsible for, from the parent (guards on) and the ablation."""
    manifest = parent.manifest()
    expectations, _core = recorded_cases(manifest)
    settings = BootstrapSettings.model_validate(manifest.get("matrix", {}).get("bootstrap") or {})
    rows = ablation_rows(
        counted_records(parent), counted_records(ablation), expectations, settings
    )
    return rows, render_ablation_markdown(rows)


def write_ablation_report(parent: RunStore, ablation: RunStore) -> tuple[list[AblationRow], str, Path]:
    """The ablation's report files (ablation.md and ABLATION_FILE under its report/), from both runs' records."""
    rows, markdown = ablation_report(parent, ablation)
    out = owned_dir(ablation.dir, ablation.dir / "report")
    write_bytes_atomic(out / "ablation.md", (markdown + "\n").encode(), run_dir=ablation.dir)
    rows_json = json.dumps([row.as_json() for row in rows], indent=2) + "\n"
    write_bytes_atomic(out / ABLATION_FILE, rows_json.encode(), run_dir=ablation.dir)
    return rows, markdown, out
