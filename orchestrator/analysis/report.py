"""Tables from stored results only (no Docker, no HTTP): a long table (one row per cell: statistics and
every config column), a wide table (model x stack config x mode), a paper-compatible CSV, and
`--reclassify` to recompute outcomes from the stored raw answers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.core.classify import AUTO_FORMAT, classify, is_context_overflow
from orchestrator.core.modes import mode_of
from orchestrator.core.replyfacts import (
    CACHE_NOT_CLEARED_FLAG,
    CACHE_SHARED_FLAG,
    CONSTRAINT_VIOLATED_FLAG,
    PROMPT_COUNT_UNAVAILABLE_FLAG,
    PROMPT_TRUNCATED_FLAG,
    TRUNCATED_FLAG,
)
from orchestrator.core.stats import BootstrapSettings, cell_stats
from orchestrator.core.types import UNRAN_SEED_ENDS, CellStatus, SeedEnd, ToolsMode, TransportError
from orchestrator.runner.provenance import run_stacks
from orchestrator.runner.store import RunStore, counted_turns, turn_key
from orchestrator.serving.registry import load_stack
from orchestrator.serving.stackspec import StackSpec

CONFIG_COLUMNS = [
    "stack_label",
    "stack",
    "tool_config",
    "tool_flags",
    "parser",
    "launcher",
    "host",
    "image",
    "image_id",
    "image_repo_digests",
    "binary",
    "binary_version",
    "argv",
    "stack_version",
    "chat_template_sha256",
    "model",
    "model_digest",
    "quantization",
    "tools_mode",
    "hint",
    "call_format",
    "template_sha256",
    "tools_sha256",
    "decoding",
    "turn_cap",
    "status",
]
# Flags the runner sets (the rest are read from the answer, so --reclassify recomputes them): the cache family
# and the prompt-count facts (truncated:prompt shares its family with truncated:max_tokens, read from the answer).
RUNNER_FLAG_FAMILIES = frozenset({CACHE_NOT_CLEARED_FLAG.split(":")[0]})
RUNNER_FLAGS = frozenset({PROMPT_TRUNCATED_FLAG, PROMPT_COUNT_UNAVAILABLE_FLAG})
HARNESS_ERRORS = frozenset({"template_error"})  # turns the harness could not send: no answer to recompute
PAPER_MODES = {"native": "native", "native+hint": "native_hint", "text-tools": "text_tools"}
PAPER_FIELDS = ("seed", "lo", "hi", "pooled", "n", "rej", "n_seeds")


def reclassify(
    turns: list[dict[str, Any]], cells: dict[str, dict[str, Any]], stacks: Callable[[str], StackSpec] = load_stack
) -> list[dict[str, Any]]:
    """Recompute outcome/detail/calls/flags and the text call facts (call_format, text_calls,
    text_call_recoverable) of every stored turn from its raw answer, with the signatures of `stacks` (a run's
    own snapshot of its stack definitions, where it kept one) and the cell's recorded call_format (auto for a
    cell recorded before it had one)."""
    retried = _retried_attempts(turns)
    out = []
    for turn in turns:
        harness_error = (turn.get("error") or {}).get("type") in HARNESS_ERRORS
        if _attempt_key(turn) in retried or harness_error:  # a later attempt answered / nothing was sent
            out.append(turn)
            continue
        cell = cells.get(turn["cell_id"], {})
        suite = turn.get("suite") or (cell.get("suites") or [None])[0]
        tools = (cell.get("tools") or {}).get(suite, [])
        error = turn.get("error") or {}
        transport = None
        if turn.get("http_status") is None and error.get("type") not in (None, "no_reply"):
            transport = TransportError(kind=error["type"], message=str(error.get("body") or ""))
        spec = stacks(turn.get("stack") or cell.get("stack", "openai"))
        verdict = classify(
            **spec.signatures(),
            mode=turn["tools_mode"],
            tools=tools,
            http_status=turn.get("http_status"),
            body=turn.get("raw_body"),
            transport_error=transport,
            call_format=cell.get("call_format") or AUTO_FORMAT,
        )
        # Flags the runner added (not read from the answer) stay as recorded.
        kept = [
            flag
            for flag in turn.get("flags") or []
            if flag.split(":", 1)[0] in RUNNER_FLAG_FAMILIES or flag in RUNNER_FLAGS
        ]
        out.append(
            {
                **turn,
                "outcome": verdict.outcome.value,
                "detail": verdict.detail,
                "calls": [c.model_dump() for c in verdict.calls],
                "text_calls": [c.model_dump() for c in verdict.text_calls],
                "text_call_recoverable": verdict.text_call_recoverable,
                "call_format": verdict.call_format,
                "finish_reason": verdict.finish_reason,
                "flags": [*verdict.flags, *kept],
            }
        )
    return out


def _attempt_key(turn: dict[str, Any]) -> tuple[Any, ...]:
    return (*turn_key(turn), turn.get("attempt", 0))


def _retried_attempts(turns: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """Attempts the run retried (a later attempt of the same turn exists). Recomputing them could make a
    retried non-response eligible beside the turn's real answer and count the turn twice."""
    keys = {_attempt_key(t) for t in turns}
    return {key for key in keys if (*key[:4], key[4] + 1) in keys}


