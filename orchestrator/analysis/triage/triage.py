"""`orchestrate triage`: why is a cell low? One verdict per low cell, with its evidence, from a stored run only.

A cell is low when its per-seed fidelity is below the threshold (default 50%) or undefined. The checks run in
a fixed order and stop at the first cause found (SPEC §8, extended by the provenance a cell records):

1. refused      - the server refused most of the cell's requests (4xx or a refusal signature);
2. no_response  - most requests got no usable answer (timeouts, 5xx, retries exhausted), or it never started;
3. no_parser    - the mode sends `tools=` and the stack config has no tool-call parser (flags);
   A BFCL cell is low by BFCL's accuracy as served (analysis/triage/triagebfcl.py).
4. parser_loss  - in a mode the stack parses, most failed turns hold a call the stack did not parse
                  (`text_call_recoverable`, or the stack's parser rejected the output), with the raw-template
                  cell beside it (same template, harness-rendered, reference parser) where the run has one;
5. template_differs / sampling_differs / truncated - a peer cell (same model and mode, another stack config)
   scores at least `PEER_GAP` higher and the prompt it got differs: the canary prompt each stack rendered, the
   sampler each applied, or the server silently dropped part of this cell's prompt;
6. model        - none of the above: the model's own answers, with what was ruled out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator.analysis.report.report import load_run, long_table
from orchestrator.analysis.triage.triagebfcl import bfcl_mean, bfcl_parser_loss
from orchestrator.analysis.triage.triagepeers import (
    agreement,
    canary_for,
    canary_hunk,
    effective_sampler,
    first_answers,
    first_turn_prompts,
    known,
)
from orchestrator.analysis.triage.triagetext import summary
from orchestrator.core.modes import mode_of
from orchestrator.core.replyfacts import (
    PROMPT_COUNT_UNAVAILABLE_FLAG,
    PROMPT_TRUNCATED_FLAG,
    TEMPLATE_FAILURE_DETAIL,
)
from orchestrator.core.types import INELIGIBLE_OUTCOMES, Outcome
from orchestrator.runner.store.rundir import open_run
from orchestrator.runner.store.runstore import StoreError, counted_turns, turn_key

Verdict = Literal[
    "refused", "no_response", "no_parser", "parser_loss", "template_differs", "sampling_differs", "truncated", "model"
]
VERDICTS: tuple[str, ...] = Verdict.__args__  # type: ignore[attr-defined]
DEFAULT_THRESHOLD = 0.5
MAJORITY = 0.5  # a cause explains a cell when it covers at least this share of the turns in question
PEER_GAP = 0.10  # a peer must score this much higher for a prompt difference to be a candidate cause
SERVER_PARSER_REJECTED = "parse:server_rejected_output"
REQUIRED_CELL_FIELDS = ("cell_id", "stack", "stack_label", "model", "tools_mode")
INELIGIBLE = tuple(outcome.value for outcome in INELIGIBLE_OUTCOMES)
# The verdict each ineligible outcome gives when it makes up most of a cell.
SILENT_VERDICTS = {"refused": Outcome.REJECTED_REQUEST.value, "no_response": Outcome.NON_RESPONSE.value}


class TriageError(ValueError):
    """The run directory cannot be read (named)."""


@dataclass
class CellTriage:
    cell_id: str
    stack_config: str
    model: str
    tools_mode: str
    per_seed_mean: float | None
    ci_low: float | None
    ci_high: float | None
    n_seeds: int
    verdict: str = "model"
    evidence: dict[str, Any] = field(default_factory=dict)
    ruled_out: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return _no_nan({**self.__dict__, "summary": summary(self.verdict, self.evidence)})


def _no_nan(value: Any) -> Any:
    """Strict JSON: pandas writes an undefined figure as NaN; it leaves here as null."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {key: _no_nan(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_no_nan(item) for item in value]
    return value


@dataclass(frozen=True)
class CellFacts:
    """What triage reads about one cell: its config record, its statistics row, its counted turns."""

    config: dict[str, Any]
    row: dict[str, Any]
    turns: list[dict[str, Any]]

    @property
    def mean(self) -> float | None:
        if self.config.get("category"):  # a BFCL cell: BFCL's accuracy as served
            return bfcl_mean(self.config, self.turns)
        value = self.row.get("per_seed_mean")
        return None if value is None or value != value else float(value)  # NaN (undefined) -> None


