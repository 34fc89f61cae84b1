"""Domain types shared by every layer. Pure data: no I/O here.

The serialised field names of `TurnRecord` are a contract read by tests and other tools.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The schema of turn records, cell files and manifests. 1: the first version (no field); 2: adds finish_reason,
# flags, seed_attempt, superseded, prompt_cache, sample and sampling_seed. Readers accept what they know.
# Fields added since without a version bump are optional and read as absent in older files: turn records'
# `call_format` (None), `text_calls` ([]) and `prompt_tokens_rendered` (None); cells' `call_format` ("auto"),
# `canary`, `sampling_defaults` and `raw_template` (absent); turn records' `channel` (None: the agent loop),
# `executions`, `guard_events` ([]), `prompted_by` and `final_answer` (None); cells' `channel`, `guards`,
# `without` and `sample` (absent: an agent-loop cell); turn records' `stream` (False), `stream_ref`,
# `stream_facts`, `tool_choice`, `parallel_tool_calls`, `constraint_honoured` (None); cells' `stream`,
# `tool_choice`, `parallel_tool_calls` (absent: not streamed, nothing asked).
# 3: turn records' `category` and `bfcl` (a BFCL case's cell axis and verdict; absent: null) and cells'
# `category` (absent: null).
SCHEMA_VERSION = 3
KNOWN_SCHEMA_VERSIONS: frozenset[int] = frozenset({1, 2, 3})


class Outcome(StrEnum):
    """What happened on one turn: exactly one of six values."""

    VALID_CALL = "valid_call"
    HALLUCINATED_CALL = "hallucinated_call"
    UNPARSEABLE_TEXT = "unparseable_text"
    NO_CALL_PROSE = "no_call_prose"
    REJECTED_REQUEST = "rejected_request"
    NON_RESPONSE = "non_response"


# Outcomes that say nothing about the model: kept out of the fidelity denominator.
INELIGIBLE_OUTCOMES: frozenset[Outcome] = frozenset({Outcome.REJECTED_REQUEST, Outcome.NON_RESPONSE})


class SeedEnd(StrEnum):
    """Why a seed's agent loop stopped (recorded on its last turn)."""

    SUBMITTED = "submitted"
    PROSE = "prose"
    UNPARSEABLE = "unparseable"
    REJECTED = "rejected"
    RETRIES_EXHAUSTED = "retries_exhausted"
    TURN_CAP = "turn_cap"
    LOOP = "loop"
    EMPTY = "empty"  # a final (2xx) answer with no content and no call: never resampled
    CONTEXT_OVERFLOW = "context_overflow"  # the conversation outgrew the server's context: refused, not a model failure
    SERVER_DIED = "server_died"  # the server process died: not a finished seed; the sweep reruns it
    TEMPLATE_ERROR = "template_error"  # raw-template: the model's own template would not render the next prompt
    FIRST_ANSWER = "first_answer"  # model channel: the model's first answer is the case's whole run
    ANSWERED = "answered"  # product channel: a final answer in plain text (the model's, or built by a guard)
    SHORT_CIRCUIT = "short_circuit"  # product channel: a deterministic tool's result is the answer
    STALLED = "stalled"  # product channel: the stall guard's re-prompt was met with a second stall
    TOOL_SERVER_DIED = "tool_server_died"  # product channel: the tool server stopped answering; not the model's


# Seeds whose task the stack cut short (it refused, overflowed its context, stopped answering, or died):
# kept out of task success, which is over seeds the model could carry to an end of its own.
UNRAN_SEED_ENDS: frozenset[SeedEnd] = frozenset(
    {
        SeedEnd.REJECTED,
        SeedEnd.CONTEXT_OVERFLOW,
        SeedEnd.RETRIES_EXHAUSTED,
        SeedEnd.SERVER_DIED,
        SeedEnd.TEMPLATE_ERROR,
        SeedEnd.TOOL_SERVER_DIED,
    }
)


class CellStatus(StrEnum):
    """Where a cell of a run stands."""

    RUNNING = "running"
    COMPLETE = "complete"
    LAUNCH_FAILED = "launch_failed"
    SERVER_DIED = "server_died"  # the server died under the cell, was restarted once, and died again
    WORKER_LOST = "worker_lost"  # Ray executor: the node (or worker) running the cell's group was lost mid-group


