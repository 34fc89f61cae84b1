"""Audit trajectories written by other harnesses: recount what a folded error text did to the figures.

Some harnesses (the LOCA-bench ReAct runner among them) fold a failed request into an ordinary assistant
message and keep no error type: `Error: Failed to get response after multiple retries.` when the retries ran
out, `Error: Request failed with 400 status. Response: ...` when the server refused the request. Analysis then
counts that turn as "the model did not call a tool". This module reads such trajectories (analysis/
trajectories.py), labels every assistant turn with the core classifier (core/classify.py, the message presented
as an HTTP 200 chat-completion body), and computes the figures twice:

- naive: every turn as classified (a folded error is prose, so it sits in the fidelity denominator);
- corrected: a turn whose content holds a `--pattern` text is `non_response` (`audit:generic_error`: no model
  output arrived), one holding a `--rejected-pattern` text is `rejected_request` (`audit:folded_refusal`: the
  server refused the request); neither enters the denominator (SPEC §5). A message with tool calls is never
  folded, and a rejected pattern wins when a message holds both kinds.

A seed's fidelity is core/stats.per_seed_fidelity's, and the mean and interval are computed as
core/stats.cell_stats computes them. Pure apart from reading the input files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from orchestrator.analysis.audit.trajectories import Trajectory, load_tools_file, load_trajectories
from orchestrator.core.classify import classify
from orchestrator.core.jsonl import InputError
from orchestrator.core.replyfacts import content_text
from orchestrator.core.stats import DEFAULT_BOOTSTRAP, BootstrapSettings, bootstrap_mean_interval, per_seed_fidelity
from orchestrator.core.types import INELIGIBLE_OUTCOMES, Outcome, ToolsMode

DEFAULT_PATTERN = "Failed to get response after multiple retries."
GENERIC_ERROR_DETAIL = "audit:generic_error"
FOLDED_REFUSAL_DETAIL = "audit:folded_refusal"
FOLDED_DETAILS = {Outcome.NON_RESPONSE: GENERIC_ERROR_DETAIL, Outcome.REJECTED_REQUEST: FOLDED_REFUSAL_DETAIL}


# ---------------------------------------------------------------- labelling


@dataclass(frozen=True)
class FoldedPatterns:
    """The harness's folded error texts: `non_response` ones (`--pattern`) and `rejected_request` ones."""

    non_response: tuple[str, ...] = (DEFAULT_PATTERN,)
    rejected: tuple[str, ...] = ()

    @classmethod
    def checked(cls, non_response: Iterable[str], rejected: Iterable[str]) -> FoldedPatterns:
        """Stripped; an empty pattern (it would match every assistant turn) is an InputError."""
        lists = {"--pattern": [p.strip() for p in non_response], "--rejected-pattern": [p.strip() for p in rejected]}
        for option, patterns in lists.items():
            if not all(patterns):
                raise InputError(f"{option}: empty (it would match every assistant turn)")
        return cls(tuple(lists["--pattern"]), tuple(lists["--rejected-pattern"]))

    def outcome(self, message: Mapping[str, Any]) -> Outcome | None:
        """What a folded error text in MESSAGE stands for, or None: a message with tool_calls came from a model."""
        if message.get("tool_calls"):
            return None
        text = (content_text(message.get("content")) or "").strip()
        if any(pattern in text for pattern in self.rejected):
            return Outcome.REJECTED_REQUEST
        if any(pattern in text for pattern in self.non_response):
            return Outcome.NON_RESPONSE
        return None


@dataclass(frozen=True)
class TurnLabel:
    """One assistant turn, labelled both ways. `folded` is what its folded error text was relabelled to."""

    seed: str
    turn: int  # index among the seed's assistant messages
    folded: Outcome | None
    naive: Outcome
    naive_detail: str | None
    corrected: Outcome
    corrected_detail: str | None

    @property
    def generic_error(self) -> bool:
        """The turn holds a folded error text of either kind."""
        return self.folded is not None


