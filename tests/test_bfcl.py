"""BFCL through the matrix, without a server: BFCL's own AST checker (the pinned bfcl-eval 2026.3.23 install,
unmodified) on every case's ground truth and on perturbations; the verdict rules (no verdict without model
output, on irrelevance too, beside BFCL's own evaluator scoring the same refusal as a pass); the suite's
selection, tools and validation; `classify` of BFCL exchanges; hostile calls that must never run."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.analysis.report.bfclreport import cell_table, subscore_table
from orchestrator.analysis.triage.triage import CellFacts, _peers
from orchestrator.core.bfcl import AST_CATEGORIES, UNPASSABLE, fc_name, selection_key, subscores
from orchestrator.core.labelling import label_turn
from orchestrator.core.stats import DEFAULT_BOOTSTRAP
from orchestrator.core.types import Outcome, ParsedCall, ToolsMode
from orchestrator.runner.config.matrix import Matrix, expand
from orchestrator.runner.suites.bfclcases import (
    package_cases,
    provenance_record,
    select,
    snapshot_bytes,
    snapshot_cases,
)
from orchestrator.runner.suites.bfclcheck import check_calls, turn_verdict
from orchestrator.runner.suites.bfclpackage import data_file, package_dir, sha256_of
from orchestrator.runner.suites.tasks import SuiteError, parse_suite
from orchestrator.runner.turn.bfclturn import case_messages, case_tools, read_tools
from orchestrator.serving.registry import load_stack
from tests.cliinprocess import orchestrate

OMIT = object()
QWEN = "qwen2.5-coder-0.5b-instruct"
LLAMACPP = load_stack("llamacpp")


def _value(alternatives: Any, required: bool) -> Any:
    """One value from a possible answer's alternatives: left out where "" is allowed and the parameter is
    optional; BFCL's dict_checker reads one level of alternatives inside a dict value."""
    if not isinstance(alternatives, list):
        return alternatives
    if not alternatives or ("" in alternatives and not required):
        return OMIT
    chosen = next((a for a in alternatives if a != ""), "")
    if isinstance(chosen, list):  # list_dict_checker: each dict item holds alternatives per key too
        return [_one_level(item) if isinstance(item, dict) else item for item in chosen]
    return _one_level(chosen) if isinstance(chosen, dict) else chosen


def _one_level(alternatives_by_key: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, vs in alternatives_by_key.items() if (v := _value(vs, False)) is not OMIT}


def ground_truth_calls(case: Any, spell: Any = fc_name) -> list[ParsedCall]:
    docs = {f["name"]: f for f in case.function}
    calls = []
    for call in case.ground_truth:
        ((name, params),) = call.items()
        required = set(docs.get(name, {}).get("parameters", {}).get("required", []))
        arguments = {k: v for k, alts in params.items() if (v := _value(alts, k in required)) is not OMIT}
        calls.append(ParsedCall(name=spell(name), arguments=arguments))
    return calls


def test_every_cases_ground_truth_passes_bfcls_checker_under_both_spellings_but_the_unpassable() -> None:
    failed: dict[str, str | None] = {}
    checked = 0
    for category in AST_CATEGORIES:
        for case in package_cases(category):
            for spell in (fc_name, str):  # a.b offered as a_b (native) and as written (text modes)
                valid, error = check_calls(case, ground_truth_calls(case, spell))
                checked += 1
                if not valid:
                    failed[case.id] = error
    assert checked == 2 * (400 + 200 + 200 + 200 + 258 + 1053 + 16 + 24)
    # Four contradict their own docs under any output; the fifth accepts only '' for a required parameter
    # (the rendering above sends that '', and it passes): all five are never selected, each with its reason.
    assert failed == {
        "live_simple_106-63-0": "simple_function_checker:missing_required",
        "live_simple_112-68-0": "simple_function_checker:missing_required",
        "live_multiple_862-181-3": "simple_function_checker:unexpected_param",
        "live_multiple_964-207-0": "simple_function_checker:missing_required",
    }
    passed_by_empty = next(c for c in package_cases("live_multiple") if c.id == "live_multiple_507-149-4")
    assert ground_truth_calls(passed_by_empty)[0].arguments["origin_airport"] == ""
    assert set(failed) < set(UNPASSABLE) and all(UNPASSABLE.values())


