"""Tables from stored results only (no Docker, no HTTP): a long table (one row per cell: statistics and
every config column), a wide table (model x stack config x mode), a paper-compatible CSV, and
`--reclassify` to recompute outcomes from the stored raw answers."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import is_not, itemgetter, methodcaller
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis.report.bfclreport import write_bfcl_report
from orchestrator.analysis.report.drilldown import PAGES_DIR, cell_href, fill_rows, plan_pages, write_cell_pages
from orchestrator.analysis.report.gridcolumns import column_labels, column_order, markdown_table
from orchestrator.analysis.report.htmlreport import build_page, page_headers, write_index
from orchestrator.analysis.report.parallel import write_parallel_report
from orchestrator.analysis.report.reclassify import reclassify_run
from orchestrator.analysis.report.requestaxes import constraint_table, divergence_markers, stream_pairs, stream_timing
from orchestrator.analysis.report.views import cell_state
from orchestrator.core.classify import is_context_overflow
from orchestrator.core.modes import mode_of
from orchestrator.core.replyfacts import (
    CACHE_NOT_CLEARED_FLAG,
    CACHE_SHARED_FLAG,
    CONSTRAINT_VIOLATED_FLAG,
    PROMPT_COUNT_UNAVAILABLE_FLAG,
    PROMPT_TRUNCATED_FLAG,
    TRUNCATED_FLAG,
)
from orchestrator.core.stats import BootstrapSettings, CellStats, cells_stats
from orchestrator.core.types import UNRAN_SEED_ENDS, CellStatus, SeedEnd
from orchestrator.runner.store.rundir import read_run
from orchestrator.runner.store.runpaths import owned_dir, owned_path, remove_owned, replace_owned
from orchestrator.runner.store.runstore import RunStore, counted_turns
from orchestrator.runner.store.storedamage import DAMAGED_STATUS

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
PAPER_MODES = {"native": "native", "native+hint": "native_hint", "text-tools": "text_tools"}
PAPER_FIELDS = ("seed", "lo", "hi", "pooled", "n", "rej", "n_seeds")
DAMAGE_FILE = "DAMAGE.md"
RETIRED_FILES = ("cells_long.html", "cells_wide.html", "stream_pairs.html", "constraints.html")  # index.html now


def _text(row: dict[str, Any]) -> str:
    """The wide table's cell: `34 [9,59] n54`, `rej n8`, `launch_failed`. Markers after the figure: `ovf N`
    (N context overflows, which are refusals but not for lack of tool support; a cell refused only by
    overflows reads `overflow nN`, never `rej`) and `server_died` / `worker_lost` (the server, or the node that
    ran it, died for good: the figure covers only the seeds that finished)."""
    state = cell_state(row)
    if state == "launch_failed":
        return CellStatus.LAUNCH_FAILED.value
    overflow = row.get("n_context_overflow") or 0
    markers = (f" ovf{overflow}" if overflow else "") + (
        f" {row['cell_status']}" if row.get("cell_status") in (CellStatus.SERVER_DIED, CellStatus.WORKER_LOST) else ""
    )
    if state == "overflow":
        return f"overflow n{overflow}" + markers.replace(f" ovf{overflow}", "")
    if state == "rej":
        return f"rej n{row['n_rejected']}{markers}"
    if state == "undefined":
        return f"undef rej{row['n_rejected']} nr{row['n_non_response']}{markers}"
    mean, low, high = (round(100 * row[k]) for k in ("per_seed_mean", "ci_low", "ci_high"))
    return f"{mean} [{low},{high}] n{row['n_eligible_turns']}{markers}"


SERVER_DIED = SeedEnd.SERVER_DIED.value


def _get(key: str) -> Callable[[dict[str, Any]], Any]:
    return methodcaller("get", key)


def detail_counts(counted: list[dict[str, Any]]) -> Counter[str]:
    """How many turns carried each detail ('' for none)."""
    details: Counter[Any] = Counter(map(_get("detail"), counted))
    none = details.pop(None, 0)
    if none:
        details[""] += none
    return details


def seed_counts(
    all_turns: list[dict[str, Any]], counted: list[dict[str, Any]], details: Counter[str]
) -> dict[str, Any]:
    """How a cell's seeds ended and what its turns carried beside their outcome. Task success is over seeds
    the model could carry to an end (UNRAN_SEED_ENDS: refused, context overflow, retries out, server died)."""
    # Each field read once per record, in C (map/filter over methodcaller), and counted by distinct value (a
    # million turns hold a few dozen details).
    ended = list(filter(_get("end"), counted))
    ends = [t["end"] for t in ended]
    ran = [bool(t.get("task_success")) for t in ended if t["end"] not in UNRAN_SEED_ENDS]
    flags = Counter(chain.from_iterable(filter(None, map(_get("flags"), counted))))
    versions = {str(version) for version in set(map(_get("stack_version"), counted)) if version}

    def n_details(match: Callable[[str], bool]) -> int:
        return sum(n for detail, n in details.items() if match(detail))

    return {
        "n_turn_records": len(all_turns),
        "n_superseded_records": len(all_turns) - len(counted),
        "seeds_finished": len(ends),
        "seeds_ran": len(ran),
        "seeds_capped": ends.count(SeedEnd.TURN_CAP),
        "seeds_looping": ends.count(SeedEnd.LOOP),
        "seeds_context_overflow": ends.count(SeedEnd.CONTEXT_OVERFLOW),
        "seeds_server_died": len({t["seed"] for t in filter(_get("end"), all_turns) if t["end"] == SERVER_DIED}),
        "seeds_template_error": ends.count(SeedEnd.TEMPLATE_ERROR),
        "task_success": (sum(ran) / len(ran)) if ran else None,
        "n_empty": n_details(lambda d: d.startswith("empty:")),  # n_reasoning_only is a part of it
        "n_reasoning_only": details["empty:reasoning_only"],
        "n_unusable_2xx": n_details(lambda d: d.startswith("body:")),  # a 2xx with no message: final, not empty
        "n_context_overflow": n_details(is_context_overflow),
        "n_truncated": flags[TRUNCATED_FLAG],
        "n_constraint_violated": flags[CONSTRAINT_VIOLATED_FLAG],
        "n_cache_not_cleared": flags[CACHE_NOT_CLEARED_FLAG],
        "n_cache_shared": flags[CACHE_SHARED_FLAG],
        "n_prompt_truncated": flags[PROMPT_TRUNCATED_FLAG],
        "n_prompt_count_unavailable": flags[PROMPT_COUNT_UNAVAILABLE_FLAG],
        # The versions that served the counted turns: more than one when a resume met a changed server binary
        # (the config columns keep the first launch's version).
        "stack_versions_served": " ".join(sorted(versions)) or None,
    }


def format_counts(counted: list[dict[str, Any]], tools_mode: str | None) -> dict[str, Any]:
    """The call formats a cell's turns were written in (`call_formats`, e.g. `json:12 pythonic:3`; None when no
    turn held a text call) and, where the prompt asks for one (hint modes: JSON), how many turns wrote another
    (`n_format_off_request`; None in native, whose prompt asks for none). A record without `call_format` (older
    than the field) counts as no text call."""
    seen = Counter(filter(None, map(_get("call_format"), counted)))
    requested = mode_of(tools_mode).requested_format if tools_mode else None
    ranked = sorted(seen.items(), key=lambda item: (-item[1], item[0]))
    return {
        "n_format_off_request": None if requested is None else sum(n for name, n in seen.items() if name != requested),
        "call_formats": " ".join(f"{name}:{n}" for name, n in ranked) or None,
    }


def load_run(store: RunStore, *, do_reclassify: bool = False, view: bool = True) -> RunTurns:
    """A run's settings, cells and turns by cell, read by the one rule (runner/store/rundir.py read_run),
    reclassified from the raw answers when asked (which needs whole records, as does `view=False`)."""
    read = read_run(store, view=view and not do_reclassify)
    turns = reclassify_run(store, read.turns, read.cells) if do_reclassify else read.turns
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for turn in turns:
        by_cell.setdefault(turn["cell_id"], []).append(turn)
    return RunTurns(read.settings, read.cells, by_cell, {c: counted_turns(t) for c, t in by_cell.items()})


@dataclass(frozen=True)
class RunTurns:
    settings: BootstrapSettings
    cells: dict[str, dict[str, Any]]
    by_cell: dict[str, list[dict[str, Any]]]  # every record
    counted: dict[str, list[dict[str, Any]]]  # the records that count (no superseded runs)


def cell_order(run: RunTurns) -> list[str]:
    """The cells in run order (the long table's rows, the drill-down pages' numbering)."""
    return [cell_id for cell_id, _cell in sorted(run.cells.items(), key=lambda item: item[1].get("order", 0))]


def cell_counts(run: RunTurns, cell_id: str) -> dict[str, Any]:
    """What a cell's records came to beside its statistics: how seeds ended, call formats, streams and
    constraints (the long table's count columns; no bootstrap)."""
    all_turns, counted = run.by_cell.get(cell_id, []), run.counted.get(cell_id, [])
    details = detail_counts(counted)  # how many counted turns carried each detail
    return {
        **seed_counts(all_turns, counted, details),
        **format_counts(counted, run.cells[cell_id].get("tools_mode")),
        **request_counts(counted, details),
    }


def cell_statistics(run: RunTurns) -> dict[str, CellStats]:
    """Every cell's statistics from its counted turns, the bootstrap intervals drawn in one batch."""
    ids = list(run.cells)
    seed, outcome, turn = itemgetter("seed"), itemgetter("outcome"), itemgetter("turn")
    inputs = [
        (list(map(seed, counted)), list(map(outcome, counted)), list(map(turn, counted)))
        for counted in (run.counted.get(cell_id, []) for cell_id in ids)
    ]
    return dict(zip(ids, cells_stats(inputs, run.settings), strict=True))


def long_table(
    store: RunStore, *, do_reclassify: bool = False, run: RunTurns | None = None, pairs: pd.DataFrame | None = None,
    stats_by_cell: dict[str, CellStats] | None = None, counts_by_cell: dict[str, dict[str, Any]] | None = None,
) -> pd.DataFrame:  # fmt: skip
    run = run or load_run(store, do_reclassify=do_reclassify)
    pairs = stream_pairs(run.cells, run.counted, run.settings) if pairs is None else pairs
    markers = divergence_markers(pairs)
    rows = []
    ordered = [(cell_id, run.cells[cell_id]) for cell_id in cell_order(run)]
    stats_by_cell = cell_statistics(run) if stats_by_cell is None else stats_by_cell
    for cell_id, cell in ordered:
        stats = stats_by_cell[cell_id]
        row = {"cell_id": cell_id, **{c: cell.get(c) for c in CONFIG_COLUMNS}, **stats.model_dump()}
        row["status"] = cell.get("status") if cell.get("status") != CellStatus.COMPLETE else stats.status
        row["cell_status"] = cell.get("status")
        row["launches"] = len(cell.get("launches") or [])
        row.update(counts_by_cell[cell_id] if counts_by_cell else cell_counts(run, cell_id))
        row["probe_verdict"] = (cell.get("probe") or {}).get("verdict")
        for key in ("tool_flags", "argv", "image_repo_digests", "tools_sha256", "decoding"):
            row[key] = None if row[key] is None else str(row[key])
        row["text"] = _text(row) + markers.get(cell_id, "")
        row["axes"] = _later_axes(cell)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if "n_format_off_request" in frame:  # a count, undefined (not 0) in native: keep it an integer column
        frame["n_format_off_request"] = frame["n_format_off_request"].astype("Int64")
    return frame


def request_counts(counted: list[dict[str, Any]], details: Counter[str]) -> dict[str, Any]:
    """What a cell's streamed turns and constraints came to: streams cut (truncated, stalled, past the
    deadline), the median time to first token and tokens per second, and the share of judged turns that kept
    to tool_choice / parallel_tool_calls (None where nothing was asked)."""
    judged = list(filter(partial(is_not, None), map(_get("constraint_honoured"), counted)))
    return {
        "n_stream_cut": sum(n for detail, n in details.items() if detail.startswith("transport:stream_")),
        **stream_timing(counted),
        "n_constraint_judged": len(judged),
        "constraint_honoured": (sum(judged) / len(judged)) if judged else None,
    }


def _later_axes(cell: dict[str, Any]) -> str:
    """The cell's axes beyond stack config, model and mode (channel, sample, guard off, stream, tool_choice,
    parallel_tool_calls, BFCL category): '' for a plain cell."""
    parts = [cell.get("channel") if cell.get("channel") not in (None, "agent") else None]
    parts += [f"sample {cell['sample']}" if cell.get("sample") else None]
    parts += [f"without {cell['without']}" if cell.get("without") else None]
    parts += ["stream" if cell.get("stream") else None]
    parts += [f"tool_choice {cell['tool_choice']}" if cell.get("tool_choice") not in (None, "auto") else None]
    parallel = cell.get("parallel_tool_calls")
    parts += [None if parallel is None else f"parallel {str(parallel).lower()}"]
    parts += [f"bfcl {cell['category']}" if cell.get("category") else None]
    return " ".join(part for part in parts if part)


def wide_table(long: pd.DataFrame) -> pd.DataFrame:
    if long.empty:
        return pd.DataFrame()
    frame = long.assign(column=column_labels(long))
    wide = frame.pivot_table(index="model", columns="column", values="text", aggfunc="first")
    wide = wide.reindex(columns=column_order(long))
    wide.columns.name = None
    return wide.fillna("—")


def paper_tables(long: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per stack config (sorted), a table with the columns of the paper's results/serving_modes.csv: one row per
    model (in run order), each mode's first cell (one per model and mode, unless later axes split it)."""
    firsts: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for record in long.to_dict("records"):  # one pass: a thousand-cell run has hundreds of (config, model) groups
        by_model = firsts.setdefault(str(record["stack_label"]), {})
        by_model.setdefault(record["model"], {}).setdefault(record["tools_mode"], record)
    columns = ["model"] + [f"{p}_{f}" for p in PAPER_MODES.values() for f in PAPER_FIELDS]
    tables = {}
    for label in sorted(firsts):
        rows = []
        for model, first in firsts[label].items():
            row: dict[str, Any] = {"model": model}
            for mode, prefix in PAPER_MODES.items():
                values = first.get(mode, {})
                row[f"{prefix}_seed"] = values.get("per_seed_mean")
                row[f"{prefix}_lo"] = values.get("ci_low")
                row[f"{prefix}_hi"] = values.get("ci_high")
                row[f"{prefix}_pooled"] = values.get("pooled")
                row[f"{prefix}_n"] = values.get("n_eligible_turns")
                row[f"{prefix}_rej"] = values.get("n_rejected")
                row[f"{prefix}_n_seeds"] = values.get("n_seeds")
            rows.append(row)
        tables[label] = pd.DataFrame(rows, columns=columns)
    return tables


def write_report(store: RunStore, *, do_reclassify: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """Every report file of a run, all or nothing: the files are written to a temporary folder beside
    report/ and renamed into place only once all are written, so a failure leaves the old report as it was.
    A run read in recover mode with damage gets report/DAMAGE.md listing it (and its damaged cells marked
    `cell_damaged` in the tables); a clean report removes a DAMAGE.md left from an earlier one."""
    run = load_run(store, do_reclassify=do_reclassify)
    out = owned_dir(store.dir, store.dir / "report")  # every write and removal below stays inside the run
    staging = Path(tempfile.mkdtemp(prefix=".report-", dir=store.dir))
    try:
        long, wide, staged = _write_tables(store, run, staging)
        staged += _write_damage(store, staging)
        stale = [] if store.damage else [out / DAMAGE_FILE]  # checked with the rest before anything is replaced
        written = _publish(store.dir, staging, staged, out, stale)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return long, wide, written


def _write_tables(store: RunStore, run: RunTurns, out: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """Statistics, tables, the page and its drill-down pages into `out` (the staging folder)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The bootstrap (numpy, mostly outside the GIL) beside the drill-down's reads: the same figures, sooner.
        statistics = pool.submit(cell_statistics, run)
        pages = plan_pages(cell_order(run), run.by_cell)
        fill_rows(store, pages)
        counts = {cell_id: cell_counts(run, cell_id) for cell_id in run.cells}
        stats = statistics.result()
    pairs = stream_pairs(run.cells, run.counted, run.settings)  # bootstrapped once: the long table's markers too
    long = long_table(store, run=run, pairs=pairs, stats_by_cell=stats, counts_by_cell=counts)
    if not long.empty and "cell_status" in long:
        damaged = long["cell_status"] == DAMAGED_STATUS
        long.loc[damaged, "text"] = long.loc[damaged, "text"] + " cell_damaged"
    wide = wide_table(long)
    constraints = constraint_table(run.cells, run.counted, run.settings)
    written = []
    tables: list[tuple[str, pd.DataFrame, bool]] = [("cells_long", long, False), ("cells_wide", wide, True)]
    # Request-semantics sections, written only where the run has them (a run without those axes has none).
    tables += [(name, frame, False) for name, frame in (("stream_pairs", pairs), ("constraints", constraints))
               if not frame.empty]  # fmt: skip
    for name, frame, index in tables:
        frame.to_csv(out / f"{name}.csv", index=index)
        frame.to_parquet(out / f"{name}.parquet", index=index)
        (out / f"{name}.md").write_text(markdown_table(frame, index=index))
        written += [out / f"{name}.{ext}" for ext in ("csv", "parquet", "md")]

    for label, table in paper_tables(long).items():
        path = out / f"serving_modes__{label}.csv"
        table.to_csv(path, index=False)
        written.append(path)
    written += write_parallel_report(store, [t for turns in run.by_cell.values() for t in turns], out)
    bfcl_files, bfcl_frames = write_bfcl_report(run.cells, run.counted, run.settings, out)
    written += bfcl_files + write_cell_pages(store.run_id, pages, page_headers(long), out)
    frames = [*bfcl_frames, ("Stream vs non-stream", pairs), ("tool_choice / parallel_tool_calls kept", constraints)]
    names = {page.cell_id: cell_href(page) for page in pages}
    written += write_index(build_page(store, run, long, column_order(long), frames, stats, names), out)
    return long, wide, written


def _write_damage(store: RunStore, out: Path) -> list[Path]:
    """report/DAMAGE.md: what of the run could not be read, so a partial report says it is one."""
    if not store.damage:
        return []
    lines = "".join(f"- `{damage}`\n" for damage in store.damage)
    path = out / DAMAGE_FILE
    intro = "This report covers what of the run could be read; not read:"
    path.write_text(f"# Damage in {store.run_id}\n\n{intro}\n\n{lines}")
    return [path]


def _publish(run_dir: Path, staging: Path, staged: list[Path], out: Path, stale: list[Path]) -> list[Path]:
    """Flush every staged file to disk, then rename each into report/ (renames within one filesystem). Every
    path it removes or replaces (`stale`: files a report of this run no longer has) is checked first
    (runner/store/runpaths.py): a refused one changes nothing."""
    final = [out / path.relative_to(staging) for path in staged]
    removed = [out / PAGES_DIR] if (staging / PAGES_DIR).is_dir() else []
    removed += [out / name for name in RETIRED_FILES] + stale
    for path in [*removed, *final]:
        owned_path(run_dir, path)
    for path in staged:
        if path.parent.name == PAGES_DIR:
            continue  # the drill-down pages: a view of turns.jsonl, rewritten by any report (2,000 fsyncs: 0.4 s)
        with path.open("rb+") as handle:
            os.fsync(handle.fileno())
    # The drill-down pages are replaced as a set (none left from an older report); RETIRED_FILES are what older
    # versions wrote and this one does not: never shown as current.
    for path in removed:
        remove_owned(run_dir, path)
    for path, target in zip(staged, final, strict=True):
        replace_owned(run_dir, path, target)
    return final
