"""The parallel-call suite (seeds/parallel.yaml) and its scoring (analysis/report/parallel.py). Pure."""

from __future__ import annotations

import copy
import csv
import hashlib
import importlib.util
import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from orchestrator.analysis.report.parallel import (
    CHECKS,
    indexes_distinct,
    parallel_scores,
    parallel_seed_scores,
    score_turn,
    write_parallel_report,
)
from orchestrator.core.stats import BootstrapSettings, bootstrap_mean_interval
from orchestrator.core.types import ParsedCall
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.suites import tasks
from orchestrator.runner.suites.tasks import ParallelCall, Suite, SuiteError, answer_correct, execute
from orchestrator.serving.registry import REPO_ROOT

SUITE_FILE = REPO_ROOT / "seeds" / "parallel.yaml"

# --- The suite ------------------------------------------------------------------------------------------------


def test_parallel_suite_loads_with_two_or_three_calls_per_seed() -> None:
    suite = load_suite("parallel")
    assert len(suite.seeds) >= 8 and suite.submit_tool == "submit"
    assert "parallel" in suite.system_prompt and "one turn" in suite.system_prompt
    for seed in suite.seeds:
        assert seed.parallel is not None and len(seed.parallel) in (2, 3), seed.id
        for call in seed.parallel:  # every argument is named in the request: the model can know it
            assert all(str(value) in seed.request for value in call.arguments.values()), (seed.id, call)
    # Varied: weather, stocks, populations, time zones; two different tools in one turn; both call counts.
    tools_used = {call.name for seed in suite.seeds for call in seed.parallel or []}
    assert tools_used == {"get_weather", "get_population", "get_stock_price", "get_timezone"}
    assert any(len({call.name for call in seed.parallel or []}) == 2 for seed in suite.seeds)
    assert {len(seed.parallel or []) for seed in suite.seeds[:8]} == {2, 3}
    assert len({seed.template for seed in suite.seeds[:8]}) >= 6


def test_parallel_seed_file_is_what_make_seeds_writes() -> None:
    spec = importlib.util.spec_from_file_location("make_seeds", REPO_ROOT / "scripts" / "make_seeds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render(module.build()["parallel"]) == SUITE_FILE.read_text()


def number(text: Any) -> float:
    return float(re.sub(r"[^\d.-]", "", str(text)))


def solve(suite: Suite, seed: Any) -> Any:
    """An ideal agent: the seed's parallel calls (all in the first turn), then the answer from their results."""
    results = {}
    for call in seed.parallel:
        done = execute(suite, seed, ParsedCall(name=call.name, arguments=call.arguments))
        assert not done.error, (seed.id, call, done.result)
        results[(call.name, *call.arguments.values())] = done.result

    def temperature(city: str) -> float:
        row = results[("get_weather", city)]
        row = row.get("current", row)
        value = row.get("temperature_c", row.get("temperature"))
        return number(value["value"] if isinstance(value, dict) else value)

    def raining(city: str) -> bool:
        row = results[("get_weather", city)]
        return row.get("current", row)["condition"].lower() == "rain"

    def population(city: str) -> float:
        value = results[("get_population", city)]["population"]
        return number(value["value"] if isinstance(value, dict) else value)

    def price(ticker: str) -> float:
        row = results[("get_stock_price", ticker)]
        return number(row["quote"]["last"] if "quote" in row else row["price"])

    def offset(city: str) -> float:
        row = results[("get_timezone", city)]
        if "utc_offset_hours" in row:
            return row["utc_offset_hours"]
        sign, hours, minutes = re.fullmatch(r"([+-])(\d\d):(\d\d)", row["utc_offset"]).groups()
        return (1 if sign == "+" else -1) * (int(hours) + int(minutes) / 60)

    keys = list(dict.fromkeys(next(iter(call.arguments.values())) for call in seed.parallel))
    first, last = keys[0], keys[-1]
    return {
        "warmest": lambda: max(keys, key=temperature),
        "temp-diff": lambda: abs(temperature(first) - temperature(last)),
        "stock-sum": lambda: round(sum(price(t) for t in keys), 2),
        "stock-highest": lambda: max(keys, key=price),
        "population-sum": lambda: sum(population(c) for c in keys),
        "timezone-gap": lambda: "postpone" if raining(last) else offset(last) - offset(first),
        "roadshow": lambda: population(last if raining(first) else first),
    }[seed.template]()


def test_every_parallel_seed_is_solved_from_its_parallel_calls() -> None:
    suite = load_suite("parallel")
    answers = []
    for seed in suite.seeds:
        answer = solve(suite, seed)
        submitted = execute(suite, seed, ParsedCall(name="submit", arguments={"answer": str(answer)}))
        assert submitted.submitted and answer_correct(seed.expected, submitted.answer), (seed.id, seed.expected, answer)
        answers.append(answer)
    assert len({str(a) for a in answers}) == len(answers)  # the answers differ seed to seed
    assert "postpone" in answers  # the conditional templates take both branches
    assert any(s.template == "timezone-gap" and s.expected != "postpone" for s in suite.seeds)


def suite_data() -> dict[str, Any]:
    return yaml.safe_load(SUITE_FILE.read_text())


def write_suite(directory: Path, data: dict[str, Any]) -> None:
    (directory / f"{data['suite']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "get_forecast", "arguments": {"city": "Paris"}}, r"parallel\[0\] \(get_forecast\): names a tool"),
        ({"name": "get_weather", "arguments": {"town": "Paris"}}, r"do not validate .*schema:"),
        ({"name": "get_weather", "arguments": {"city": 7}}, r"do not validate .*schema:"),
        ({"name": "submit", "arguments": {"answer": "x"}}, r"the submit tool ends the task"),
        ({"name": "get_weather", "arguments": {"city": "Atlantis"}}, r"dry run answers with an error.*Atlantis"),
        ({"tool": "get_weather", "arguments": {"city": "Paris"}}, r"parallel\.0\.name"),
    ],
)
def test_a_bad_parallel_entry_is_refused_with_a_clear_error(tmp_path: Path, entry: dict, message: str) -> None:
    write_suite(tmp_path, suite_data())
    assert load_suite("parallel", tmp_path).seeds[0].parallel  # the unchanged copy loads
    data = suite_data()
    data["seeds"][0]["parallel"][0] = entry
    write_suite(tmp_path, data)
    with pytest.raises(SuiteError, match=message) as raised:
        load_suite("parallel", tmp_path)
    assert "par-00" in str(raised.value) or "parallel.0" in str(raised.value)