def load_facts(run_dir: Path) -> dict[str, CellFacts]:
    if not (run_dir / "manifest.json").is_file():
        raise TriageError(f"{run_dir}: not a run directory (no manifest.json)")
    store = open_run(run_dir)
    try:
        run = load_run(store, view=False)  # the one reader's rule (runner/store/rundir.py); whole records
        table = long_table(store, run=run)
    except (StoreError, KeyError, ValueError) as exc:
        raise TriageError(f"{run_dir}: cannot read the run: {exc}") from exc
    configs, by_cell = run.cells, run.by_cell
    for cell_id, config in configs.items():
        missing = [key for key in REQUIRED_CELL_FIELDS if key not in config]
        if missing:
            raise TriageError(f"{run_dir / 'cells' / (cell_id + '.json')}: missing {', '.join(missing)}")
    rows = {row["cell_id"]: row for row in table.to_dict("records")} if len(table) else {}
    return {
        cid: CellFacts(configs[cid], rows.get(cid, {}), final_attempts(counted_turns(by_cell.get(cid, []))))
        for cid in configs
    }


def final_attempts(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per turn: its last attempt. A retried attempt (no model output, then an answer) says nothing
    about why the cell is low; only how each turn finally went does."""
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for turn in turns:
        key = turn_key(turn)
        if key not in last or turn.get("attempt", 0) >= last[key].get("attempt", 0):
            last[key] = turn
    return list(last.values())


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _refused_or_silent(facts: CellFacts) -> tuple[str, dict[str, Any]] | None:
    turns, config = facts.turns, facts.config
    if not turns:
        return "no_response", {"cell_status": config.get("status"), "error": config.get("error"), "n_turns": 0}
    # A turn the harness could not render (raw-template) sent nothing: neither the server's silence nor a refusal.
    template_failures = [t for t in turns if t.get("detail") == TEMPLATE_FAILURE_DETAIL]
    turns = [t for t in turns if t.get("detail") != TEMPLATE_FAILURE_DETAIL] or turns
    outcomes = Counter(t["outcome"] for t in turns)
    details = Counter(t.get("detail") for t in turns if t["outcome"] in INELIGIBLE)
    for verdict, outcome in SILENT_VERDICTS.items():
        if _share(outcomes[outcome], len(turns)) >= MAJORITY:
            example = next((t for t in turns if t["outcome"] == outcome), {})
            return verdict, {
                f"n_{outcome}": outcomes[outcome],
                "n_turns": len(turns),
                "details": dict(details.most_common()),
                "http_status": example.get("http_status"),
                "error_body": str((example.get("error") or {}).get("body"))[:300],
                "n_template_failures": len(template_failures),
            }
    return None


def _no_parser(facts: CellFacts) -> dict[str, Any] | None:
    config = facts.config
    if not mode_of(config["tools_mode"]).sends_tools or config.get("parser") is not None:
        return None
    in_text = sum(1 for t in facts.turns if t.get("text_call_recoverable"))
    return {"tool_flags": config.get("tool_flags"), "parser": None, "n_turns_with_call_in_text": in_text}


def _parser_loss(facts: CellFacts, raw: CellFacts | None) -> dict[str, Any] | None:
    if facts.config.get("category"):  # BFCL: failed cases whose written calls BFCL's checker passes
        return bfcl_parser_loss(facts.config, facts.turns, MAJORITY)
    if mode_of(facts.config["tools_mode"]).parse_path != "server":
        return None
    eligible = [t for t in facts.turns if t["outcome"] not in INELIGIBLE]
    failed = [t for t in eligible if t["outcome"] != Outcome.VALID_CALL.value]
    unparsed = [t for t in failed if t["outcome"] == Outcome.UNPARSEABLE_TEXT.value]
    # A call the reference recognisers recovered is the stack's loss. The stack's parser rejecting the output
    # without quoting it (llama.cpp b11312) is the model's turn, unless the raw-template arm (same weights, same
    # template, reference parser) clearly does better.
    raw_low = raw.row.get("ci_low") if raw is not None else None
    raw_better = isinstance(raw_low, float) and raw_low == raw_low and raw_low > (facts.mean or 0.0)  # NaN-safe
    lost = [
        t
        for t in unparsed
        if t.get("text_call_recoverable") or (raw_better and t.get("detail") == SERVER_PARSER_REJECTED)
    ]
    if not failed or _share(len(lost), len(failed)) < MAJORITY:
        return None
    evidence: dict[str, Any] = {
        "n_parse_lost": len(lost),
        "n_failed_turns": len(failed),
        "n_eligible_turns": len(eligible),
        "call_formats_in_text": dict(Counter(t.get("call_format") for t in lost).most_common()),
        "example": (lost[0].get("raw_content") or "")[:200],
    }
    if raw is not None:
        evidence["raw_template"] = {"cell_id": raw.config["cell_id"], **_figure(raw)}
    return evidence


def _figure(facts: CellFacts) -> dict[str, Any]:
    row = facts.row
    return {
        "per_seed_mean": facts.mean,
        "ci_low": row.get("ci_low"),
        "ci_high": row.get("ci_high"),
        "n_seeds": row.get("n_seeds"),
    }


def _prompt_difference(facts: CellFacts, peer: CellFacts) -> dict[str, Any] | None:
    """How this cell's prompt differs from the peer's, judged by what the mode actually sends; None if it does not
    (or nothing recorded can tell)."""
    mine, theirs = facts.config, peer.config
    if mode_of(mine["tools_mode"]).renders_template:  # the harness rendered the model's own template
        a, b = mine.get("raw_template_sha256"), theirs.get("raw_template_sha256")
        return {"compared": "raw_template_sha256", "values": [a, b]} if a and b and a != b else None
    ours, peers = first_turn_prompts(facts.turns), first_turn_prompts(peer.turns)
    differing = {
        seed: [ours[seed], peers[seed]] for seed in sorted(set(ours) & set(peers)) if ours[seed] != peers[seed]
    }
    if differing:
        return {"compared": "first-turn prompt tokens per seed", "differing_seeds": differing}
    if set(ours) & set(peers) and not mode_of(mine["tools_mode"]).sends_tools:
        return None  # the same first prompts on every seed: nothing the template adds for tools plays a part
    sends = mode_of(mine["tools_mode"]).sends_tools
    (canary, label), (other, _) = canary_for(mine, sends), canary_for(theirs, sends)
    if canary.get("sha256") and other.get("sha256") and canary["sha256"] != other["sha256"]:
        names = (mine["stack_label"], theirs["stack_label"])
        return {
            "compared": label,
            "canary_sha256": {names[0]: canary["sha256"], names[1]: other["sha256"]},
            "hunk": canary_hunk(canary.get("prompt") or "", other.get("prompt") or "", names),
        }
    return None


def _prompt_causes(facts: CellFacts, peers: list[CellFacts]) -> tuple[str, dict[str, Any]] | None:
    """Template, sampler or truncation: the first two only against a peer that scores PEER_GAP higher on the same
    weights; truncation when it touched most of the cell's failed turns."""
    mine = facts.mean or 0.0
    better = [p for p in peers if p.mean is not None and round(p.mean - mine, 9) >= PEER_GAP]
    for peer in better:
        difference = _prompt_difference(facts, peer)
        if difference is not None:
            return "template_differs", {"peer": {"cell_id": peer.config["cell_id"], **_figure(peer)}, **difference}
    for peer in better:
        mine_sampler, theirs_sampler = effective_sampler(facts.config), effective_sampler(peer.config)
        changed = {k: [mine_sampler.get(k), theirs_sampler.get(k)] for k in mine_sampler | theirs_sampler
                   if known(mine_sampler.get(k)) and known(theirs_sampler.get(k))
                   and mine_sampler.get(k) != theirs_sampler.get(k)}  # fmt: skip
        if changed:
            return "sampling_differs", {"peer": {"cell_id": peer.config["cell_id"], **_figure(peer)}, "fields": changed}
    failed = [t for t in facts.turns if t["outcome"] not in (*INELIGIBLE, Outcome.VALID_CALL.value)]
    cut = [t for t in failed if PROMPT_TRUNCATED_FLAG in (t.get("flags") or [])]
    if cut and _share(len(cut), len(failed)) >= MAJORITY:
        example = {"tokens_used": cut[0]["tokens"].get("prompt"), "rendered": cut[0].get("prompt_tokens_rendered")}
        return "truncated", {"n_truncated_turns": len(cut), "n_failed_turns": len(failed), "example": example}
    return None


def _peers(facts: CellFacts, everything: dict[str, CellFacts]) -> list[CellFacts]:
    """Same weights (model), same mode, another stack config (a BFCL cell: the same category)."""
    config = facts.config
    return [
        other
        for other in everything.values()
        if other.config["model"] == config["model"]
        and other.config["tools_mode"] == config["tools_mode"]
        and other.config["stack_label"] != config["stack_label"]
        and other.config.get("category") == config.get("category")  # BFCL: the same cases, the same metric
    ]


def _raw_template_cell(facts: CellFacts, everything: dict[str, CellFacts]) -> CellFacts | None:
    """The raw-template cell on the same stack (any tool configuration: raw-template sends none) and model."""
    config = facts.config
    candidates = [
        other
        for other in everything.values()
        if other.config["tools_mode"] == "raw-template"
        and other.config["stack"] == config["stack"]
        and other.config["model"] == config["model"]
        and other.config.get("category") == config.get("category")
    ]
    # The same stack config first (same launch, same template in force), then any of the stack's.
    candidates.sort(key=lambda other: other.config["stack_label"] != config["stack_label"])
    return candidates[0] if candidates else None


def _peer_comparison(facts: CellFacts, peer: CellFacts) -> dict[str, Any]:
    """What the run recorded about the same request on another stack: the same first prompt (server token
    counts), the same first answer (byte for byte), the same canary the mode resembles."""
    sends = mode_of(facts.config["tools_mode"]).sends_tools
    (canary, _), (other, _) = canary_for(facts.config, sends), canary_for(peer.config, sends)
    return {
        "cell_id": peer.config["cell_id"],
        **_figure(peer),
        "same_first_prompt_tokens": agreement(first_turn_prompts(facts.turns), first_turn_prompts(peer.turns)),
        "same_first_answer": agreement(first_answers(facts.turns), first_answers(peer.turns)),
        "same_canary": None
        if not (canary.get("sha256") and other.get("sha256"))
        else canary["sha256"] == other["sha256"],
    }


def _model_evidence(facts: CellFacts, peers: list[CellFacts], raw: CellFacts | None) -> dict[str, Any]:
    outcomes = Counter(t["outcome"] for t in facts.turns)
    unchecked = sum(PROMPT_COUNT_UNAVAILABLE_FLAG in (t.get("flags") or []) for t in facts.turns)
    evidence: dict[str, Any] = {
        "outcomes": dict(outcomes.most_common()),
        "peers": [_peer_comparison(facts, peer) for peer in peers],
        "n_turns_prompt_unchecked": unchecked,  # turns whose prompt length the server could not count
    }
    if raw is not None and raw.config["cell_id"] != facts.config["cell_id"]:
        evidence["raw_template"] = {"cell_id": raw.config["cell_id"], **_figure(raw)}
    return evidence


def triage_cell(facts: CellFacts, everything: dict[str, CellFacts]) -> CellTriage:
    config, row = facts.config, facts.row
    result = CellTriage(
        cell_id=config["cell_id"],
        stack_config=config["stack_label"],
        model=config["model"],
        tools_mode=config["tools_mode"],
        per_seed_mean=facts.mean,
        # A BFCL cell's figure is BFCL's accuracy (its interval is in the report's bfcl_cells): never a fidelity CI.
        ci_low=None if config.get("category") else row.get("ci_low"),
        ci_high=None if config.get("category") else row.get("ci_high"),
        n_seeds=int(row.get("n_seeds") or 0),
    )
    peers, raw = _peers(facts, everything), _raw_template_cell(facts, everything)
    found = _refused_or_silent(facts)
    if found is None:
        result.ruled_out += ["refused", "no_response"]
        parser = _no_parser(facts)
        found = ("no_parser", parser) if parser is not None else None
    if found is None:
        result.ruled_out.append("no_parser")
        loss = _parser_loss(facts, raw)
        found = ("parser_loss", loss) if loss is not None else None
    if found is None:
        result.ruled_out.append("parser_loss")
        found = _prompt_causes(facts, peers)
    if found is None:
        result.ruled_out += ["template_differs", "sampling_differs", "truncated"]
        found = ("model", _model_evidence(facts, peers, raw))
    result.verdict, result.evidence = found
    return result


def is_low(facts: CellFacts, threshold: float) -> bool:
    return facts.mean is None or facts.mean < threshold


def triage_run(run_dir: Path, threshold: float = DEFAULT_THRESHOLD) -> list[CellTriage]:
    """A verdict for every low cell of the run, in run order."""
    if not 0 < threshold <= 1:
        raise TriageError(f"--threshold {threshold}: must lie in (0, 1]")
    everything = load_facts(run_dir)
    ordered = sorted(everything.values(), key=lambda f: (int(f.config.get("order") or 0), f.config["cell_id"]))
    return [triage_cell(facts, everything) for facts in ordered if is_low(facts, threshold)]