def _text(row: dict[str, Any]) -> str:
    """The wide table's cell: `34 [9,59] n54`, `rej n8`, `launch_failed`. Markers after the figure: `ovf N`
    (N context overflows, which are refusals but not for lack of tool support; a cell refused only by
    overflows reads `overflow nN`, never `rej`) and `server_died` (the server died for good: the figure covers
    only the seeds that finished)."""
    if row["status"] == CellStatus.LAUNCH_FAILED:
        return CellStatus.LAUNCH_FAILED.value
    overflow = row.get("n_context_overflow") or 0
    markers = (f" ovf{overflow}" if overflow else "") + (
        " server_died" if row.get("cell_status") == CellStatus.SERVER_DIED else ""
    )
    if row["per_seed_mean"] is None:
        if row["n_rejected"] and overflow == row["n_rejected"] and not row["n_non_response"]:
            return f"overflow n{overflow}" + markers.replace(f" ovf{overflow}", "")
        if row["n_rejected"] and not row["n_non_response"]:
            return f"rej n{row['n_rejected']}{markers}"
        return f"undef rej{row['n_rejected']} nr{row['n_non_response']}{markers}"
    mean, low, high = (round(100 * row[k]) for k in ("per_seed_mean", "ci_low", "ci_high"))
    return f"{mean} [{low},{high}] n{row['n_eligible_turns']}{markers}"