def _case(category: str, case_id: str) -> Any:
    return next(case for case in package_cases(category) if case.id == case_id)


def _args(**changes: Any) -> Any:
    """A perturbation: the first call's arguments with `changes` (a value of None: the argument left out)."""

    def perturb(calls: list[ParsedCall]) -> list[ParsedCall]:
        arguments = {**calls[0].arguments, **changes}
        arguments = {key: value for key, value in arguments.items() if value is not None}
        return [calls[0].model_copy(update={"arguments": arguments}), *calls[1:]]

    return perturb


@pytest.mark.parametrize(
    ("category", "case_id", "perturb", "error_type"),
    [
        ("simple_python", "simple_python_0", _args(base=11), "value_error:others"),
        ("simple_python", "simple_python_0", _args(height=None), "simple_function_checker:missing_required"),
        ("simple_python", "simple_python_0", lambda c: [c[0].model_copy(update={"name": "triangle_area"})],
         "simple_function_checker:wrong_func_name"),
        ("simple_python", "simple_python_0", _args(color="red"), "simple_function_checker:unexpected_param"),
        ("simple_python", "simple_python_0", lambda c: c + c, "simple_function_checker:wrong_count"),
        ("simple_python", "simple_python_0", _args(base="10"), "type_error:simple"),
        ("multiple", "multiple_0", lambda c: c + c, "multiple_function_checker:wrong_count"),
        ("parallel", "parallel_0", lambda c: c + c[:1], "parallel_function_checker_no_order:wrong_count"),
        ("parallel", "parallel_0", lambda c: c[:1] + c[:1], "parallel_function_checker_no_order:cannot_find_match"),
        ("simple_python", "simple_python_0", lambda c: [], "ast_decoder:decoder_failed"),
    ],
)  # fmt: skip
def test_perturbed_answers_get_bfcls_error_types(category: str, case_id: str, perturb: Any, error_type: str) -> None:
    case = _case(category, case_id)
    right = ground_truth_calls(case)
    assert check_calls(case, right) == (True, None)
    assert check_calls(case, perturb(right)) == (False, error_type)


def test_relevance_categories_follow_bfcls_evaluator_rule() -> None:
    call = [ParsedCall(name="anything", arguments={})]
    irrelevance, relevance = _case("irrelevance", "irrelevance_0"), next(iter(package_cases("live_relevance")))
    assert check_calls(irrelevance, []) == (True, None)
    assert check_calls(irrelevance, call) == (False, "irrelevance_error:decoder_success")
    assert check_calls(relevance, call) == (True, None)
    assert check_calls(relevance, []) == (False, "relevance_error:decoder_failed")


def _bfcl_source_function(relative: str, name: str, namespace: dict[str, Any], cls: str | None = None) -> Any:
    """A function (or a class's method) of the package, compiled from its source as written."""
    path = package_dir() / relative
    body = ast.parse(path.read_text()).body
    if cls is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def bfcls_relevance_evaluator() -> Any:
    """BFCL's `_evaluate_single_relevance_entry` with its chat-FC handler's `decode_ast`, from the package's source."""
    helpers: dict[str, Any] = {}
    for name in ("is_function_calling_format_output", "is_empty_output"):
        _bfcl_source_function("utils.py", name, helpers)
    decode = _bfcl_source_function("model_handler/api_inference/openai_completion.py", "decode_ast", {"json": json},
                                   cls="OpenAICompletionsHandler")  # fmt: skip
    handler = type("FcHandler", (), {"is_fc_model": True, "decode_ast": decode})()
    namespace = {**helpers, "ReturnFormat": type("ReturnFormat", (), {"PYTHON": "python"})}
    evaluate = _bfcl_source_function("eval_checker/eval_runner.py", "_evaluate_single_relevance_entry", namespace)
    return lambda result, category: evaluate(handler, 0, result, {}, "m", category)["valid"]


