"""Call formats through the classifier, the CLI, the agent loop, the matrix and the report.

The case table (tests/data/call_formats/cases.yaml: calls written in every format core/textcalls.py knows,
prose that only looks like one, malformed attempts) is driven through `classify` in native mode (a text call
is the stack's parse loss, never the model's prose) and through the real `orchestrate classify` in text-tools
mode (a correct call in the model's own format is a call). Then: a cell's `call_format` reaches every turn,
a matrix names it (validated, recorded, part of the config identity), `--reclassify` recomputes it, the long
table counts the formats seen, and the probe names the format it saw.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from rich.console import Console

from orchestrator.analysis.report.reclassify import reclassify
from orchestrator.analysis.report.report import format_counts, long_table
from orchestrator.analysis.report.views import probe_view
from orchestrator.core.classify import check_call_format, classify, known_call_formats
from orchestrator.core.modes import JSON_FORMAT
from orchestrator.core.textcalls import FORMATS, extract_text_calls
from orchestrator.core.types import Outcome, ToolsMode
from orchestrator.runner.run.provenance import run_stacks
from orchestrator.runner.store.runstore import RunStore
from orchestrator.serving.registry import REPO_ROOT, load_stack
from tests import bodies as b
from tests.conftest import V1_CPU_RUN
from tests.fakes.scripted import Reply, chat_reply
from tests.test_agent_integrity import run as run_agent
from tests.test_call_formats import CASES
from tests.test_cli_core import run as run_cli
from tests.test_cli_core import write_jsonl

OLD_RUN = V1_CPU_RUN
JSON_CALL = '{"name": "pod_status", "arguments": {"name": "api-1"}}'
PYTHONIC_CALL = '[pod_status(name="api-1")]'


def by_kind(kind: str) -> list[Any]:
    """Cases of one kind, as this harness reads them (tests/test_call_formats.py `as_read_here`)."""
    return [pytest.param(case, id=str(case["id"])) for case in CASES if case["kind"] == kind]


def schema_of(value: Any) -> dict[str, Any]:
    """A permissive JSON schema a value validates against (its type only)."""
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int | float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        return {"type": "object"}
    return {}


def tools_for(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools to offer a case in text-tools mode: its own, where each is a valid JSON schema (some stacks' tests
    pass `"type": "float"`), plus, for every expected call name none of them defines (a stack's test may offer
    another tool than the one the output calls), a tool whose permissive schema the expected arguments fit."""
    offered = [tool for tool in case.get("tools") or [] if _valid_schema(tool["function"].get("parameters") or {})]
    names = {tool["function"]["name"] for tool in offered}
    properties: dict[str, dict[str, Any]] = {}
    for call in case.get("expected") or []:
        if call["name"] in names:
            continue
        args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
        properties.setdefault(call["name"], {}).update({key: schema_of(value) for key, value in args.items()})
    derived = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}
        for name, props in properties.items()
    ]
    return [*offered, *derived]


def _valid_schema(schema: dict[str, Any]) -> bool:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return False
    return True


def expected_calls(case: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(call["name"], call.get("arguments", {})) for call in case.get("expected") or []]


def native(text: str, *, tools: list[dict[str, Any]], call_format: str = "auto", mode: str = "native") -> Any:
    return classify(
        refusals=[], mode=mode, tools=tools, http_status=200, body=b.openai_reply(text), call_format=call_format
    )


# --- the case table -------------------------------------------------------------------------------------


def test_the_case_table_covers_every_format_and_kind() -> None:
    assert CASES, "the case table is empty"
    assert {case["format"] for case in CASES if case["kind"] == "call"} == set(FORMATS)  # each family, no other
    assert {case["kind"] for case in CASES} == {"call", "prose", "malformed"}
    assert JSON_FORMAT in FORMATS  # what the hint prompts ask for, by the name the recognisers use


