"""The model channel beside the product channel: per-case majority verdicts and the side-by-side table.

Records are grouped by (stack_config, model, tools_mode, channel, without, suite); the cells of a group differ
only by `sample`. Within a group a case is a seed, and its samples are its runs (one per cell). Each applicable
dimension of a case gets one verdict by majority vote over the samples that could vote (see core/scoring.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from orchestrator.core.scoring import (
    CHANNELS,
    DIMENSIONS,
    Expectation,
    RunScore,
    applicable_dimensions,
    score_run,
    vote_case,
)

CaseId = tuple[str | None, str]  # (suite, seed)


class GroupKey(NamedTuple):
    """The records of one channel of one cell family on one suite."""

    stack_config: str | None
    model: str
    tools_mode: str
    channel: str
    without: str | None
    suite: str | None


class CaseVerdict(BaseModel):
    """One case's majority verdict on one dimension in one channel group."""

    model_config = ConfigDict(frozen=True)

    stack_config: str | None
    model: str
    tools_mode: str
    channel: str
    without: str | None
    suite: str | None
    seed: str
    dimension: str
    passed: bool
    tie: bool
    n_pass: int
    n_votes: int
    n_samples: int
    unscored: bool
    core: bool

    @property
    def group(self) -> GroupKey:
        return GroupKey(self.stack_config, self.model, self.tools_mode, self.channel, self.without, self.suite)

    @property
    def case(self) -> CaseId:
        return (self.suite, self.seed)


class ChannelRow(BaseModel):
    """One group's figures on one dimension: over every applicable case, and over the core cases."""

    model_config = ConfigDict(frozen=True)

    stack_config: str | None
    model: str
    tools_mode: str
    channel: str
    without: str | None
    suite: str | None
    dimension: str
    passes: int
    applicable: int
    ties: int
    unscored: int
    core_passes: int
    core_applicable: int
    core_ties: int
    core_unscored: int


def group_key(record: Mapping[str, Any]) -> GroupKey:
    return GroupKey(
        record.get("stack_config"),
        str(record["model"]),
        str(record["tools_mode"]),
        str(record["channel"]),
        record.get("without"),
        record.get("suite"),
    )