@pytest.mark.parametrize("status", [500, 400])
def test_a_refused_irrelevance_request_has_no_verdict_here_and_is_a_pass_in_bfcls_evaluator(status: int) -> None:
    case = _case("irrelevance", "irrelevance_0")
    tools = read_tools(case, case_tools(case, ToolsMode.NATIVE))
    body = {"error": {"code": status, "message": "the server failed", "type": "server_error"}}
    refused = label_turn(**LLAMACPP.signatures(), mode="native", tools=tools, http_status=status, body=body)
    assert refused.outcome in (Outcome.REJECTED_REQUEST, Outcome.NON_RESPONSE)
    verdict = turn_verdict(case, "native", refused)
    assert (verdict.valid, verdict.valid_as_said, verdict.error_type) == (None, None, None)
    # BFCL stores the failure as text and its own evaluator scores that text: a pass on irrelevance.
    assert bfcls_relevance_evaluator()(f"Error during inference: {body}", "irrelevance") is True
    assert bfcls_relevance_evaluator()([{"f": "{}"}], "irrelevance") is False  # the evaluator does judge
    # The cell's accuracy does not move with the refused case in it; it is counted apart.
    answered = [_turn("irrelevance_0", True, True), _turn("irrelevance_1", False, False)]
    refused_turn = _turn("irrelevance_2", None, None, outcome=refused.outcome.value)
    cells = {"c": {"category": "irrelevance", "stack_label": "s", "model": "m", "tools_mode": "native", "order": 0}}
    without = cell_table(cells, {"c": answered}, DEFAULT_BOOTSTRAP)
    with_refusal = cell_table(cells, {"c": [*answered, refused_turn]}, DEFAULT_BOOTSTRAP)
    assert without["served"][0] == with_refusal["served"][0] == 0.5
    assert (with_refusal["n_verdict"][0], with_refusal["n_no_verdict"][0]) == (2, 1)


def _turn(
    seed: str, valid: bool | None, said: bool | None, outcome: str = "valid_call", category: str = "irrelevance"
) -> dict[str, Any]:
    verdict = {"category": category, "id": seed, "valid": valid, "valid_as_said": said,
               "error_type": None if valid in (True, None) else "x"}  # fmt: skip
    return {"cell_id": "c", "seed": seed, "turn": 0, "attempt": 0, "seed_attempt": 0, "outcome": outcome,
            "bfcl": verdict}  # fmt: skip


def test_cell_figures_pair_served_and_said_per_case_and_subscores_follow_bfcls_weights() -> None:
    turns = [_turn(f"s{i}", i < 2, i < 6, category="live_simple") for i in range(8)]
    cells = {"c": {"category": "live_simple", "stack_label": "s", "model": "m", "tools_mode": "native", "order": 0}}
    row = cell_table(cells, {"c": turns}, DEFAULT_BOOTSTRAP).iloc[0]
    assert (row["served"], row["as_said"], row["gap"]) == (0.25, 0.75, 0.5)
    assert row["gap_low"] > 0 and row["served_low"] <= 0.25 <= row["served_high"]
    assert row["errors"] == "x 6"
    figures = subscores({"live_simple": 0.5, "live_multiple": 0.0, "simple_python": 1.0, "irrelevance": 0.25})
    assert figures["live"]["value"] == pytest.approx(0.5 * 258 / (258 + 1053))
    assert figures["non_live_python"] == {"value": 1.0, "over": ["simple_python"]}
    assert figures["irrelevance"]["value"] == 0.25 and "overall" not in figures
    table = subscore_table(cell_table(cells, {"c": turns}, DEFAULT_BOOTSTRAP))
    assert list(table["subscore"]) == ["live"] and list(table["as_said"]) == [0.75]