@pytest.mark.parametrize("case", by_kind("call"))
def test_native_a_call_in_any_known_format_is_the_stacks_parse_loss(case: dict[str, Any]) -> None:
    verdict = native(case["text"], tools=list(case.get("tools") or []))
    assert (verdict.outcome, verdict.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:call_in_text")
    assert verdict.text_call_recoverable is True
    assert verdict.call_format == case["format"]
    assert [(c.name, c.arguments) for c in verdict.text_calls] == expected_calls(case)
    assert verdict.calls == []  # recovered, never executed in native mode


@pytest.mark.parametrize("case", by_kind("prose"))
def test_native_prose_stays_prose(case: dict[str, Any]) -> None:
    verdict = native(case["text"], tools=list(case.get("tools") or []))
    assert (verdict.outcome, verdict.call_format, verdict.text_calls) == (Outcome.NO_CALL_PROSE, None, [])


@pytest.mark.parametrize("case", by_kind("malformed"))
def test_native_a_malformed_attempt_is_unparseable_never_prose(case: dict[str, Any]) -> None:
    verdict = native(case["text"], tools=list(case.get("tools") or []))
    assert verdict.outcome is Outcome.UNPARSEABLE_TEXT
    assert verdict.detail is not None and verdict.detail.startswith("parse:")
    assert verdict.detail != "parse:call_in_text" and not verdict.text_call_recoverable


@pytest.mark.parametrize("case", by_kind("call"))
def test_naming_the_cases_format_reads_it_as_auto_does(case: dict[str, Any]) -> None:
    tools = list(case.get("tools") or [])
    named = native(case["text"], tools=tools, call_format=case["format"])
    auto = native(case["text"], tools=tools)
    assert (named.call_format, named.text_calls, named.detail) == (auto.call_format, auto.text_calls, auto.detail)


def test_the_cli_reads_every_case_in_text_tools_mode(tmp_path: Path) -> None:
    assert CASES, "the case table is empty"
    exchanges = [
        {
            "id": case["id"],
            "stack": "llamacpp",
            "mode": "text-tools",
            "tools": tools_for(case),
            "http_status": 200,
            "body": b.openai_reply(case["text"]),
        }
        for case in CASES
    ]
    result = run_cli("classify", str(write_jsonl(tmp_path / "cases.jsonl", exchanges)))
    assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in map(json.loads, result.stdout.splitlines())}
    assert len(rows) == len(CASES)
    wrong = []
    for case in CASES:
        row = rows[case["id"]]
        want = {"call": "valid_call", "prose": "no_call_prose", "malformed": "unparseable_text"}[case["kind"]]
        format_ok = case["kind"] != "call" or row["call_format"] == case["format"]
        if row["outcome"] != want or not format_ok:
            wrong.append((case["id"], want, row["outcome"], row["detail"], row["call_format"]))
        if case["kind"] == "call" and [(c["name"], c["arguments"]) for c in row["calls"]] != expected_calls(case):
            wrong.append((case["id"], "calls", row["calls"]))
    assert wrong == []


# --- modes and the named-format policy ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["native+hint", "text-tools"])
def test_hint_modes_take_a_call_in_the_models_own_format_and_record_it(mode: str) -> None:
    verdict = native(PYTHONIC_CALL, tools=b.TOOLS, mode=mode)
    assert (verdict.outcome, verdict.parse_path, verdict.call_format) == (Outcome.VALID_CALL, "harness", "pythonic")
    assert [(c.name, c.arguments) for c in verdict.calls] == [("pod_status", {"name": "api-1"})]
    assert verdict.text_calls == verdict.calls and verdict.text_call_recoverable


def test_a_named_format_still_reads_the_json_the_prompt_asks_for() -> None:
    verdict = native(JSON_CALL, tools=b.TOOLS, call_format="pythonic", mode="text-tools")
    assert (verdict.outcome, verdict.call_format) == (Outcome.VALID_CALL, JSON_FORMAT)


def test_a_named_json_format_reads_only_json() -> None:
    verdict = native(PYTHONIC_CALL, tools=b.TOOLS, call_format=JSON_FORMAT, mode="text-tools")
    auto = native(PYTHONIC_CALL, tools=b.TOOLS, mode="text-tools")
    assert (verdict.outcome, verdict.call_format) == (Outcome.NO_CALL_PROSE, None)
    assert auto.outcome is Outcome.VALID_CALL


def test_an_unknown_call_format_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown call format 'yaml'.*auto.*pythonic"):
        native(JSON_CALL, tools=b.TOOLS, call_format="yaml")
    assert check_call_format("auto") == "auto" and set(FORMATS) < set(known_call_formats())