def case_runs(records: Iterable[Mapping[str, Any]]) -> dict[GroupKey, dict[str, dict[str, list[Mapping[str, Any]]]]]:
    """group -> seed -> cell_id -> that sample's records. Records outside the two channels are left out."""
    runs: dict[GroupKey, dict[str, dict[str, list[Mapping[str, Any]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for record in records:
        if record.get("channel") in CHANNELS:
            runs[group_key(record)][str(record["seed"])][str(record["cell_id"])].append(record)
    return runs


def cases_without_expectation(
    records: Iterable[Mapping[str, Any]], expectations: Mapping[CaseId, Expectation]
) -> list[CaseId]:
    """Channel cases that `case_verdicts` cannot score: no expectation is given for them."""
    missing = {
        (group.suite, seed)
        for group, seeds in case_runs(records).items()
        for seed in seeds
        if (group.suite, seed) not in expectations
    }
    return sorted(missing, key=lambda case: (case[0] or "", case[1]))


def case_verdicts(
    records: Iterable[Mapping[str, Any]],
    expectations: Mapping[CaseId, Expectation],
    core: Collection[CaseId] = frozenset(),
) -> list[CaseVerdict]:
    """Every channel case's verdict on each dimension that applies to it. Cases without an expectation are
    left out (`cases_without_expectation` names them)."""
    verdicts: list[CaseVerdict] = []
    for group, seeds in sorted(case_runs(records).items(), key=lambda item: _sort_key(item[0])):
        for seed, samples in sorted(seeds.items()):
            expect = expectations.get((group.suite, seed))
            if expect is None:
                continue
            scored = [score_run(run, expect, group.channel) for run in samples.values()]
            verdicts += _verdicts_of_case(group, seed, expect, scored, (group.suite, seed) in core)
    return verdicts


def _verdicts_of_case(
    group: GroupKey, seed: str, expect: Expectation, scored: list[RunScore], is_core: bool
) -> list[CaseVerdict]:
    found = []
    for dimension in applicable_dimensions(expect, group.channel):
        vote = vote_case(scored, dimension)
        found.append(
            CaseVerdict(
                **group._asdict(),
                seed=seed,
                dimension=dimension,
                passed=vote.passed,
                tie=vote.tie,
                n_pass=vote.n_pass,
                n_votes=vote.n_votes,
                n_samples=len(scored),
                unscored=vote.unscored,
                core=is_core,
            )
        )
    return found


def _sort_key(group: GroupKey) -> tuple[str, ...]:
    return tuple("" if value is None else str(value) for value in group)


def _counts(verdicts: list[CaseVerdict]) -> tuple[int, int, int, int]:
    """(passes, applicable, ties, unscored) over these verdicts."""
    return (
        sum(v.passed for v in verdicts),
        len(verdicts),
        sum(v.tie for v in verdicts),
        sum(v.unscored for v in verdicts),
    )


def channel_table(verdicts: Iterable[CaseVerdict], core: Collection[CaseId] | None = None) -> list[ChannelRow]:
    """Per group and dimension: passes over applicable cases, ties and unscored cases, also on the core subset
    (`core` given: those cases; None: the cases whose verdicts say core)."""
    grouped: dict[tuple[GroupKey, str], list[CaseVerdict]] = defaultdict(list)
    for verdict in verdicts:
        grouped[(verdict.group, verdict.dimension)].append(verdict)
    rows = []
    for (group, dimension), found in sorted(grouped.items(), key=lambda i: (_sort_key(i[0][0]), _dim_order(i[0][1]))):
        in_core = [v for v in found if (v.case in core if core is not None else v.core)]
        passes, applicable, ties, unscored = _counts(found)
        core_passes, core_applicable, core_ties, core_unscored = _counts(in_core)
        rows.append(
            ChannelRow(
                **group._asdict(),
                dimension=dimension,
                passes=passes,
                applicable=applicable,
                ties=ties,
                unscored=unscored,
                core_passes=core_passes,
                core_applicable=core_applicable,
                core_ties=core_ties,
                core_unscored=core_unscored,
            )
        )
    return rows


def _dim_order(dimension: str) -> int:
    return DIMENSIONS.index(dimension) if dimension in DIMENSIONS else len(DIMENSIONS)


def format_cell(row: ChannelRow | None) -> str:
    """ "passes/applicable", with the core figures in the same cell: "9/12 (core 6/8)"; "—" when nothing applies."""
    if row is None or row.applicable == 0:
        return "—"
    text = f"{row.passes}/{row.applicable}"
    if row.core_applicable:
        text += f" (core {row.core_passes}/{row.core_applicable})"
    return text


def _notes(rows: Iterable[ChannelRow], field: str) -> str:
    parts = [f"{row.channel} {row.dimension} {getattr(row, field)}" for row in rows if getattr(row, field)]
    return ", ".join(parts) or "—"


MARKDOWN_COLUMNS = ("stack", "model", "mode", "suite")
MARKDOWN_COLUMNS += tuple(f"{channel} {dimension}" for channel in CHANNELS for dimension in DIMENSIONS)
MARKDOWN_COLUMNS += ("ties", "unscored")


def render_markdown(rows: Iterable[ChannelRow]) -> str:
    """The side-by-side table: one line per (stack_config, model, tools_mode, suite), the model channel's
    tool / args / answer beside the product channel's. Ablation rows (`without` set) are not in it."""
    lines: dict[tuple[Any, ...], dict[tuple[str, str], ChannelRow]] = defaultdict(dict)
    for row in rows:
        if row.without is None:
            lines[(row.stack_config, row.model, row.tools_mode, row.suite)][(row.channel, row.dimension)] = row
    out = ["| " + " | ".join(MARKDOWN_COLUMNS) + " |", "|" + "---|" * len(MARKDOWN_COLUMNS)]
    for key in sorted(lines, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        cells = lines[key]
        figures = [format_cell(cells.get((c, d))) for c in CHANNELS for d in DIMENSIONS]
        names = ["—" if value is None else str(value) for value in key]
        ordered = [cells[c, d] for c in CHANNELS for d in DIMENSIONS if (c, d) in cells]
        notes = [_notes(ordered, "ties"), _notes(ordered, "unscored")]
        out.append("| " + " | ".join([*names, *figures, *notes]) + " |")
    return "\n".join(out) + "\n"