def test_a_tampered_verdict_in_turns_is_refused_by_name() -> None:
    turn = _turn("s0", True, True)
    turn["bfcl"]["valid"] = "yes"
    cells = {"c": {"category": "irrelevance", "stack_label": "s", "model": "m", "tools_mode": "native"}}
    with pytest.raises(ValueError, match="cell c, case s0: field 'valid' is no BFCL verdict"):
        cell_table(cells, {"c": [turn]}, DEFAULT_BOOTSTRAP)


def test_selection_is_stable_spread_and_never_takes_an_unpassable_case() -> None:
    cases = package_cases("live_multiple")
    chosen = select(cases, 20)
    assert [c.id for c in chosen] == sorted((c.id for c in cases if c.id not in UNPASSABLE), key=selection_key)[:20]
    assert select(reversed(cases), 20) == chosen  # the file's order does not matter
    assert len(select(cases, "all")) == len(cases) - 3  # three of the five unpassable are live_multiple
    assert len({int(c.id.split("_")[2].split("-")[0]) // 100 for c in chosen}) >= 5  # not the file's first rows


def test_tools_carry_bfcls_fc_conventions_in_native_modes_and_original_names_in_text_modes() -> None:
    case = _case("simple_python", "simple_python_1")  # math.factorial
    native = case_tools(case, ToolsMode.NATIVE)
    text = case_tools(case, ToolsMode.TEXT_TOOLS)
    assert [t["function"]["name"] for t in native] == ["math_factorial"]
    assert [t["function"]["name"] for t in text] == ["math.factorial"]
    assert native[0]["function"]["parameters"]["type"] == "object"  # BFCL's `dict`
    assert native[0]["function"]["description"].endswith("Note that the provided function is in Python 3 syntax.")
    assert {t["function"]["name"] for t in read_tools(case, native)} == {"math_factorial", "math.factorial"}
    floats = next(c for c in package_cases("simple_python") if '"float"' in json.dumps(c.function))
    fc = json.dumps(case_tools(floats, ToolsMode.NATIVE))
    assert '"float"' not in fc.replace('"format": "float"', "") and '"number"' in fc
    assert case_messages(ToolsMode.NATIVE, case, native) == case.question  # the case's messages, as they are
    hinted = case_messages(ToolsMode.TEXT_TOOLS, case, text)
    assert hinted[0]["role"] == "system" and "math.factorial" in hinted[0]["content"] and hinted[1:] == case.question


def test_a_call_under_either_spelling_is_read_as_that_tool_and_checked_as_bfcl_names_it() -> None:
    case = _case("simple_python", "simple_python_1")
    tools = read_tools(case, case_tools(case, ToolsMode.NATIVE))
    for name in ("math_factorial", "math.factorial"):
        body = _tool_call_body(name, {"number": 5})
        verdict = label_turn(**LLAMACPP.signatures(), mode="native", tools=tools, http_status=200, body=body)
        assert verdict.outcome is Outcome.VALID_CALL
        assert turn_verdict(case, "native", verdict).valid is True


def _tool_call_body(name: str, arguments: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    message = {"role": "assistant", "content": content, "tool_calls": [call] if name else None}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if name else "stop"}]}


def test_a_call_the_stack_lost_in_the_text_is_no_pass_as_served_and_a_pass_as_said() -> None:
    case = _case("simple_python", "simple_python_1")
    tools = read_tools(case, case_tools(case, ToolsMode.NATIVE))
    fenced = '```json\n{"name": "math_factorial", "arguments": {"number": 5}}\n```'
    body = _tool_call_body("", {}, content=fenced)
    verdict = label_turn(**LLAMACPP.signatures(), mode="native", tools=tools, http_status=200, body=body)
    assert verdict.outcome is Outcome.UNPARSEABLE_TEXT and not verdict.calls and verdict.text_calls
    judged = turn_verdict(case, "native", verdict)
    assert (judged.valid, judged.valid_as_said, judged.error_type) == (False, True, "ast_decoder:decoder_failed")


HOSTILE = ["open", "__import__", "os.system", "eval", "exec"]


