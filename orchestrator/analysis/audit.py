"""Audit trajectories written by other harnesses: recount what a folded error text did to the figures.

Some harnesses (the LOCA-bench ReAct runner among them) fold a refused request or exhausted retries into an
ordinary assistant message, `Error: Failed to get response after multiple retries.`, and keep no error type.
Analysis then counts that turn as "the model did not call a tool". This module reads such trajectories,
labels every assistant turn with the core classifier (core/classify.py, the message presented as an HTTP 200
chat-completion body), and computes the figures twice:

- naive: every turn as classified (a folded error is prose, so it sits in the fidelity denominator);
- corrected: a turn whose content holds the generic error text is `non_response` (`audit:generic_error`):
  the harness says no model output arrived, so it never enters the denominator (SPEC §5).

Inputs: a LOCA-bench run directory (`tasks/<task>/state<N>/trajectory.json`, one seed per state), a `.json`
file (a message list, or an object with `messages` and optionally `tools`: one seed) or a `.jsonl` file
(one message per line: one seed; or one trajectory per line: one seed per line). Bad input raises
`InputError` naming the file (and line) and what is wrong. Pure apart from reading the input files.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from orchestrator.core.classify import classify, tools_by_name
from orchestrator.core.jsonl import InputError
from orchestrator.core.replyfacts import content_text
from orchestrator.core.stats import DEFAULT_BOOTSTRAP, BootstrapSettings, bootstrap_mean_interval
from orchestrator.core.types import INELIGIBLE_OUTCOMES, Outcome, ToolsMode

DEFAULT_PATTERN = "Failed to get response after multiple retries."
GENERIC_ERROR_DETAIL = "audit:generic_error"
LOCA_GLOB = "*/state*/trajectory.json"  # under `tasks/`: one state = one seed (LOCA-bench README, Output Structure)
TRAJECTORY_FORM = "trajectory"
MESSAGE_FORM = "message"


@dataclass(frozen=True)
class Trajectory:
    """One seed as read from disk. `tools` is None when the file itself lists none."""

    seed: str
    source: str  # file, or file:line for JSONL
    messages: list[dict[str, Any]]
    tools: list[Any] | None


# ---------------------------------------------------------------- reading


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _parse_json(text: str, where: str) -> Any:
    """JSON or one InputError; a text that stops before its value ends is reported as truncated."""
    if not text.strip():
        raise InputError(f"{where}: empty (no JSON)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Cut mid-value, or mid-string (strict JSON strings hold no raw newline: only the end stops one early).
        ends_early = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "truncated JSON (the text ends early)" if ends_early else "bad JSON"
        raise InputError(f"{where}: {kind}: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where}: bad JSON: {exc}") from exc


def check_tools(tools: Any, where: str, field: str = "'tools'") -> list[Any]:
    """A list of OpenAI tool objects, each naming its function; anything else is an InputError (the classifier
    would silently skip a malformed entry and count every call to it as hallucinated)."""
    if not isinstance(tools, list):
        raise InputError(f"{where}: {field} is not a list (got {type(tools).__name__})")
    named = tools_by_name(tools)
    for index, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or function.get("name") not in named:
            raise InputError(f"{where}: {field} entry {index} is not a tool object with a function name")
    return tools


def load_tools_file(path: Path) -> list[Any]:
    """`--tools FILE`: a JSON list of OpenAI tool objects, or an object `{"tools": [...]}`."""
    data = _parse_json(_read_text(path), str(path))
    if isinstance(data, Mapping):
        if "tools" not in data:
            raise InputError(f"{path}: expected a JSON list of tools or an object with a 'tools' list")
        data = data["tools"]
    tools = check_tools(data, str(path), "the tools")
    if not tools:
        raise InputError(f"{path}: lists no tools")
    return tools


def _check_message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise InputError(f"{where}: not a message object (got {type(message).__name__})")
    if not isinstance(message.get("role"), str):
        raise InputError(f"{where}: message has no 'role'")
    return message


def _trajectory(data: Any, seed: str, where: str) -> Trajectory:
    """A message list, or an object with `messages` (and optionally `tools`), as one seed."""
    if isinstance(data, list):
        messages, tools = data, None
    elif isinstance(data, dict):
        if "messages" not in data:
            # LOCA-bench writes {"error": ..., "total_steps": N} in place of a run that crashed.
            crashed = f" (it records a crashed run: error={data['error']!r})" if "error" in data else ""
            raise InputError(f"{where}: no 'messages' list{crashed}")
        messages, tools = data["messages"], data.get("tools")
        if not isinstance(messages, list):
            raise InputError(f"{where}: 'messages' is not a list (got {type(messages).__name__})")
        if tools is not None:
            tools = check_tools(tools, where)
    else:
        raise InputError(f"{where}: expected a message list or an object with 'messages' (got {type(data).__name__})")
    checked = [_check_message(m, f"{where}: messages[{i}]") for i, m in enumerate(messages)]
    return Trajectory(seed=seed, source=where, messages=checked, tools=tools or None)


def _loca_files(root: Path) -> list[Path]:
    """`root/tasks/*/state*/trajectory.json`, or the same under `root` when it is the `tasks` folder itself."""
    tasks = root / "tasks" if (root / "tasks").is_dir() else root
    return sorted(p for p in tasks.glob(LOCA_GLOB) if p.is_file())


def _load_loca(root: Path) -> list[Trajectory]:
    files = _loca_files(root)
    if not files:
        raise InputError(f"{root}: no trajectory files (expected tasks/<task>/state<N>/trajectory.json)")
    loaded = []
    for path in files:
        seed = f"{path.parent.parent.name}/{path.parent.name}"  # <task>/<state>
        loaded.append(_trajectory(_parse_json(_read_text(path), str(path)), seed, str(path)))
    return loaded


def _line_form(data: Any) -> str | None:
    """Which JSONL form a line is: one message, one trajectory, or neither."""
    if isinstance(data, list) or (isinstance(data, dict) and "messages" in data):
        return TRAJECTORY_FORM
    if isinstance(data, dict) and "role" in data:
        return MESSAGE_FORM
    return None


def _load_jsonl(path: Path) -> list[Trajectory]:
    """The first non-empty line decides the form; a line of the other form is an error, never a guess."""
    lines = [(n, line) for n, line in enumerate(_read_text(path).splitlines(), start=1) if line.strip()]
    if not lines:
        raise InputError(f"{path}: empty (no JSON lines)")
    form: str | None = None
    first = lines[0][0]
    trajectories: list[Trajectory] = []
    messages: list[dict[str, Any]] = []
    for number, line in lines:
        where = f"{path}:{number}"
        data = _parse_json(line, where)
        this = _line_form(data)
        if this is None:
            raise InputError(f"{where}: neither a message (an object with 'role') nor a trajectory")
        form = form or this
        if this != form:
            raise InputError(f"{where}: mixes forms: line {first} holds one {form}, this line holds a {this}")
        if form == MESSAGE_FORM:
            messages.append(_check_message(data, where))
        else:
            trajectories.append(_trajectory(data, f"{path.name}:{number}", where))
    if form == MESSAGE_FORM:
        return [Trajectory(seed=path.name, source=str(path), messages=messages, tools=None)]
    return trajectories


def load_trajectories(path: Path) -> list[Trajectory]:
    """Every seed under PATH: a LOCA-bench run directory, a `.jsonl` file, or a `.json` file."""
    if path.is_dir():
        return _load_loca(path)
    if path.suffix.lower() == ".jsonl":
        return _load_jsonl(path)
    return [_trajectory(_parse_json(_read_text(path), str(path)), path.name, str(path))]


# ---------------------------------------------------------------- labelling


@dataclass(frozen=True)
class TurnLabel:
    """One assistant turn, labelled both ways."""

    seed: str
    turn: int  # index among the seed's assistant messages
    generic_error: bool
    naive: Outcome
    naive_detail: str | None
    corrected: Outcome
    corrected_detail: str | None


def is_generic_error(message: Mapping[str, Any], pattern: str) -> bool:
    """The harness's folded error text, and no call beside it: a message with tool_calls came from a model."""
    text = (content_text(message.get("content")) or "").strip()
    return bool(pattern.strip()) and pattern.strip() in text and not message.get("tool_calls")