def test_a_parallel_turn_needs_two_distinct_calls(tmp_path: Path) -> None:
    data = suite_data()
    data["seeds"][0]["parallel"] = data["seeds"][0]["parallel"][:1]
    data["seeds"][1]["parallel"] = [data["seeds"][1]["parallel"][0]] * 2
    write_suite(tmp_path, data)
    with pytest.raises(SuiteError, match=r"par-00: a parallel turn needs at least two calls, not 1.*par-01: the same"):
        load_suite("parallel", tmp_path)


def test_an_mcp_suite_checks_parallel_against_the_servers_tools(tmp_path: Path, monkeypatch) -> None:
    formation = yaml.safe_load((REPO_ROOT / "seeds" / "formation.yaml").read_text())
    listed = [{"type": "function", "function": {"name": "md5", "parameters": {"type": "object"}}}]
    monkeypatch.setattr(tasks, "_listed_tools", lambda server: listed)
    formation["seeds"][0]["parallel"] = [{"name": "md5", "arguments": {}}, {"name": "sha1", "arguments": {}}]
    formation["deterministic"] = ["md5"]
    write_suite(tmp_path, formation)
    with pytest.raises(SuiteError, match=r"f-01: parallel\[1\] \(sha1\): names a tool the suite does not offer"):
        load_suite("formation", tmp_path)


# --- Scoring one first turn -----------------------------------------------------------------------------------

PARIS_OSLO = [
    ParallelCall(name="get_weather", arguments={"city": "Paris"}),
    ParallelCall(name="get_weather", arguments={"city": "Oslo"}),
]
MIXED = [  # two tools, one city in two calls: its value is not "another call's" for the call that matches
    ParallelCall(name="get_weather", arguments={"city": "Lima"}),
    ParallelCall(name="get_population", arguments={"city": "Lima"}),
    ParallelCall(name="get_population", arguments={"city": "Oslo"}),
]


IDS = itertools.count()


def call(name: str, city: Any, call_id: str | None = "auto", **extra: Any) -> dict[str, Any]:
    """A stored call: `city` is the city argument (or the whole arguments object); ids unique unless given."""
    arguments = city if isinstance(city, dict) else {"city": city, **extra}
    return {"name": name, "arguments": arguments, "id": f"call_{next(IDS)}" if call_id == "auto" else call_id}


def wx(city: Any, call_id: str | None = "auto", **extra: Any) -> dict[str, Any]:
    return call("get_weather", city, call_id, **extra)


def pop(city: Any, call_id: str | None = "auto") -> dict[str, Any]:
    return call("get_population", city, call_id)