def test_hostile_calls_are_never_run_only_named_and_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    case = _case("simple_python", "simple_python_1")
    tools = read_tools(case, case_tools(case, ToolsMode.NATIVE))
    rows = []
    for name in HOSTILE:
        body = _tool_call_body(name, {"file": str(marker), "mode": "w", "source": code, "number": code})
        verdict = label_turn(**LLAMACPP.signatures(), mode="native", tools=tools, http_status=200, body=body)
        assert verdict.outcome is Outcome.HALLUCINATED_CALL
        judged = turn_verdict(case, "native", verdict)
        assert (judged.valid, judged.error_type) == (False, "simple_function_checker:wrong_func_name")
        text = label_turn(**LLAMACPP.signatures(), mode="text-tools", tools=tools, http_status=200,
                          body=_tool_call_body("", {}, content=f"{name}({code})"))  # fmt: skip
        assert turn_verdict(case, "text-tools", text).valid is False
        rows.append({"id": name, "stack": "llamacpp", "mode": "native", "http_status": 200, "body": body,
                     "bfcl": {"category": "simple_python", "id": "simple_python_1"}})  # fmt: skip
    exchanges = tmp_path / "hostile.jsonl"
    exchanges.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = orchestrate("classify", str(exchanges))
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["outcome"], r["bfcl_valid"]) for r in out] == [("hallucinated_call", False)] * len(HOSTILE)
    assert not marker.exists() and os.listdir(tmp_path) == ["hostile.jsonl"]


def test_classify_labels_bfcl_exchanges_and_refuses_an_unknown_case(tmp_path: Path) -> None:
    refused = {"error": {"code": 500, "message": "boom"}}
    rows = [
        {"id": 1, "bfcl": {"category": "simple_python", "id": "simple_python_1"}, "http_status": 200,
         "body": _tool_call_body("math_factorial", {"number": 5})},
        {"id": 2, "bfcl": {"category": "irrelevance", "id": "irrelevance_0"}, "http_status": 500, "body": refused},
        {"id": 3, "tools": [], "http_status": 200, "body": _tool_call_body("", {}, content="hi")},
    ]  # fmt: skip
    path = tmp_path / "x.jsonl"
    path.write_text("".join(json.dumps({"stack": "llamacpp", "mode": "native", **row}) + "\n" for row in rows))
    done = orchestrate("classify", str(path))
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r.get("bfcl_valid"), r.get("bfcl_valid_as_said")) for r in out[:2]] == [(True, True), (None, None)]
    assert not any(key.startswith("bfcl") for key in out[2])
    unknown = [({"category": "simple_java", "id": "x"}, "bfcl.category")]
    unknown.append(({"category": "multiple", "id": "n"}, "bfcl.id"))
    for ref, field in unknown:
        line = {"id": 9, "stack": "llamacpp", "mode": "native", "http_status": 200, "bfcl": ref}
        path.write_text(json.dumps(line) + "\n")
        done = orchestrate("classify", str(path))
        assert done.returncode == 2 and f"x.jsonl:1: field '{field}'" in done.stderr, done.stderr
    path.write_text(json.dumps({"id": 9, "stack": "llamacpp", "mode": "native", "http_status": 200}) + "\n")
    assert "field 'tools': required" in orchestrate("classify", str(path)).stderr


def _matrix(**tasks: Any) -> dict[str, Any]:
    return {
        "name": "b",
        "stacks": [{"stack": "llamacpp", "tool_config": "jinja", "launcher": "process"}],
        "models": [{"name": QWEN, "sources": {"llamacpp": {"asset": QWEN}}}],
        "modes": ["native"],
        "tasks": [{"suite": "bfcl", "categories": ["simple_python", "irrelevance"], "count": 3, **tasks}],
    }  # fmt: skip