def label_turns(
    trajectory: Trajectory, tools: Sequence[Any], mode: ToolsMode, patterns: FoldedPatterns
) -> list[TurnLabel]:
    """Classify each assistant message as the final HTTP 200 answer it was (the classifier, not a second one)."""
    labels = []
    assistant = [m for m in trajectory.messages if m.get("role") == "assistant"]
    for turn, message in enumerate(assistant):
        finish = message.get("finish_reason")  # rarely stored; unknown rather than invented
        body = {"choices": [{"message": message, "finish_reason": finish if isinstance(finish, str) else None}]}
        verdict = classify(refusals=(), mode=mode, tools=tools, http_status=200, body=body)
        folded = patterns.outcome(message)
        corrected = (folded, FOLDED_DETAILS[folded]) if folded is not None else (verdict.outcome, verdict.detail)
        labels.append(TurnLabel(trajectory.seed, turn, folded, verdict.outcome, verdict.detail, *corrected))
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
    n_generic_error: int  # folded error texts of both kinds
    n_folded: dict[str, int]  # {"non_response": n, "rejected_request": n}
    naive_valid: int
    naive_eligible: int
    corrected_valid: int
    corrected_eligible: int
    naive: float | None  # core/stats.per_seed_fidelity; None = undefined (no eligible turn)
    corrected: float | None


def _counts(outcomes: Iterable[Outcome]) -> tuple[int, int]:
    """(valid, eligible): rejected and non-response turns say nothing about the model."""
    eligible = [o for o in outcomes if o not in INELIGIBLE_OUTCOMES]
    return sum(o is Outcome.VALID_CALL for o in eligible), len(eligible)


def _folded_counts(turns: Iterable[TurnLabel]) -> dict[str, int]:
    counted = Counter(t.folded for t in turns)
    return {outcome.value: counted[outcome] for outcome in FOLDED_DETAILS}


def figures(
    per_seed: Mapping[str, float | None], counts: tuple[int, int], settings: BootstrapSettings = DEFAULT_BOOTSTRAP
) -> Figures:
    """From core/stats.per_seed_fidelity's {seed: fidelity} (seed-id order, the order core/stats.cell_stats
    resamples in, so the same turns give the same mean and interval there) and the pooled (valid, eligible).
    A seed with no eligible turn is undefined and left out."""
    defined = np.asarray([value for value in per_seed.values() if value is not None], dtype=float)
    n_valid, n_eligible = counts
    if not defined.size:
        empty = {"per_seed_mean": None, "ci_low": None, "ci_high": None, "pooled": None}
        return Figures(**empty, n_defined_seeds=0, n_valid=n_valid, n_eligible=n_eligible)
    low, high = bootstrap_mean_interval(defined, settings)
    return Figures(
        per_seed_mean=float(defined.mean()),
        ci_low=low,
        ci_high=high,
        pooled=n_valid / n_eligible,
        n_defined_seeds=int(defined.size),
        n_valid=n_valid,
        n_eligible=n_eligible,
    )


class AuditReport(BaseModel):
    path: str
    patterns: list[str]
    rejected_patterns: list[str]
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

    @property
    def n_folded(self) -> dict[str, int]:
        return {kind.value: sum(row.n_folded[kind.value] for row in self.seeds) for kind in FOLDED_DETAILS}

    def to_json(self) -> dict[str, Any]:
        """The one object `orchestrate audit --json` prints."""
        return {
            "path": self.path,
            "n_seeds": len(self.seeds),
            "n_assistant_turns": self.n_assistant_turns,
            "n_generic_error": self.n_generic_error,
            "n_folded": self.n_folded,
            "naive": self.naive.model_dump(),
            "corrected": self.corrected.model_dump(),
            "outcomes": {"naive": self.outcomes_naive, "corrected": self.outcomes_corrected},
            "patterns": self.patterns,
            "rejected_patterns": self.rejected_patterns,
            "mode": self.mode.value,
            "tools_source": self.tools_source,
            "bootstrap": {"resamples": self.bootstrap.resamples, "rng_seed": self.bootstrap.rng_seed},
            "seeds": [row.model_dump() for row in self.seeds],
        }


