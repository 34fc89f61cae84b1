"""One BFCL case: its request as each mode poses it, its one answer, and BFCL's verdict on the turn.

- Tools: where they travel as tools (native, native+hint in `tools=`; raw-template through the model's own
  template) they are what BFCL's chat `tools=` handler sends: its Python-syntax note, its type mapping and `.`
  in names as `_` (runner/suites/bfclpackage.py `fc_tools`, BFCL's own code). The project's prompts
  (native+hint's hint, text-tools, constrained) describe them under their original names. A call under either
  spelling is read as that tool (`read_tools`), and scored under BFCL's name.
- Messages: the case's own messages (a live case may bring a system message); a mode with a prompt template
  renders it over the case's system text, or over nothing.
- The case ends after the first answer (`first_answer`), like the model channel; every record of it (failed
  attempts included) carries BFCL's verdict, computed before the record is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from orchestrator.core.bfcl import BFCL_SUITE, BfclCase, fc_name
from orchestrator.core.chattemplate import TemplateError
from orchestrator.core.modes import mode_of
from orchestrator.core.types import UNRAN_SEED_ENDS, SeedEnd, ToolsMode, TurnRecord
from orchestrator.runner.suites.bfclcheck import turn_verdict
from orchestrator.runner.suites.bfclpackage import BFCL_VERSION, CHECKER_MODULE, fc_tools
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.turn.agent import SeedContext, answer_turn, finish_seed, payload_for, template_failure
from orchestrator.runner.turn.prompts import build_request, system_text

Record = Callable[[TurnRecord], None]


def offers_fc_names(mode: ToolsMode) -> bool:
    """Tools that reach the model as tools carry BFCL's FC names; a prompt's description, the original ones."""
    rules = mode_of(mode)
    return rules.sends_tools or rules.renders_template


def case_tools(case: BfclCase, mode: ToolsMode) -> list[dict[str, Any]]:
    tools = fc_tools(case.function, case.category)
    return tools if offers_fc_names(mode) else original_named(case, tools)


def original_named(case: BfclCase, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools under the case's own function names (as the project's prompts describe them)."""
    originals = {fc_name(str(f["name"])): str(f["name"]) for f in case.function}
    return [_renamed(tool, originals.get(tool["function"]["name"], tool["function"]["name"])) for tool in tools]


def read_tools(case: BfclCase, offered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The offered tools, and each again under its other spelling (`a.b` / `a_b`) where the two differ."""
    names = {tool["function"]["name"] for tool in offered}
    extra = []
    for tool, function in zip(offered, case.function, strict=True):
        for spelling in (str(function["name"]), fc_name(str(function["name"]))):
            if spelling not in names:
                names.add(spelling)
                extra.append(_renamed(tool, spelling))
    return offered + extra


def _renamed(tool: dict[str, Any], name: str) -> dict[str, Any]:
    return {**tool, "function": {**tool["function"], "name": name}}


def case_messages(mode: ToolsMode, case: BfclCase, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if mode_of(mode).system_template is None:
        return [dict(message) for message in case.question]
    rest = [dict(message) for message in case.question if message.get("role") != "system"]
    described = original_named(case, tools)  # the prompt names each function as the case does (native+hint too)
    return [{"role": "system", "content": system_text(mode, case.system_text or "", described)}, *rest]


def bfcl_cell_record(mode: ToolsMode, resolved: Mapping[str, Suite]) -> dict[str, Any]:
    """What a BFCL cell's config records beside its category."""
    suite = resolved.get(BFCL_SUITE)
    return {
        "package": suite.benchmark if suite is not None else f"bfcl-eval=={BFCL_VERSION}",
        "names": "fc" if offers_fc_names(mode) else "original",
        "checker": f"{CHECKER_MODULE}.ast_checker",
    }


def with_verdicts(case: BfclCase, record: Record) -> Record:
    """`record`, with BFCL's verdict put on every record before it is written."""

    def judged(turn: TurnRecord) -> None:
        verdict = turn_verdict(case, turn.tools_mode, turn)
        record(turn.model_copy(update={"category": case.category, "bfcl": verdict}))

    return judged


def run_bfcl_case(ctx: SeedContext, record: Record, heartbeat: Callable[[str], None] = lambda _m: None) -> TurnRecord:
    """One request: the case's first answer is its whole run, judged by BFCL's checker."""
    case = ctx.task.suite.seed(ctx.task.seed_id).bfcl
    if case is None:
        raise ValueError(f"{ctx.task.seed_id}: not a BFCL case")
    judged = with_verdicts(case, record)
    tools = ctx.task.offered_tools
    messages = case_messages(ctx.task.mode, case, tools)
    with httpx.Client(headers=ctx.server.headers) as client:
        cache = ctx.server.reset_cache(client) if ctx.server.reset_cache else None
        try:
            request = build_request(ctx.task.mode, messages, tools, ctx.task.template)
        except TemplateError as exc:
            return finish_seed(judged, template_failure(ctx, 0, exc), SeedEnd.TEMPLATE_ERROR)
        last, _verdict, end = answer_turn(ctx, client, request, payload_for(ctx, request), 0, heartbeat, judged, cache)
    final = finish_seed(judged, last, end if end in UNRAN_SEED_ENDS else SeedEnd.FIRST_ANSWER)
    verdict = turn_verdict(case, final.tools_mode, final)
    return final.model_copy(update={"category": case.category, "bfcl": verdict})


def seed_tools(suite: Suite, seed_id: str, mode: ToolsMode) -> dict[str, Any]:
    """SeedTask's `tools` and `read_tools` for a seed with tools of its own (a BFCL case); none for others."""
    case = suite.seed(seed_id).bfcl if suite.benchmark is not None else None
    if case is None:
        return {}
    offered = case_tools(case, mode)
    return {"tools": offered, "read_tools": read_tools(case, offered)}