def seed_counts(all_turns: list[dict[str, Any]], counted: list[dict[str, Any]]) -> dict[str, Any]:
    """How a cell's seeds ended and what its turns carried beside their outcome. Task success is over seeds
    the model could carry to an end (UNRAN_SEED_ENDS: refused, context overflow, retries out, server died)."""
    ends = [t for t in counted if t.get("end")]
    ran = [t for t in ends if t["end"] not in UNRAN_SEED_ENDS]
    flags = [flag for t in counted for flag in t.get("flags") or []]
    details = [t.get("detail") or "" for t in counted]
    return {
        "n_turn_records": len(all_turns),
        "n_superseded_records": len(all_turns) - len(counted),
        "seeds_finished": len(ends),
        "seeds_ran": len(ran),
        "seeds_capped": sum(t["end"] == SeedEnd.TURN_CAP for t in ends),
        "seeds_looping": sum(t["end"] == SeedEnd.LOOP for t in ends),
        "seeds_context_overflow": sum(t["end"] == SeedEnd.CONTEXT_OVERFLOW for t in ends),
        "seeds_server_died": len({t["seed"] for t in all_turns if t.get("end") == SeedEnd.SERVER_DIED}),
        "seeds_template_error": sum(t["end"] == SeedEnd.TEMPLATE_ERROR for t in ends),
        "task_success": (sum(bool(t.get("task_success")) for t in ran) / len(ran)) if ran else None,
        "n_empty": sum(d.startswith("empty:") for d in details),  # n_reasoning_only is a part of it
        "n_reasoning_only": sum(d == "empty:reasoning_only" for d in details),
        "n_unusable_2xx": sum(d.startswith("body:") for d in details),  # a 2xx with no message: final, not empty
        "n_context_overflow": sum(is_context_overflow(d) for d in details),
        "n_truncated": flags.count(TRUNCATED_FLAG),
        "n_constraint_violated": flags.count(CONSTRAINT_VIOLATED_FLAG),
        "n_cache_not_cleared": flags.count(CACHE_NOT_CLEARED_FLAG),
        "n_cache_shared": flags.count(CACHE_SHARED_FLAG),
        "n_prompt_truncated": flags.count(PROMPT_TRUNCATED_FLAG),
        "n_prompt_count_unavailable": flags.count(PROMPT_COUNT_UNAVAILABLE_FLAG),
        # The versions that served the counted turns: more than one when a resume met a changed server binary
        # (the config columns keep the first launch's version).
        "stack_versions_served": " ".join(sorted({str(t["stack_version"]) for t in counted if t.get("stack_version")}))
        or None,
    }


def format_counts(counted: list[dict[str, Any]], tools_mode: str | None) -> dict[str, Any]:
    """The call formats a cell's turns were written in (`call_formats`, e.g. `json:12 pythonic:3`; None when no
    turn held a text call) and, where the prompt asks for one (hint modes: JSON), how many turns wrote another
    (`n_format_off_request`; None in native, whose prompt asks for none). A record without `call_format` (older
    than the field) counts as no text call."""
    seen = Counter(t["call_format"] for t in counted if t.get("call_format"))
    requested = mode_of(tools_mode).requested_format if tools_mode else None
    ranked = sorted(seen.items(), key=lambda item: (-item[1], item[0]))
    return {
        "n_format_off_request": None if requested is None else sum(n for name, n in seen.items() if name != requested),
        "call_formats": " ".join(f"{name}:{n}" for name, n in ranked) or None,
    }


def long_table(store: RunStore, *, do_reclassify: bool = False) -> pd.DataFrame:
    manifest = store.manifest()
    settings = BootstrapSettings.model_validate(manifest["matrix"].get("bootstrap", {}))
    cells = {cell["cell_id"]: cell for cell in store.read_cells()}
    turns = store.read_turns()
    if do_reclassify:
        turns = reclassify(turns, cells, run_stacks(store.dir))
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for turn in turns:
        by_cell.setdefault(turn["cell_id"], []).append(turn)
    rows = []
    for cell_id, cell in sorted(cells.items(), key=lambda item: item[1].get("order", 0)):
        all_turns = by_cell.get(cell_id, [])
        counted = counted_turns(all_turns)
        stats = cell_stats(
            [t["seed"] for t in counted],
            [t["outcome"] for t in counted],
            settings,
            turns=[t["turn"] for t in counted],
        )
        row = {"cell_id": cell_id, **{c: cell.get(c) for c in CONFIG_COLUMNS}, **stats.model_dump()}
        row["status"] = cell.get("status") if cell.get("status") != CellStatus.COMPLETE else stats.status
        row["cell_status"] = cell.get("status")
        row["launches"] = len(cell.get("launches") or [])
        row.update(seed_counts(all_turns, counted))
        row.update(format_counts(counted, cell.get("tools_mode")))
        row["probe_verdict"] = (cell.get("probe") or {}).get("verdict")
        for key in ("tool_flags", "argv", "image_repo_digests", "tools_sha256", "decoding"):
            row[key] = None if row[key] is None else str(row[key])
        row["text"] = _text(row)
        row["axes"] = _later_axes(cell)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if "n_format_off_request" in frame:  # a count, undefined (not 0) in native: keep it an integer column
        frame["n_format_off_request"] = frame["n_format_off_request"].astype("Int64")
    return frame