class ToolsMode(StrEnum):
    """How tools reach the model."""

    NATIVE = "native"
    NATIVE_HINT = "native+hint"
    TEXT_TOOLS = "text-tools"
    CONSTRAINED = "constrained"
    RAW_TEMPLATE = "raw-template"  # the harness renders the model's own template; raw completion; harness parser


ParsePath = Literal["server", "harness"]


class ParsedCall(BaseModel):
    """One tool call as the active parse path understood it."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: Any = Field(description="Decoded arguments (normally an object); None when absent.")
    id: str | None = None


class TransportError(BaseModel):
    """A failure below HTTP: no status was received."""

    kind: str = Field(description="timeout | connection | protocol | ...")
    message: str = ""


class ErrorInfo(BaseModel):
    """What went wrong on a turn, kept apart from any assistant message."""

    type: str = Field(description="e.g. http_400, http_500, timeout, connection, bad_body")
    body: Any = None


class Classification(BaseModel):
    """The classifier's verdict for one exchange."""

    outcome: Outcome
    detail: str | None = Field(None, description="family:reason, e.g. refused:no_tool_parser")
    parse_path: ParsePath
    calls: list[ParsedCall] = Field(default_factory=list)
    raw_content: str | None = None
    raw_tool_calls: Any = None
    text_call_recoverable: bool = Field(False, description="A recogniser parsed a call from the content.")
    call_format: str | None = Field(None, description="The recogniser that matched the content; None: no attempt.")
    text_calls: list[ParsedCall] = Field(
        default_factory=list, description="Calls recovered from the content (executed only when they are `calls`)."
    )
    error: ErrorInfo | None = None
    retryable: bool = Field(
        False, description="No model output arrived and another attempt may get one (transport, 5xx, 429)."
    )
    finish_reason: str | None = Field(None, description="Why generation stopped, as the stack said it.")
    flags: list[str] = Field(default_factory=list, description="family:reason facts beside the outcome.")
    stream_facts: dict[str, Any] | None = Field(
        None, description="A streamed answer: what its assembly saw (terminator, call indexes, event counts)."
    )
    constraint_honoured: bool | None = Field(
        None, description="tool_choice / parallel_tool_calls sent: did the answer keep to them (None: nothing asked)."
    )


class RefusalSignature(BaseModel):
    """A body text by which a stack refuses a request before any model work (data from stacks/*.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contains: str
    status: int | None = Field(None, description="Only under this status; null = any status.")
    detail: str = Field(description="family:reason recorded on the turn, e.g. refused:no_jinja")


class TokenCounts(BaseModel):
    prompt: int | None = None
    completion: int | None = None


class GuardEvent(BaseModel):
    """One guard's verdict on one turn of the product channel: did its condition hold (`fired`), and did it
    alter what was executed, sent or answered (`changed`). A guard that fires and changes nothing earns nothing."""

    guard: str
    fired: bool
    changed: bool
    before: Any = None
    after: Any = None


class ToolExecution(BaseModel):
    """One call the product channel handed to the tool server, and what the server answered."""

    call: ParsedCall
    result: Any = None
    error: bool = False
    sent: bool = Field(True, description="False: not sent (an unknown tool, or a repeat the dedup guard held back).")


class BfclVerdict(BaseModel):
    """BFCL's verdict on one turn of a BFCL case (core/bfcl.py): `valid` on the calls the serving path
    delivered, `valid_as_said` on the calls the model wrote; both null on a turn without model output."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)  # "yes" is no verdict

    category: str
    id: str
    valid: bool | None
    valid_as_said: bool | None
    error_type: str | None = Field(None, description="BFCL's error type when `valid` is false; else null.")

    @model_validator(mode="after")
    def _coherent(self) -> BfclVerdict:
        if (self.valid is None) != (self.valid_as_said is None):
            raise ValueError("valid and valid_as_said are both null (no model output) or both judged")
        if self.error_type is not None and self.valid is not False:
            raise ValueError("error_type is BFCL's reason for a failed verdict: null unless valid is false")
        return self