def first(calls: list[dict], **fields: Any) -> dict[str, Any]:
    return {"calls": calls, "parse_path": "server", "stream": False, **fields}


def verdict(*values: bool | None) -> dict[str, bool | None]:
    """The expected checks, in CHECKS order: count_ok, ids_distinct, indexes_distinct, no_leakage, all_ok."""
    return dict(zip(CHECKS, values, strict=True))


T, F, NA = True, False, None
PO = PARIS_OSLO


@pytest.mark.parametrize(
    ("turn", "expected", "want"),
    [
        (first([wx("Paris"), wx("Oslo")]), PO, verdict(T, T, NA, T, T)),
        (first([wx(" oslo"), wx("PARIS ")]), PO, verdict(T, T, NA, T, T)),  # any order; strip and casefold
        (first([wx("Paris, Oslo")]), PO, verdict(F, T, NA, F, F)),  # merged into one call
        (first([wx("Paris", also="Oslo"), wx("Oslo")]), PO, verdict(T, T, NA, F, F)),  # merged arguments
        (first([wx({"Paris": {}, "Oslo": {}})]), PO, verdict(F, T, NA, F, F)),  # merged objects
        (first([wx("Paris", "c1"), wx("Oslo", "c1")]), PO, verdict(T, F, NA, T, F)),  # duplicate ids
        (first([wx("Paris", None), wx("Oslo")]), PO, verdict(T, F, NA, T, F)),  # the stack gave no id
        (first([wx("Paris"), wx("Oslo"), wx("Paris")]), PO, verdict(F, T, NA, F, F)),  # one expected call made twice
        (first([wx("Paris"), wx("Oslo"), wx("Lima")]), PO, verdict(F, T, NA, T, F)),  # a surplus call, no leaked value
        (first([wx("Paris"), wx("Oslo"), wx("Paris and Oslo")]), PO, verdict(F, T, NA, F, F)),  # a surplus merged call
        (first([wx("Paris"), wx("Oslo"), wx({"Paris": {}, "Oslo": {}})]), PO, verdict(F, T, NA, F, F)),  # in keys
        (first([wx("Paris"), pop("Oslo")]), PO, verdict(T, T, NA, F, F)),  # the wrong tool
        (first([wx("Paris")]), PO, verdict(F, T, NA, F, F)),  # one call missing
        (first([]), PO, verdict(F, NA, NA, F, F)),  # no call at all
        (first([wx("Paris", None), wx("Oslo", None)], parse_path="harness"), PO, verdict(T, NA, NA, T, T)),
        (first([wx("Lima"), pop("Lima"), pop("Oslo")]), MIXED, verdict(T, T, NA, T, T)),  # two tools, one city twice
        (first([wx("Lima"), pop("Lima, Oslo")]), MIXED, verdict(F, T, NA, F, F)),
    ],
)
def test_score_turn(turn: dict[str, Any], expected: list[ParallelCall], want: dict[str, bool | None]) -> None:
    assert score_turn(turn, expected) == want


@pytest.mark.parametrize(
    ("stream", "facts", "flags", "want"),
    [
        (True, {"call_indexes": [0, 1]}, [], True),
        (True, {"call_indexes": [0, 1]}, ["stream:index_collision"], False),  # two ids under one index
        (True, {"call_indexes": [0]}, [], False),  # fewer indexes than calls
        (True, {"call_indexes": [1, 0, 2]}, [], False),
        (True, None, [], None),  # a stream whose facts were not kept: unknown
        (False, {"call_indexes": [0, 1]}, ["stream:index_collision"], None),  # not streamed: no index to check
    ],
)
def test_indexes_distinct_only_for_streamed_turns(
    stream: bool, facts: dict | None, flags: list[str], want: bool | None
) -> None:
    turn = first([wx("Paris"), wx("Oslo")], stream=stream, stream_facts=facts, flags=flags)
    scored = score_turn(turn, PARIS_OSLO)
    assert scored["indexes_distinct"] is want
    assert scored["all_ok"] is (want is not False)


# --- Per cell -------------------------------------------------------------------------------------------------


