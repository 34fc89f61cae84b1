"""One line per triage verdict, for people: the cause and the numbers behind it."""

from __future__ import annotations

from typing import Any


def _pct(figure: dict[str, Any]) -> str:
    def one(value: Any) -> str:
        return "undef" if value is None or value != value else f"{100 * float(value):.0f}"

    if figure.get("per_seed_mean") is None:
        return "undefined"
    return f"{one(figure.get('per_seed_mean'))}% [{one(figure.get('ci_low'))},{one(figure.get('ci_high'))}]"


def summary(verdict: str, evidence: dict[str, Any]) -> str:
    """One line a person reads: the cause and the numbers behind it."""
    if verdict in ("refused", "no_response"):
        count = evidence.get("n_rejected_request", evidence.get("n_non_response", 0))
        if not evidence.get("n_turns"):
            return f"no turns: the cell {evidence.get('cell_status')} ({str(evidence.get('error'))[:80]})"
        details, status = evidence.get("details"), evidence.get("http_status")
        return f"{count}/{evidence['n_turns']} turns {verdict} {details} HTTP {status}"
    if verdict == "no_parser":
        in_text = evidence["n_turns_with_call_in_text"]
        return f"tools sent, flags {evidence['tool_flags']} wire no parser; {in_text} turns hold a call in text"
    if verdict == "parser_loss" and "bfcl" in evidence:
        bfcl = evidence["bfcl"]
        return (
            f"{evidence['n_parse_lost']}/{evidence['n_failed_turns']} failed BFCL {bfcl['category']} cases pass as the "
            f"model said them: {100 * bfcl['served']:.0f}% served, {100 * bfcl['as_said']:.0f}% as said"
        )
    if verdict == "parser_loss":
        raw = evidence.get("raw_template")
        beside = f"; raw-template (same weights, reference parser) {_pct(raw)}" if raw else ""
        return (
            f"{evidence['n_parse_lost']}/{evidence['n_failed_turns']} failed turns hold a call the stack did not parse "
            f"{evidence['call_formats_in_text']}{beside}"
        )
    if verdict in ("template_differs", "sampling_differs"):
        what = (
            f"{evidence['compared']} differ"
            if verdict == "template_differs"
            else f"sampler differs in {list(evidence['fields'])}"
        )
        return f"{evidence['peer']['cell_id']} scores {_pct(evidence['peer'])}; {what}"
    if verdict == "truncated":
        return f"{evidence['n_truncated_turns']} turn(s) used fewer prompt tokens than rendered: {evidence['example']}"
    peers = "; ".join(
        f"{p['cell_id'].split('__')[0]} {_pct(p)}"
        + (
            f" (first prompt same on {p['same_first_prompt_tokens']} seeds, first answer on {p['same_first_answer']})"
            if p["per_seed_mean"] is not None
            else ""
        )
        for p in evidence["peers"]
    )
    raw = evidence.get("raw_template")
    return f"outcomes {evidence['outcomes']}; peers: {peers or 'none'}" + (f"; raw-template {_pct(raw)}" if raw else "")