class TurnRecord(BaseModel):
    """One assistant response inside a seed's agent loop, recorded before it is acted on.

    The one definition of a turn record (core/runcontract.py: the run directory's contract). Every record written
    carries `schema_version` (the current one): a reader never guesses a version from which keys a line has; a
    line without it was written before the field existed and is version 1. The lean readers (report view,
    notebook, `stats`) are derived from these fields by core/turnfields.py. A new field with a version bump
    needs a reader for the older version there (runcontract.READERS)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    cell_id: str
    seed: str
    suite: str | None = None
    turn: int
    attempt: int = 0
    model: str
    stack: str
    stack_config: str | None = Field(None, description="Stack config label (stack + tool configuration).")
    stack_version: str | None = None
    tools_mode: ToolsMode
    hint: bool
    http_status: int | None
    parser: str | None = Field(None, description="The stack's configured tool-call parser, if any.")
    parse_path: ParsePath
    outcome: Outcome
    detail: str | None = None
    error: ErrorInfo | None = None
    latency_s: float | None = None
    tokens: TokenCounts = Field(default_factory=TokenCounts)
    raw_content: str | None = None
    raw_tool_calls: Any = None
    calls: list[ParsedCall] = Field(default_factory=list, description="The calls the active parse path took.")
    text_call_recoverable: bool = False
    call_format: str | None = Field(None, description="The call format the content was written in; None: no call.")
    text_calls: list[ParsedCall] = Field(
        default_factory=list, description="Calls recovered from the content text, whether executed or not."
    )
    raw_body: Any = Field(None, description="The full reply body, kept so outcomes can be recomputed.")
    stream: bool = Field(False, description="Sent with stream: true (the cell's stream axis).")
    stream_ref: str | None = Field(
        None, description="A streamed attempt: where its raw events are, `streams/<cell_id>.jsonl:<line>`."
    )
    stream_facts: dict[str, Any] | None = Field(
        None, description="A streamed attempt: ttfb_s, ttft_s, max_gap_s, tokens_per_s, cut, call_indexes, counts."
    )
    tool_choice: str | None = Field(None, description="The tool_choice the request asked for (None: not an axis).")
    parallel_tool_calls: bool | None = Field(None, description="parallel_tool_calls as sent (None: not sent).")
    constraint_honoured: bool | None = Field(
        None, description="Did the answer keep to tool_choice / parallel_tool_calls (None: nothing asked or no answer)."
    )
    prompt_tokens_rendered: int | None = Field(
        None, description="The prompt's length as the server renders and counts it (tokens.prompt: what it used)."
    )
    finish_reason: str | None = Field(None, description="Why generation stopped (length = cut at max_tokens).")
    flags: list[str] = Field(default_factory=list, description="e.g. truncated:max_tokens, constraint:violated")
    seed_attempt: int = Field(0, ge=0, description="Which run of this seed (a seed whose server died is rerun).")
    sample: int = Field(0, ge=0, description="Sample index of a repeated case (a cell axis).")
    sampling_seed: int | None = Field(None, description="The sampling seed this request carried.")
    superseded: bool = Field(False, description="A later run of the seed replaces this record; not counted.")
    prompt_cache: dict[str, Any] | None = Field(
        None, description="On a seed's first record: how the server's prompt cache was cleared for it."
    )
    end: SeedEnd | None = Field(None, description="Why the seed ended on this turn, if it did.")
    task_success: bool | None = Field(None, description="On a submit turn: was the answer right?")
    channel: str | None = Field(None, description="model | product; None: the plain agent loop (no channel axis).")
    without: str | None = Field(None, description="Ablation: the product-channel guard switched off in this cell.")
    executions: list[ToolExecution] = Field(
        default_factory=list, description="Product channel: the calls after the guards, and the tool server's answers."
    )
    guard_events: list[GuardEvent] = Field(default_factory=list, description="Product channel: one per guard that ran.")
    prompted_by: str | None = Field(
        None, description="Product channel: the guard whose re-prompt or retry made this turn."
    )
    final_answer: str | None = Field(
        None, description="Product channel: the answer the product gave (on the last turn)."
    )
    category: str | None = Field(None, description="A BFCL cell: its category (the cell axis; None elsewhere).")
    bfcl: BfclVerdict | None = Field(None, description="A BFCL case: BFCL's checker's verdict on this turn.")