def test_each_category_is_a_cell_and_other_suites_keep_their_cell_ids() -> None:
    data = _matrix()
    data["tasks"].append({"suite": "ops", "count": 8})
    cells = [cell for plan in expand(Matrix.model_validate(data)) for cell in plan.cells]
    ids = [cell.cell_id for cell in cells]
    base = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__native"
    assert ids == [base, f"{base}__bfcl-simple_python", f"{base}__bfcl-irrelevance"]
    assert [len(cell.seeds) for cell in cells] == [8, 3, 3]
    assert {suite for cell in cells[1:] for suite, _ in cell.seeds} == {"bfcl"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"categories": ["simple_java"]}, "unknown BFCL category 'simple_java'"),
        ({"categories": None}, "bfcl needs `categories`"),
        ({"categories": ["multiple", "multiple"]}, "a category is listed twice"),
        ({"seeds": ["simple_python_0"], "count": None}, "not by `seeds`"),
        ({"count": "some"}, "count\n  Input should be a valid integer"),
    ],
)
def test_bad_bfcl_task_entries_are_one_clear_error(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Matrix.model_validate(_matrix(**change))


def test_categories_and_count_all_belong_to_bfcl_only_and_channels_refuse_it() -> None:
    data = _matrix()
    data["tasks"] = [{"suite": "ops", "count": "all"}]
    with pytest.raises(ValueError, match="for the bfcl suite only"):
        Matrix.model_validate(data)
    with pytest.raises(ValueError, match="scored by its own checker"):
        Matrix.model_validate({**_matrix(), "channels": ["model"]})
    assert np.isclose(len(Matrix.model_validate(_matrix(count="all")).suites()["bfcl"].seeds), 400 + 240)


def test_in_native_hint_a_call_read_from_the_text_is_no_call_served_only_said() -> None:
    case = _case("simple_python", "simple_python_1")
    tools = read_tools(case, case_tools(case, ToolsMode.NATIVE_HINT))
    text = '{"name": "math.factorial", "arguments": {"number": 5}}'
    verdict = label_turn(**LLAMACPP.signatures(), mode="native+hint", tools=tools, http_status=200,
                         body=_tool_call_body("", {}, content=text))  # fmt: skip
    assert verdict.outcome is Outcome.VALID_CALL and verdict.calls  # the mode's label reads it from the text
    judged = turn_verdict(case, "native+hint", verdict)
    assert (judged.valid, judged.valid_as_said) == (False, True)  # the stack delivered no tool_calls
    delivered = label_turn(**LLAMACPP.signatures(), mode="native+hint", tools=tools, http_status=200,
                           body=_tool_call_body("math_factorial", {"number": 5}))  # fmt: skip
    judged = turn_verdict(case, "native+hint", delivered)
    assert (judged.valid, judged.valid_as_said) == (True, True)
    hinted = case_messages(ToolsMode.NATIVE_HINT, case, case_tools(case, ToolsMode.NATIVE_HINT))
    assert "math.factorial" in hinted[0]["content"] and "math_factorial" not in hinted[0]["content"]


def test_an_empty_answer_has_no_verdict_and_the_table_says_why() -> None:
    case = _case("simple_python", "simple_python_1")
    tools = read_tools(case, case_tools(case, ToolsMode.NATIVE))
    empty = {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "tool_calls"}]}
    verdict = label_turn(**LLAMACPP.signatures(), mode="native", tools=tools, http_status=200, body=empty)
    assert verdict.outcome is Outcome.NON_RESPONSE
    assert turn_verdict(case, "native", verdict).valid is None
    turns = [_turn("s0", True, True, category="simple_python"), _turn("s1", None, None, outcome="non_response",
             category="simple_python")]  # fmt: skip
    turns[1]["detail"] = verdict.detail
    cells = {"c": {"category": "simple_python", "stack_label": "s", "model": "m", "tools_mode": "native"}}
    row = cell_table(cells, {"c": turns}, DEFAULT_BOOTSTRAP).iloc[0]
    assert (row["n_verdict"], row["n_no_verdict"], row["no_verdict"]) == (1, 1, f"{verdict.detail} 1")


