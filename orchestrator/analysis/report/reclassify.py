"""`report --reclassify`: recompute every stored turn's label from its raw answer (a streamed turn from its raw
events in the run's side files) with the one labeller, so a run's outcomes can be checked against the code."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.core.bfcl import BfclCase
from orchestrator.core.classify import AUTO_FORMAT
from orchestrator.core.constraints import request_semantics
from orchestrator.core.labelling import StreamInput, label_turn
from orchestrator.core.replyfacts import CACHE_NOT_CLEARED_FLAG, PROMPT_COUNT_UNAVAILABLE_FLAG, PROMPT_TRUNCATED_FLAG
from orchestrator.core.streams import StreamEvent
from orchestrator.core.types import TransportError
from orchestrator.runner.run.provenance import run_stacks
from orchestrator.runner.store.runstore import RunStore, turn_key
from orchestrator.runner.store.storedamage import Damage
from orchestrator.runner.store.streamstore import StreamRef, read_streams, stream_of
from orchestrator.runner.suites.bfclcases import snapshot_cases
from orchestrator.runner.suites.bfclcheck import turn_verdict
from orchestrator.runner.turn.bfclturn import case_tools, read_tools
from orchestrator.serving.stackspec import StackSpec

# Flags the runner sets (the rest are read from the answer, so --reclassify recomputes them): the cache family
# and the prompt-count facts (truncated:prompt shares its family with truncated:max_tokens, read from the answer).
RUNNER_FLAG_FAMILIES = frozenset({CACHE_NOT_CLEARED_FLAG.split(":")[0]})
RUNNER_FLAGS = frozenset({PROMPT_TRUNCATED_FLAG, PROMPT_COUNT_UNAVAILABLE_FLAG})
HARNESS_ERRORS = frozenset({"template_error"})  # turns the harness could not send: no answer to recompute
EVENTS_MISSING_FLAG = "stream:events_missing"  # a streamed turn whose side-file line is gone: kept as recorded
# A streamed turn whose stream_ref names a line of another cell's file, or a line holding another attempt's key:
# kept as recorded, the line never used (analysis/report/report.py lists it as damage).
EVENTS_DAMAGED_FLAG = "stream:events_damaged"
Streams = dict[StreamRef, dict[str, Any]]


def stream_input(stored: dict[str, Any]) -> StreamInput:
    """A streamed turn's events from its side-file record."""
    events = [StreamEvent.from_list(item) for item in stored.get("events") or []]
    api = "ollama" if stored.get("api") == "ollama" else "openai"
    cut = stored.get("cut") if stored.get("cut") in ("truncated", "stalled", "deadline") else None
    return StreamInput(events=events, api=api, cut=cut)


def reclassify(
    turns: list[dict[str, Any]],
    cells: dict[str, dict[str, Any]],
    stacks: Callable[[str], StackSpec],
    streams: Streams | None = None,
    bfcl_cases: Mapping[str, BfclCase] | None = None,
) -> list[dict[str, Any]]:
    """Recompute outcome/detail/calls/flags and the text call facts (call_format, text_calls,
    text_call_recoverable) of every stored turn from its raw answer, with the signatures of `stacks` (a run's
    own snapshot of its stack definitions, where it kept one) and the cell's recorded call_format (auto for a
    cell recorded before it had one). A streamed turn is re-assembled from its raw events (`streams`: the
    run's side files by reference: `stream_of`), and constraint compliance is recomputed from the cell's semantics.
    A BFCL case's turn (`bfcl_cases`: the run's snapshot, by id) is read against the case's own tools, as the run
    offered them, and its BFCL verdict is recomputed by BFCL's checker."""
    retried = _retried_attempts(turns)
    streams = streams or {}
    out = []
    for turn in turns:
        harness_error = (turn.get("error") or {}).get("type") in HARNESS_ERRORS
        if _attempt_key(turn) in retried or harness_error:  # a later attempt answered / nothing was sent
            out.append(turn)
            continue
        stored, problem = stream_of(turn, streams) if turn.get("stream_ref") else (None, "")
        if turn.get("stream_ref") and stored is None:  # nothing to recompute from: the recorded verdict stands
            flag = EVENTS_MISSING_FLAG if problem == "missing" else EVENTS_DAMAGED_FLAG
            out.append({**turn, "flags": [*(turn.get("flags") or []), flag]})
            continue
        stream = stream_input(stored) if stored is not None else None
        cell = cells.get(turn["cell_id"], {})
        suite = turn.get("suite") or (cell.get("suites") or [None])[0]
        case = _bfcl_case(turn, cell, bfcl_cases)
        tools = (
            read_tools(case, case_tools(case, turn["tools_mode"])) if case else (cell.get("tools") or {}).get(suite, [])
        )
        error = turn.get("error") or {}
        transport = None
        if turn.get("http_status") is None and error.get("type") not in (None, "no_reply"):
            transport = TransportError(kind=error["type"], message=str(error.get("body") or ""))
        spec = stacks(turn.get("stack") or cell.get("stack", "openai"))
        verdict = label_turn(
            **spec.signatures(),
            mode=turn["tools_mode"],
            tools=tools,
            http_status=turn.get("http_status"),
            body=turn.get("raw_body"),
            transport_error=transport,
            call_format=cell.get("call_format") or AUTO_FORMAT,
            stream=stream,
            semantics=request_semantics(cell.get("tool_choice"), cell.get("parallel_tool_calls"), tools),
        )
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
                "flags": [*verdict.flags, *_runner_flags(turn)],
                "constraint_honoured": verdict.constraint_honoured,
                **({"bfcl": turn_verdict(case, turn["tools_mode"], verdict).model_dump(mode="json")} if case else {}),
            }
        )
    return out