def hand_suite() -> Suite:
    """Eight seeds that each expect get_weather for Paris and Oslo in one turn."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]},
            },
        }
        for name, key in (("get_weather", "city"), ("get_population", "city"), ("submit", "answer"))
    ]
    rows = {"Paris": {"temperature_c": 20}, "Oslo": {"temperature_c": 5}}
    seeds = [
        {
            "id": f"s{i}",
            "request": "Weather in Paris and Oslo?",
            "expected": "Paris",
            "parallel": [c.model_dump() for c in PARIS_OSLO],
            "data": {"weather": rows},
        }
        for i in range(8)
    ]
    return Suite.model_validate(
        {
            "suite": "parallel",
            "version": 1,
            "description": "hand-built",
            "system_prompt": "Call independent tools in parallel, in one turn.",
            "tools": tools,
            "dry_run": {
                "get_weather": {"kind": "lookup", "table": "weather", "key": "city"},
                "get_population": {"kind": "lookup", "table": "weather", "key": "city"},
                "submit": {"kind": "submit", "key": "answer"},
            },
            "seeds": seeds,
        }
    )


def record(seed: str, calls: list[dict], cell: str = "c1", **fields: Any) -> dict[str, Any]:
    return {
        "cell_id": cell,
        "seed": seed,
        "suite": "parallel",
        "turn": 0,
        "attempt": 0,
        "seed_attempt": 0,
        "outcome": "valid_call",
        "tools_mode": "native",
        "model": "m",
        "stack_config": "llamacpp-jinja",
        "parse_path": "server",
        "stream": False,
        "calls": calls,
        **fields,
    }


GOOD = [wx("Paris", "a"), wx("Oslo", "b")]
STREAMED = {"stream": True, "stream_facts": {"call_indexes": [0, 1]}}


def cell_records() -> list[dict[str, Any]]:
    """c1: seven seeds with a known verdict each, plus records that must not count; c2: refused throughout."""
    return [
        record("s0", GOOD, **STREAMED),  # all pass
        record("s0", [], turn=1, outcome="no_call_prose"),  # a later turn: not scored
        # two calls streamed under one index: the assembler concatenates them into one unparsable call
        record("s1", [], outcome="unparseable_text", stream=True, flags=["stream:index_collision"],
               stream_facts={"call_indexes": [0], "call_ids": [["x", "y"]]}),
        record("s2", [wx("Paris, Oslo")]),  # merged: count and leakage fail
        record("s3", [wx("Paris", None), wx("Oslo", None)], parse_path="harness"),  # ids N/A, all pass
        record("s4", [], outcome="rejected_request"),  # unscored
        record("s5", [], outcome="non_response"),  # attempt 0 was not answered ...
        record("s5", GOOD, attempt=1),  # ... its final attempt was: all pass
        record("s6", GOOD, superseded=True),  # a superseded run: not counted
        record("s6", [wx("Paris")], seed_attempt=1),  # the counted one: count and leakage fail
        record("s7", GOOD),  # a run whose server died under it: never counted
        record("s7", [], turn=1, end="server_died"),
        {**record("s0", [], cell="c1"), "suite": "ops", "seed": "ops-00"},  # another suite
        record("s0", [], cell="c2", outcome="rejected_request"),
        record("s1", [], cell="c2", outcome="non_response"),
    ]


def test_seed_rows_take_the_counted_first_turn_in_its_final_attempt() -> None:
    rows = {(r["cell_id"], r["seed"]): r for r in parallel_seed_scores(cell_records(), hand_suite())}
    assert sorted(rows) == [("c1", f"s{i}") for i in range(7)] + [("c2", "s0"), ("c2", "s1")]
    assert rows[("c1", "s5")]["all_ok"] is True and rows[("c1", "s5")]["outcome"] == "valid_call"
    assert rows[("c1", "s6")]["count_ok"] is False and rows[("c1", "s6")]["n_calls"] == 1
    assert rows[("c1", "s4")]["scored"] is False and rows[("c1", "s4")]["count_ok"] is None


def test_cell_rates_match_hand_counts() -> None:
    settings = BootstrapSettings(resamples=2000, rng_seed=7)
    scores = parallel_scores(cell_records(), {"parallel": hand_suite()}, settings)
    c1 = scores.set_index("cell_id").loc["c1"]
    assert (c1["n_seeds"], c1["n_unscored"]) == (6, 1)  # s0 s1 s2 s3 s5 s6 scored; s4 refused; s7 never counted
    # per seed (s0, s1, s2, s3, s5, s6); None = the check does not apply
    hand = {
        "count_ok": [1, 0, 0, 1, 1, 0],  # 3/6
        "ids_distinct": [1, None, 1, None, 1, 1],  # 4/4
        "indexes_distinct": [1, 0, None, None, None, None],  # 1/2
        "no_leakage": [1, 0, 0, 1, 1, 0],  # 3/6
        "all_ok": [1, 0, 0, 1, 1, 0],  # 3/6
    }
    expected_rates = {"count_ok": 3 / 6, "ids_distinct": 4 / 4, "indexes_distinct": 1 / 2, "no_leakage": 3 / 6}
    expected_rates["all_ok"] = 3 / 6
    for check, values in hand.items():
        applied = [v for v in values if v is not None]
        assert c1[f"{check}_rate"] == pytest.approx(expected_rates[check]), check
        assert c1[f"{check}_n"] == len(applied), check
        low, high = bootstrap_mean_interval(np.asarray(applied, dtype=float), settings)
        assert (c1[f"{check}_low"], c1[f"{check}_high"]) == pytest.approx((low, high)), check
        if 0 < expected_rates[check] < 1:  # mixed values: the interval has width
            assert 0 <= c1[f"{check}_low"] < c1[f"{check}_rate"] < c1[f"{check}_high"] <= 1, check
    c2 = scores.set_index("cell_id").loc["c2"]
    assert (c2["n_seeds"], c2["n_unscored"]) == (0, 2)
    assert all(c2[f"{check}_n"] == 0 and np.isnan(c2[f"{check}_rate"]) for check in CHECKS)


def test_a_cell_that_always_passes_has_a_point_interval_and_no_suite_gives_no_rows() -> None:
    records = [record(f"s{i}", GOOD) for i in range(3)]
    row = parallel_scores(records, {"parallel": hand_suite()}).iloc[0]
    assert (row["all_ok_rate"], row["all_ok_low"], row["all_ok_high"], row["n_seeds"]) == (1.0, 1.0, 1.0, 3)
    assert parallel_scores(records, {"ops": hand_suite()}).empty


# --- Report files ---------------------------------------------------------------------------------------------


def test_write_parallel_report_writes_csv_and_markdown(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    # A run recorded before suites were snapshotted: today's suite is copied in because its sha256 is the recorded one.
    recorded = hashlib.sha256((REPO_ROOT / "seeds" / "parallel.yaml").read_bytes()).hexdigest()
    store.create({"matrix": {"bootstrap": {"resamples": 500}}, "provenance": {"seeds": {"parallel.yaml": recorded}}})
    suite = load_suite("parallel")
    seed, other = suite.seeds[0], suite.seeds[1]
    perfect = [{"name": c.name, "arguments": c.arguments, "id": f"id{n}"} for n, c in enumerate(seed.parallel or [])]
    turns = [
        record(seed.id, perfect),
        record(other.id, [{"name": "get_stock_price", "arguments": {"ticker": "A, B"}, "id": "x"}]),
    ]
    out = store.dir / "report"
    written = write_parallel_report(store, turns, out)
    assert written == [out / "parallel.csv", out / "parallel.md"]
    rows = list(csv.DictReader((out / "parallel.csv").open()))
    assert len(rows) == 1 and rows[0]["cell_id"] == "c1" and rows[0]["n_seeds"] == "2"
    assert float(rows[0]["count_ok_rate"]) == 0.5 and float(rows[0]["no_leakage_rate"]) == 0.5
    markdown = (out / "parallel.md").read_text()
    assert "50 [0,100] n2" in markdown and "| c1 " in markdown
    assert "—" in markdown  # indexes_distinct: no streamed turn
    assert not (store.dir / "seeds").exists()  # the recorded suite read in place: a report never writes into a run


def test_write_parallel_report_writes_nothing_without_parallel_turns(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.create({"matrix": {}})
    turns = [{**record("ops-00", []), "suite": "ops"}]
    assert write_parallel_report(store, copy.deepcopy(turns), store.dir / "report") == []
    assert not (store.dir / "report").exists()


def test_a_recorded_index_collision_scores_indexes_distinct_false_end_to_end() -> None:
    """Ollama's /v1 stream with two calls at index 0 (tests/data/streams/ollama_v1_index_collision.json)."""
    from orchestrator.core.labelling import StreamInput, label_turn
    from orchestrator.serving.registry import load_stack
    from orchestrator.serving.streaming import parse_stream_text
    from tests.replay import streamshapes

    data = streamshapes.fixture("ollama_v1_index_collision")
    spec = load_stack(data["stack"])
    stream = StreamInput(parse_stream_text(data["body"], data["api"]), data["api"], None)
    verdict = label_turn(**spec.signatures(), mode="native", tools=data["tools"], http_status=200, stream=stream)
    turn = {"stream": True, "flags": verdict.flags, "stream_facts": verdict.stream_facts,
            "calls": [call.model_dump() for call in verdict.calls], "parse_path": verdict.parse_path}
    assert indexes_distinct(turn, turn["calls"]) is False
    assert len(verdict.stream_facts["call_ids"][0]) == 2  # both ids kept as evidence
