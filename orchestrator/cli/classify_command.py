"""`orchestrate classify`: label exchanges (JSONL, one per line) with the core labeller, streamed ones too.

An exchange with `"stream": true` carries the raw text of its stream in `body` (SSE for OpenAI-compatible
stacks, NDJSON for `ollama`); a `body` that is a JSON object is an error reply sent before any stream began,
labelled exactly as a non-streamed reply. `tool_choice` / `parallel_tool_calls` (and `named_tool`) say what the
request asked, so compliance is judged as in a run.

A bad input (not UTF-8, torn or deep JSON, a wrong field, a tool whose `parameters` is no usable schema) stops
the command with one error naming the file and line, exit 2; model output inside a good line never does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict

from orchestrator.cli import app, fail
from orchestrator.core.bfcl import BfclCase
from orchestrator.core.classify import AUTO_FORMAT, check_call_format
from orchestrator.core.constraints import RequestSemantics, ToolChoice
from orchestrator.core.jsonl import InputError, read_jsonl
from orchestrator.core.jsonsafe import json_safe, safe_text
from orchestrator.core.labelling import StreamInput, label_turn
from orchestrator.core.toolschemas import tool_schema_problems
from orchestrator.core.types import ToolsMode, TransportError
from orchestrator.runner.config.resolve import RunAssets
from orchestrator.runner.suites.bfclcases import check_categories, package_cases
from orchestrator.runner.suites.bfclcheck import turn_verdict
from orchestrator.runner.suites.bfclpackage import BfclUnavailable
from orchestrator.runner.suites.tasks import SuiteError
from orchestrator.runner.turn.bfclturn import case_tools, read_tools
from orchestrator.serving.registry import InvalidStackError, UnknownStackError
from orchestrator.serving.streaming import parse_stream_text


class BfclRef(BaseModel):
    """Which BFCL case an exchange answers (core/bfcl.py): its category and id in the pinned package's data."""

    model_config = ConfigDict(extra="forbid")
    category: str
    id: str


class Exchange(BaseModel):
    """One request/reply to classify (the input of `orchestrate classify`)."""

    model_config = ConfigDict(extra="ignore")
    id: Any
    stack: str
    mode: ToolsMode
    tools: list[Any] | None = None  # required, except on a BFCL exchange (its case's tools, as a run sends them)
    http_status: int | None
    body: Any = None
    error: TransportError | None = None
    call_format: str = AUTO_FORMAT  # how text calls are read: auto or one recogniser (core/textcalls.py)
    stream: bool = False  # body: the raw stream text (SSE, or NDJSON for ollama); a JSON object: an error reply
    tool_choice: ToolChoice = "auto"
    named_tool: str | None = None
    parallel_tool_calls: bool | None = None
    bfcl: BfclRef | None = None  # a BFCL case: the line gains BFCL's verdict (as served, as said)


_CLASSIFY_FIELDS = {
    "outcome",
    "detail",
    "parse_path",
    "calls",
    "text_call_recoverable",
    "call_format",
    "text_calls",
    "retryable",
    "finish_reason",
    "flags",
    "stream_facts",
    "constraint_honoured",
}


def _stream_of(exchange: Exchange, api: str) -> StreamInput | None:
    """The stream an exchange carries: a string body of a 2xx streamed reply (anything else is a plain reply)."""
    started = exchange.http_status is not None and 200 <= exchange.http_status < 300 and exchange.error is None
    if not (exchange.stream and started and isinstance(exchange.body, str)):
        return None
    stream_api = "ollama" if api == "ollama" else "openai"
    return StreamInput(events=parse_stream_text(exchange.body, stream_api), api=stream_api)


def _row(exchanges: Path, number: int, exchange: Exchange, stacks: RunAssets) -> dict[str, Any]:
    """One exchange's labelled row, or an InputError naming the line and the field at fault."""
    try:
        spec = stacks.stack(exchange.stack)  # the one resolver: a plain name of stacks/, never a path
    except (UnknownStackError, InvalidStackError) as exc:
        raise InputError(f"{exchanges}:{number}: field 'stack': {exc}") from exc
    try:
        check_call_format(exchange.call_format)
    except ValueError as exc:
        raise InputError(f"{exchanges}:{number}: field 'call_format': {exc}") from exc
    case = _bfcl_case(exchanges, number, exchange.bfcl)
    if exchange.tools is None and case is None:
        raise InputError(f"{exchanges}:{number}: field 'tools': required (only a `bfcl` exchange may leave it out)")
    offered = exchange.tools if exchange.tools is not None else case_tools(case, exchange.mode)  # type: ignore[arg-type]
    tools = read_tools(case, offered) if case is not None and exchange.tools is None else offered
    problems = tool_schema_problems(tools)
    if problems:  # configuration, not model output: every call to the tool would read as hallucinated
        raise InputError(f"{exchanges}:{number}: field 'tools': {problems[0]}")
    semantics = RequestSemantics(
        tool_choice=exchange.tool_choice,
        named_tool=exchange.named_tool,
        parallel_tool_calls=exchange.parallel_tool_calls,
    )
    verdict = label_turn(
        **spec.signatures(),
        mode=exchange.mode,
        tools=tools,
        http_status=exchange.http_status,
        body=exchange.body,
        transport_error=exchange.error,
        call_format=exchange.call_format,
        stream=_stream_of(exchange, spec.api),
        semantics=semantics,
    )
    row = {"id": exchange.id, **verdict.model_dump(mode="json", include=_CLASSIFY_FIELDS)}
    if case is not None:  # by the code a run uses (runner/suites/bfclcheck.py)
        judged = turn_verdict(case, exchange.mode, verdict)
        row |= {"bfcl_valid": judged.valid, "bfcl_valid_as_said": judged.valid_as_said}
        row["bfcl_error_type"] = judged.error_type
    # An id or stream fact may hold a lone surrogate or nest deep: the row is written as UTF-8 all the same.
    return json_safe(row)


def _bfcl_case(exchanges: Path, number: int, ref: BfclRef | None) -> BfclCase | None:
    """The case a `bfcl` exchange names, from the pinned package; an unknown category or id: one error."""
    if ref is None:
        return None
    try:
        check_categories([ref.category])
        cases = {case.id: case for case in package_cases(ref.category)}
    except (SuiteError, BfclUnavailable) as exc:
        raise InputError(f"{exchanges}:{number}: field 'bfcl.category': {exc}") from exc
    if ref.id not in cases:
        raise InputError(f"{exchanges}:{number}: field 'bfcl.id': BFCL {ref.category} has no case {ref.id[:80]!r}")
    return cases[ref.id]


@app.command("classify")
def classify_command(
    exchanges: Annotated[Path, typer.Argument(help="JSONL: one exchange per line.")],
) -> None:
    """Label each exchange with one outcome; writes one JSON object per line."""
    stacks = RunAssets.from_checkout()
    try:
        for number, exchange in read_jsonl(exchanges, Exchange):
            try:
                row = _row(exchanges, number, exchange, stacks)
            except InputError:
                raise
            except Exception as exc:  # a defect, never model output's fault: named with its line, not a traceback
                raise InputError(f"{exchanges}:{number}: cannot label: {type(exc).__name__}: {exc}") from exc
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    except InputError as exc:
        fail(safe_text(str(exc)))  # the message may quote a lone surrogate from the file