def test_a_server_parser_failure_is_read_by_the_same_recognisers() -> None:
    quoted = {"error": {"code": 500, "message": f"Failed to parse input at pos 0: {PYTHONIC_CALL}", "type": "x"}}
    verdict = classify(
        **load_stack("llamacpp").signatures(), mode="native", tools=b.TOOLS, http_status=500, body=quoted
    )
    assert (verdict.outcome, verdict.detail) == (Outcome.UNPARSEABLE_TEXT, "parse:server_rejected_output")
    assert (verdict.call_format, verdict.text_call_recoverable) == ("pythonic", True)
    assert [(c.name, c.arguments) for c in verdict.text_calls] == [("pod_status", {"name": "api-1"})]


# --- the agent loop: the cell's format reaches every turn ---------------------------------------------------


@pytest.mark.server
def test_the_cells_call_format_reaches_every_turn_and_is_recorded() -> None:
    replies = [Reply(200, chat_reply(PYTHONIC_CALL))]
    auto, _ = run_agent(replies, mode=ToolsMode.TEXT_TOOLS, turn_cap=2)
    pinned, _ = run_agent(replies, mode=ToolsMode.TEXT_TOOLS, turn_cap=2, call_format=JSON_FORMAT)
    assert [(r.outcome.value, r.call_format, r.end) for r in auto] == [
        ("valid_call", "pythonic", None),
        ("valid_call", "pythonic", "turn_cap"),
    ]
    assert [(r.outcome.value, r.call_format, r.end) for r in pinned] == [("no_call_prose", None, "prose")]
    native_records, _ = run_agent(replies, mode=ToolsMode.NATIVE)
    (only,) = native_records
    assert (only.outcome.value, only.call_format, only.calls) == ("unparseable_text", "pythonic", [])
    assert [(c.name, c.arguments) for c in only.text_calls] == [("pod_status", {"name": "api-1"})]
    assert json.loads(only.model_dump_json())["call_format"] == "pythonic"


# --- the report and --reclassify ---------------------------------------------------------------------------


def test_format_counts_say_which_formats_and_how_many_were_off_request() -> None:
    turns = [{"call_format": f} for f in ["json", "pythonic", "json", None, "mistral", "pythonic", "json"]]
    assert format_counts(turns, "text-tools") == {
        "n_format_off_request": 3,
        "call_formats": "json:3 pythonic:2 mistral:1",
    }
    assert format_counts(turns, "native") == {
        "n_format_off_request": None,
        "call_formats": "json:3 pythonic:2 mistral:1",
    }
    assert format_counts([{"outcome": "valid_call"}], "native+hint") == {
        "n_format_off_request": 0,
        "call_formats": None,
    }


@pytest.fixture
def old_run(tmp_path: Path) -> RunStore:
    copy = tmp_path / OLD_RUN.name
    shutil.copytree(OLD_RUN, copy)
    return RunStore(copy)


def test_reclassifying_the_old_run_recomputes_formats_and_changes_no_json_label(old_run: RunStore) -> None:
    cells = {cell["cell_id"]: cell for cell in old_run.read_cells()}
    stored = old_run.read_turns()
    again = reclassify(stored, cells, run_stacks(old_run))
    assert all("call_format" not in turn for turn in stored)  # schema 1: recorded before the field existed
    changed = [
        (new["cell_id"], new["turn"], old["outcome"], new["outcome"], new["call_format"])
        for old, new in zip(stored, again, strict=True)
        if (old["outcome"], old["detail"]) != (new["outcome"], new["detail"])
    ]
    assert [c for c in changed if c[4] in (None, JSON_FORMAT)] == []
    assert changed == []  # no turn of this run was written in a format the old JSON scanner missed
    formats = {turn["call_format"] for turn in again}
    assert JSON_FORMAT in formats
    native_text = [t for t in again if t["tools_mode"] == "native" and t["detail"] == "parse:call_in_text"]
    assert native_text and all(t["text_call_recoverable"] and t["text_calls"] for t in native_text)