def _bfcl_case(turn: dict[str, Any], cell: dict[str, Any], cases: Mapping[str, BfclCase] | None) -> BfclCase | None:
    """The BFCL case a turn of a BFCL cell answers (None for other cells); a case the snapshot lacks: an error."""
    if not cell.get("category"):
        return None
    case = (cases or {}).get(str(turn.get("seed")))
    if case is None or case.category != cell["category"]:
        raise ValueError(f"cell {turn['cell_id']}: case {turn.get('seed')!r} is not in the run's BFCL snapshot")
    return case


def run_bfcl_cases(store: RunStore, cells: dict[str, dict[str, Any]]) -> dict[str, BfclCase] | None:
    """The run's BFCL cases from its snapshot (sha256-checked: a tampered file is refused, named); None when the
    run has no BFCL cell."""
    if not any(cell.get("category") for cell in cells.values()):
        return None
    provenance = store.manifest().get("provenance") or {}
    return {case.id: case for case in snapshot_cases(store.dir, provenance if isinstance(provenance, dict) else {})}


def reclassify_run(
    store: RunStore, turns: list[dict[str, Any]], cells: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """`reclassify` with the run's own stack snapshot and side files; a turn whose stream_ref names a line that
    is another attempt's is noted as the store's damage (report/DAMAGE.md), its recorded verdict kept."""
    streams = read_streams(store.dir)
    again = reclassify(turns, cells, run_stacks(store), streams, run_bfcl_cases(store, cells))
    for turn in again:
        if EVENTS_DAMAGED_FLAG in turn["flags"]:
            store.note(_stream_damage(store.dir, turn, stream_of(turn, streams)[1]))
    return again


def _stream_damage(run_dir: Path, turn: dict[str, Any], problem: str) -> Damage:
    ref = str(turn.get("stream_ref"))
    kept = f"not used; turn {turn.get('turn')} of seed {turn.get('seed')!r} in cell {turn.get('cell_id')!r} keeps its "
    kept += "recorded verdict"
    if problem.startswith(f"{ref} "):  # the line it names holds another attempt's stream: the damage is that line
        name, _, line = ref.rpartition(":")
        return Damage(run_dir / name, int(line), "bad_line", f"{problem.removeprefix(ref + ' ')}: {kept}")
    return Damage(run_dir / "turns.jsonl", None, "bad_line", f"{problem}: {kept}")


def _runner_flags(turn: dict[str, Any]) -> list[str]:
    """The flags the runner added (not read from the answer): they stay as recorded."""
    return [
        flag
        for flag in turn.get("flags") or []
        if flag.split(":", 1)[0] in RUNNER_FLAG_FAMILIES or flag in RUNNER_FLAGS
    ]


def _attempt_key(turn: dict[str, Any]) -> tuple[Any, ...]:
    return (*turn_key(turn), turn.get("attempt", 0))


def _retried_attempts(turns: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """Attempts the run retried (a later attempt of the same turn exists). Recomputing them could make a
    retried non-response eligible beside the turn's real answer and count the turn twice."""
    keys = {_attempt_key(t) for t in turns}
    return {key for key in keys if (*key[:4], key[4] + 1) in keys}