def label_turns(trajectory: Trajectory, tools: Sequence[Any], mode: ToolsMode, pattern: str) -> list[TurnLabel]:
    """Classify each assistant message as the final HTTP 200 answer it was (the classifier, not a second one)."""
    labels = []
    assistant = [m for m in trajectory.messages if m.get("role") == "assistant"]
    for turn, message in enumerate(assistant):
        finish = message.get("finish_reason")  # rarely stored; unknown rather than invented
        body = {"choices": [{"message": message, "finish_reason": finish if isinstance(finish, str) else None}]}
        verdict = classify(refusals=(), mode=mode, tools=tools, http_status=200, body=body)
        generic = is_generic_error(message, pattern)
        corrected = (Outcome.NON_RESPONSE, GENERIC_ERROR_DETAIL) if generic else (verdict.outcome, verdict.detail)
        labels.append(TurnLabel(trajectory.seed, turn, generic, verdict.outcome, verdict.detail, *corrected))
    return labels


# ---------------------------------------------------------------- figures


class Figures(BaseModel):
    """One way of counting: per-seed mean with its seed-level bootstrap interval, and the turn-pooled figure."""

    per_seed_mean: float | None
    ci_low: float | None
    ci_high: float | None
    pooled: float | None
    n_defined_seeds: int
    n_valid: int
    n_eligible: int