def _later_axes(cell: dict[str, Any]) -> str:
    """The cell's axes beyond stack config, model and mode (channel, sample, guard off): '' for a plain cell."""
    parts = [cell.get("channel") if cell.get("channel") not in (None, "agent") else None]
    parts += [f"sample {cell['sample']}" if cell.get("sample") else None]
    parts += [f"without {cell['without']}" if cell.get("without") else None]
    return " ".join(part for part in parts if part)


def wide_table(long: pd.DataFrame) -> pd.DataFrame:
    if long.empty:
        return pd.DataFrame()
    axes = long["axes"] if "axes" in long else pd.Series([""] * len(long), index=long.index)
    column = long["stack_label"] + " | " + long["tools_mode"] + axes.map(lambda a: f" | {a}" if a else "")
    frame = long.assign(column=column)
    # Columns in run order (stack configs as the matrix lists them, modes in the product's order).
    mode_rank = {mode.value: rank for rank, mode in enumerate(ToolsMode)}
    stack_rank = {label: rank for rank, label in enumerate(dict.fromkeys(long["stack_label"]))}
    order = sorted(  # stable: a cell's channels and samples stay in run order within their mode
        dict.fromkeys(frame["column"]),
        key=lambda c: (stack_rank[c.split(" | ")[0]], mode_rank.get(c.split(" | ")[1], 99)),
    )
    wide = frame.pivot_table(index="model", columns="column", values="text", aggfunc="first")
    wide = wide.reindex(columns=order)
    wide.columns.name = None
    return wide.fillna("—")


def paper_tables(long: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per stack config, a table with the columns of the paper's results/serving_modes.csv."""
    tables = {}
    for label, group in long.groupby("stack_label"):
        rows = []
        for model, cells in group.groupby("model", sort=False):
            row: dict[str, Any] = {"model": model}
            for mode, prefix in PAPER_MODES.items():
                match = cells[cells["tools_mode"] == mode]
                values = match.iloc[0].to_dict() if len(match) else {}
                row[f"{prefix}_seed"] = values.get("per_seed_mean")
                row[f"{prefix}_lo"] = values.get("ci_low")
                row[f"{prefix}_hi"] = values.get("ci_high")
                row[f"{prefix}_pooled"] = values.get("pooled")
                row[f"{prefix}_n"] = values.get("n_eligible_turns")
                row[f"{prefix}_rej"] = values.get("n_rejected")
                row[f"{prefix}_n_seeds"] = values.get("n_seeds")
            rows.append(row)
        columns = ["model"] + [f"{p}_{f}" for p in PAPER_MODES.values() for f in PAPER_FIELDS]
        tables[str(label)] = pd.DataFrame(rows, columns=columns)
    return tables


def write_report(store: RunStore, *, do_reclassify: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    long = long_table(store, do_reclassify=do_reclassify)
    wide = wide_table(long)
    out = store.dir / "report"
    out.mkdir(exist_ok=True)
    written = []
    for name, frame, index in (("cells_long", long, False), ("cells_wide", wide, True)):
        frame.to_csv(out / f"{name}.csv", index=index)
        frame.to_parquet(out / f"{name}.parquet", index=index)
        (out / f"{name}.md").write_text(frame.to_markdown(index=index) + "\n")
        frame.to_html(out / f"{name}.html", index=index, na_rep="—")
        written += [out / f"{name}.{ext}" for ext in ("csv", "parquet", "md", "html")]
    for label, table in paper_tables(long).items():
        path = out / f"serving_modes__{label}.csv"
        table.to_csv(path, index=False)
        written.append(path)
    return long, wide, written