def test_the_old_runs_long_table_keeps_its_columns_and_adds_the_format_columns(old_run: RunStore) -> None:
    committed = pd.read_csv(OLD_RUN / "report" / "cells_long.csv").set_index("cell_id")
    live = long_table(old_run).set_index("cell_id")
    again = long_table(old_run, do_reclassify=True).set_index("cell_id")
    for column in ("n_valid", "n_eligible_turns", "n_rejected", "n_non_response", "pooled", "text"):
        pd.testing.assert_series_equal(again[column], committed.loc[again.index, column], check_dtype=False)
    assert live["call_formats"].isna().all()  # no record of this run says its format: none is invented
    assert again.loc[again["tools_mode"] == "native", "n_format_off_request"].isna().all()
    hinted = again[again["tools_mode"] != "native"]
    assert hinted["n_format_off_request"].notna().all()
    assert again["call_formats"].notna().any()


TEXT_TOOLS_CELL = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__text-tools"


def rewrite_first_turn(store: RunStore, content: str) -> None:
    """Make the cell's first turn of seed ops-00 (a JSON call in the committed run) answer `content` instead."""
    lines = store.turns_path.read_text().splitlines()
    for index, line in enumerate(lines):
        turn = json.loads(line)
        if (turn["cell_id"], turn["seed"], turn["turn"]) == (TEXT_TOOLS_CELL, "ops-00", 0):
            turn["raw_body"]["choices"][0]["message"]["content"] = content
            lines[index] = json.dumps(turn)
            break
    else:
        raise AssertionError("the fixture has no such turn")
    store.turns_path.write_text("\n".join(lines) + "\n")


def test_reclassify_reads_with_the_cells_recorded_call_format_and_the_report_counts_it(old_run: RunStore) -> None:
    valid = long_table(old_run).set_index("cell_id").loc[TEXT_TOOLS_CELL, "n_valid"]
    rewrite_first_turn(old_run, PYTHONIC_CALL)
    auto = long_table(old_run, do_reclassify=True).set_index("cell_id").loc[TEXT_TOOLS_CELL]
    assert (auto["call_formats"], auto["n_format_off_request"]) == ("json:47 pythonic:1", 1)
    assert auto["n_valid"] == valid  # the call in the model's own format is a call: nothing else changed
    cell_file = old_run.cells_dir / f"{TEXT_TOOLS_CELL}.json"
    cell_file.write_text(json.dumps({**json.loads(cell_file.read_text()), "call_format": JSON_FORMAT}))
    pinned = long_table(old_run, do_reclassify=True).set_index("cell_id").loc[TEXT_TOOLS_CELL]
    assert (pinned["call_formats"], pinned["n_format_off_request"], pinned["n_valid"]) == ("json:47", 0, valid - 1)


# --- the probe names the format it saw ---------------------------------------------------------------------


@pytest.mark.server
def test_the_probe_names_the_format_it_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.serving import probe as probe_module
    from tests.fakes.scripted import scripted_server

    monkeypatch.setattr(probe_module, "server_facts", lambda *_a, **_k: {"stack_version": "v", "capabilities": {}})
    config = SimpleNamespace(
        stack="llamacpp",
        tool_config="jinja",
        server_id="s",
        model=SimpleNamespace(name="m"),
        stack_spec=lambda: load_stack("llamacpp"),  # the definition a run resolved (ServerConfig.spec)
    )
    with scripted_server([Reply(200, chat_reply(PYTHONIC_CALL))]) as (url, _script):
        handle = SimpleNamespace(base_url=url, describe=lambda: {})
        result = probe_module.probe(handle, config)  # type: ignore[arg-type]
    assert (result.verdict, result.text_call, result.call_format) == ("text_only", True, "pythonic")
    console = Console(width=200, record=True)
    console.print(probe_view([result]))
    assert "pythonic" in console.export_text()


# --- the README lists every format with an example that is read as that format ------------------------------


def test_the_readme_lists_every_format_with_an_example_read_as_that_format() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Call formats\n", 1)[1].split("\n## ", 1)[0]
    examples = dict(re.findall(r"^- `(\w+)`[^:]*: `([^`]+)`$", section, flags=re.MULTILINE))
    assert list(examples) == list(FORMATS)  # every format, in the `auto` order
    for name, example in examples.items():
        parse = extract_text_calls(example, tools=b.TOOLS)
        assert (parse.call_format, parse.ok) == (name, True), name
        assert [(c.name, c.arguments) for c in parse.calls] == [("pod_status", {"name": "api-1"})], name