class SeedRow(BaseModel):
    seed: str
    source: str
    tools_from: str  # "trajectory" or "file"
    n_turns: int
    n_generic_error: int
    naive_valid: int
    naive_eligible: int
    corrected_valid: int
    corrected_eligible: int

    @property
    def naive(self) -> float | None:
        return self.naive_valid / self.naive_eligible if self.naive_eligible else None

    @property
    def corrected(self) -> float | None:
        return self.corrected_valid / self.corrected_eligible if self.corrected_eligible else None


def _counts(outcomes: Sequence[Outcome]) -> tuple[int, int]:
    """(valid, eligible): rejected and non-response turns say nothing about the model."""
    eligible = [o for o in outcomes if o not in INELIGIBLE_OUTCOMES]
    return sum(o is Outcome.VALID_CALL for o in eligible), len(eligible)


def figures(counts: Sequence[tuple[int, int]], settings: BootstrapSettings = DEFAULT_BOOTSTRAP) -> Figures:
    """From per-seed (valid, eligible) in seed-id order (the order core/stats.cell_stats resamples in, so the
    same turns give the same interval there). A seed with no eligible turn is undefined and left out."""
    defined = [Fraction(valid, eligible) for valid, eligible in counts if eligible]
    n_valid = sum(valid for valid, _ in counts)
    n_eligible = sum(eligible for _, eligible in counts)
    if not defined:
        empty = {"per_seed_mean": None, "ci_low": None, "ci_high": None, "pooled": None}
        return Figures(**empty, n_defined_seeds=0, n_valid=n_valid, n_eligible=n_eligible)
    low, high = bootstrap_mean_interval(np.array([float(f) for f in defined]), settings)
    return Figures(
        per_seed_mean=float(sum(defined, Fraction(0)) / len(defined)),  # exact, then rounded once
        ci_low=low,
        ci_high=high,
        pooled=n_valid / n_eligible,
        n_defined_seeds=len(defined),
        n_valid=n_valid,
        n_eligible=n_eligible,
    )