def _tools_source(rows: Sequence[SeedRow], tools_file: Path | None) -> str:
    """Where the offered tools came from: every file's own list, the --tools file, or both (per seed)."""
    kinds = {row.tools_from for row in rows}
    parts = (["trajectory"] if "trajectory" in kinds else []) + ([f"file:{tools_file}"] if "file" in kinds else [])
    return "+".join(parts) or "none"


def _per_seed(labels: Sequence[TurnLabel], which: str) -> dict[str, float | None]:
    """{seed: fidelity} of the naive or the corrected labels, by core/stats' one definition."""
    return per_seed_fidelity([t.seed for t in labels], [getattr(t, which).value for t in labels])


def _seed_rows(
    labelled: Sequence[tuple[Trajectory, list[TurnLabel]]],
    naive: Mapping[str, float | None],
    corrected: Mapping[str, float | None],
) -> list[SeedRow]:
    rows = []
    for trajectory, turns in labelled:
        naive_valid, naive_eligible = _counts(t.naive for t in turns)
        corrected_valid, corrected_eligible = _counts(t.corrected for t in turns)
        rows.append(
            SeedRow(
                seed=trajectory.seed,
                source=trajectory.source,
                tools_from="trajectory" if trajectory.tools else "file",
                n_turns=len(turns),
                n_generic_error=sum(t.generic_error for t in turns),
                n_folded=_folded_counts(turns),
                naive_valid=naive_valid,
                naive_eligible=naive_eligible,
                corrected_valid=corrected_valid,
                corrected_eligible=corrected_eligible,
                naive=naive.get(trajectory.seed),  # a seed without assistant turns is absent: undefined
                corrected=corrected.get(trajectory.seed),
            )
        )
    return rows


def _outcome_counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    counted = Counter(outcomes)
    return {outcome.value: counted[outcome] for outcome in Outcome}  # all six, in a fixed order


def _label_all(
    path: Path, tools_file: Path | None, mode: ToolsMode, patterns: FoldedPatterns
) -> list[tuple[Trajectory, list[TurnLabel]]]:
    """Every seed under PATH (in seed-id order, as core/stats), with its labelled assistant turns."""
    fallback = load_tools_file(tools_file) if tools_file is not None else None
    labelled = []
    for trajectory in sorted(load_trajectories(path), key=lambda t: t.seed):
        tools = trajectory.tools or fallback
        if not tools:
            raise InputError(f"{trajectory.source}: no tools: the file lists none and no --tools FILE was given")
        labelled.append((trajectory, label_turns(trajectory, tools, mode, patterns)))
    return labelled


def audit(
    path: Path,
    *,
    patterns: Sequence[str] = (DEFAULT_PATTERN,),
    rejected_patterns: Sequence[str] = (),
    tools_file: Path | None = None,
    mode: ToolsMode | str = ToolsMode.NATIVE,
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
) -> AuditReport:
    """Read every seed under PATH, label its assistant turns, and count them naively and corrected."""
    folded = FoldedPatterns.checked(patterns, rejected_patterns)
    mode = ToolsMode(mode)
    labelled = _label_all(path, tools_file, mode, folded)
    labels = [turn for _, turns in labelled for turn in turns]
    naive, corrected = _per_seed(labels, "naive"), _per_seed(labels, "corrected")
    rows = _seed_rows(labelled, naive, corrected)
    return AuditReport(
        path=str(path),
        patterns=list(folded.non_response),
        rejected_patterns=list(folded.rejected),
        mode=mode,
        tools_source=_tools_source(rows, tools_file),
        bootstrap=settings,
        naive=figures(naive, _counts(t.naive for t in labels), settings),
        corrected=figures(corrected, _counts(t.corrected for t in labels), settings),
        outcomes_naive=_outcome_counts([t.naive for t in labels]),
        outcomes_corrected=_outcome_counts([t.corrected for t in labels]),
        seeds=rows,
    )