def test_subscores_never_mix_two_samples_of_one_category() -> None:
    cells, counted = {}, {}
    for sample, valid in ((0, False), (1, True)):
        cell_id = "s__m__native" + (f"__sample-{sample}" if sample else "") + "__bfcl-simple_python"
        cells[cell_id] = {"category": "simple_python", "stack_label": "s", "model": "m", "tools_mode": "native",
                          "order": sample}  # fmt: skip
        counted[cell_id] = [{**_turn("x", valid, valid, category="simple_python"), "cell_id": cell_id}]
    table = subscore_table(cell_table(cells, counted, DEFAULT_BOOTSTRAP))
    assert sorted(zip(table["variant"], table["served"], strict=True)) == [
        ("s__m__native", 0.0), ("s__m__native__sample-1", 1.0)
    ]


def test_a_verdict_of_another_category_or_incoherent_is_refused() -> None:
    turn = _turn("s0", True, True, category="irrelevance")
    cells = {"c": {"category": "simple_python", "stack_label": "s", "model": "m", "tools_mode": "native"}}
    with pytest.raises(ValueError, match="its verdict names case 's0' of 'irrelevance'"):
        cell_table(cells, {"c": [turn]}, DEFAULT_BOOTSTRAP)
    for bad in ({"valid": True, "valid_as_said": None}, {"valid": True, "error_type": "x"}):
        broken = _turn("s0", True, True)
        broken["bfcl"].update(bad)
        with pytest.raises(ValueError, match="is no BFCL verdict"):
            cell_table({"c": {**cells["c"], "category": "irrelevance"}}, {"c": [broken]}, DEFAULT_BOOTSTRAP)


def test_a_run_snapshot_is_read_only_when_its_sha256_is_the_recorded_one(tmp_path: Path) -> None:
    cases = select(package_cases("irrelevance"), 3)
    raw = snapshot_bytes(cases)
    (tmp_path / "bfcl").mkdir()
    (tmp_path / "bfcl" / "cases.jsonl").write_bytes(raw)
    recorded = {"bfcl": provenance_record(cases, raw)}
    assert snapshot_cases(tmp_path, recorded) == cases
    assert recorded["bfcl"]["data"] == {"BFCL_v4_irrelevance.json": sha256_of(data_file("irrelevance"))}
    (tmp_path / "bfcl" / "cases.jsonl").write_bytes(raw.replace(b"irrelevance_", b"irrelevance-", 1))
    with pytest.raises(SuiteError, match=r"bfcl/cases.jsonl: not the BFCL cases this run recorded \(sha256"):
        snapshot_cases(tmp_path, recorded)
    for provenance in ({}, {"bfcl": "x"}, {"bfcl": {"snapshot": ["x"]}}):
        with pytest.raises(SuiteError, match="records no sha256 for it"):
            snapshot_cases(tmp_path, provenance)
    (tmp_path / "bfcl" / "cases.jsonl").unlink()
    with pytest.raises(SuiteError, match="the run's BFCL cases cannot be read"):
        snapshot_cases(tmp_path, recorded)


def test_a_suite_file_cannot_declare_benchmark_cases(tmp_path: Path) -> None:
    for data in ({"suite": "x", "benchmark": "bfcl-eval==1"}, {"suite": "x", "seeds": [{"id": "a", "bfcl": {}}]}):
        with pytest.raises(SuiteError, match="come from the bfcl suite only"):
            parse_suite(data, tmp_path / "x.yaml")


def test_triage_peers_of_a_bfcl_cell_share_its_category() -> None:
    def facts(cell_id: str, stack: str, category: str | None) -> CellFacts:
        config = {"cell_id": cell_id, "model": "m", "tools_mode": "native", "stack_label": stack, "stack": stack,
                  "category": category}  # fmt: skip
        return CellFacts(config, {}, [])

    everything = {f.config["cell_id"]: f for f in (
        facts("a1", "a", "simple_python"), facts("b1", "b", "simple_python"), facts("b2", "b", "irrelevance"),
        facts("b3", "b", None))}  # fmt: skip
    assert [p.config["cell_id"] for p in _peers(everything["a1"], everything)] == ["b1"]
    assert [p.config["cell_id"] for p in _peers(everything["b3"], everything)] == []