class AuditReport(BaseModel):
    path: str
    pattern: str
    mode: ToolsMode
    tools_source: str
    bootstrap: BootstrapSettings
    naive: Figures
    corrected: Figures
    outcomes_naive: dict[str, int]
    outcomes_corrected: dict[str, int]
    seeds: list[SeedRow]

    @property
    def n_assistant_turns(self) -> int:
        return sum(row.n_turns for row in self.seeds)

    @property
    def n_generic_error(self) -> int:
        return sum(row.n_generic_error for row in self.seeds)

    def to_json(self) -> dict[str, Any]:
        """The one object `orchestrate audit --json` prints."""
        return {
            "path": self.path,
            "n_seeds": len(self.seeds),
            "n_assistant_turns": self.n_assistant_turns,
            "n_generic_error": self.n_generic_error,
            "naive": self.naive.model_dump(),
            "corrected": self.corrected.model_dump(),
            "outcomes": {"naive": self.outcomes_naive, "corrected": self.outcomes_corrected},
            "pattern": self.pattern,
            "mode": self.mode.value,
            "tools_source": self.tools_source,
            "bootstrap": {"resamples": self.bootstrap.resamples, "rng_seed": self.bootstrap.rng_seed},
            "seeds": [{**row.model_dump(), "naive": row.naive, "corrected": row.corrected} for row in self.seeds],
        }


def _tools_source(rows: Sequence[SeedRow], tools_file: Path | None) -> str:
    """Where the offered tools came from: every file's own list, the --tools file, or both (per seed)."""
    kinds = {row.tools_from for row in rows}
    parts = (["trajectory"] if "trajectory" in kinds else []) + ([f"file:{tools_file}"] if "file" in kinds else [])
    return "+".join(parts) or "none"


def _seed_row(trajectory: Trajectory, turns: Sequence[TurnLabel]) -> SeedRow:
    naive_valid, naive_eligible = _counts([t.naive for t in turns])
    corrected_valid, corrected_eligible = _counts([t.corrected for t in turns])
    return SeedRow(
        seed=trajectory.seed,
        source=trajectory.source,
        tools_from="trajectory" if trajectory.tools else "file",
        n_turns=len(turns),
        n_generic_error=sum(t.generic_error for t in turns),
        naive_valid=naive_valid,
        naive_eligible=naive_eligible,
        corrected_valid=corrected_valid,
        corrected_eligible=corrected_eligible,
    )


def _outcome_counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    counted = Counter(outcomes)
    return {outcome.value: counted[outcome] for outcome in Outcome}  # all six, in a fixed order


def audit(
    path: Path,
    *,
    pattern: str = DEFAULT_PATTERN,
    tools_file: Path | None = None,
    mode: ToolsMode | str = ToolsMode.NATIVE,
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
) -> AuditReport:
    """Read every seed under PATH, label its assistant turns, and count them naively and corrected."""
    if not pattern.strip():
        raise InputError("--pattern: empty (it would match every assistant turn)")
    mode = ToolsMode(mode)
    fallback = load_tools_file(tools_file) if tools_file is not None else None
    trajectories = sorted(load_trajectories(path), key=lambda t: t.seed)  # seed-id order, as core/stats
    rows, labels = [], []
    for trajectory in trajectories:
        tools = trajectory.tools or fallback
        if not tools:
            raise InputError(f"{trajectory.source}: no tools: the file lists none and no --tools FILE was given")
        turns = label_turns(trajectory, tools, mode, pattern)
        labels += turns
        rows.append(_seed_row(trajectory, turns))
    return AuditReport(
        path=str(path),
        pattern=pattern,
        mode=mode,
        tools_source=_tools_source(rows, tools_file),
        bootstrap=settings,
        naive=figures([(r.naive_valid, r.naive_eligible) for r in rows], settings),
        corrected=figures([(r.corrected_valid, r.corrected_eligible) for r in rows], settings),
        outcomes_naive=_outcome_counts([t.naive for t in labels]),
        outcomes_corrected=_outcome_counts([t.corrected for t in labels]),
        seeds=rows,
    )
