"""`orchestrate diff`: seed-paired run comparison, the multiple-comparison correction, config changes, and
bad input. The committed example runs are read only; modified copies are built in tmp_path."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.analysis.compare import rundiff as diff_module
from orchestrator.analysis.compare.diffconfig import argv_units, compare_configs
from orchestrator.analysis.compare.diffstats import (
    PERMUTATION_TEST,
    benjamini_hochberg,
    holm,
    p_floor,
    paired_bootstrap,
    sign_flip_p,
)
from orchestrator.analysis.compare.rundiff import DiffError, diff_runs, diff_within, seed_fidelities
from orchestrator.cli import app
from orchestrator.core.stats import BootstrapSettings
from orchestrator.runner.config.cellconfig import IDENTITY_DEFAULTS, config_sha256

REPO = Path(__file__).resolve().parent.parent
CPU_RUN = REPO / "results" / "examples" / "20261203T131653Z-cpu-87d008"
V1_RUN = REPO / "tests" / "fixtures" / "runs" / "20261202T154426Z-cpu-9c81b1"
VLLM_CELL = "vllm-hermes__qwen2.5-coder-0.5b-instruct__native"
# Valid calls on 7 of its 8 seeds (0.2, 1, 1, 1, 1, 0.5, 0, 1): turning them all into hallucinated calls gives 7
# negative paired differences and one 0, so the sign-flip p is 2 / 2^7 = 1/64 at best. Over 24 cells that is a
# Holm-adjusted 24/64 = 0.375: 8 seeds cannot show it; compared alone (--cell) it is a regression.
REGRESSED_CELL = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__constrained"
REGRESSED_P = 4 / 256  # of the 2^8 sign vectors, all-same signs on the 7 nonzero differences (x2 for the zero)
SUMMARY_KEYS = {"run_a", "run_b", "correction", "alpha", "resamples", "rng_seed", "cells", "only_in_a", "only_in_b"}
SUMMARY_KEYS |= {"regressions", "improvements", "test", "n_compared", "any_detectable", "min_seeds_note", "cell_globs"}
CELL_KEYS = {"cell_id", "n_paired_seeds", "mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_value", "p_adjusted"}
CELL_KEYS |= {"verdict", "config_changes", "flags_added", "flags_removed", "p_floor", "n_nonzero", "detectable"}
CELL_KEYS |= {"own_mean_a", "own_mean_b", "p_floor_paired", "n_lost_seeds"}
SUMMARY_KEYS |= {"became_undefined", "became_defined"}
NO_POWER_NOTE = (
    "with 8 paired seeds and 24 cells, no single-cell change can reach corrected significance "
    "(smallest holm-adjusted p 0.188 >= alpha 0.05); compare fewer cells (--cell) or run more seeds"
)

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["diff", *args])


def copy_run(tmp_path: Path, name: str = "copy", source: Path = CPU_RUN) -> Path:
    return Path(shutil.copytree(source, tmp_path / name))


def read_cell(run: Path, cell_id: str) -> dict[str, Any]:
    return json.loads((run / "cells" / f"{cell_id}.json").read_text())


def write_cell(run: Path, cell: dict[str, Any]) -> None:
    (run / "cells" / f"{cell['cell_id']}.json").write_text(json.dumps(cell, indent=2))


def rewrite_turns(run: Path, change) -> None:
    """Apply `change` to every turn record (it returns the record, or None to drop it)."""
    lines = (run / "turns.jsonl").read_text().splitlines()
    records = [change(json.loads(line)) for line in lines if line.strip()]
    (run / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r is not None))


def keep_seeds(run: Path, cell_id: str, seeds: list[str]) -> None:
    """Drop the other seeds' records of `cell_id` and plan only `seeds` in its cell file: a complete cell that ran
    what it planned (the reader takes a planned seed without an end for a lost record)."""
    rewrite_turns(run, lambda r: r if r["cell_id"] != cell_id or r["seed"] in seeds else None)
    cell = read_cell(run, cell_id)
    cell["seeds"] = [seed for seed in cell["seeds"] if seed in seeds]
    write_cell(run, cell)


def hallucinate(cell_id: str):
    def change(record: dict[str, Any]) -> dict[str, Any]:
        if record["cell_id"] == cell_id and record["outcome"] == "valid_call":
            record["outcome"] = "hallucinated_call"
        return record

    return change


def as_json(result: Any) -> dict[str, Any]:
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def by_cell(diff: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {cell["cell_id"]: cell for cell in diff["cells"]}


# --- identical runs -------------------------------------------------------------------------------------------


def test_run_against_identical_copy_changes_nothing(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    result = invoke(str(CPU_RUN), str(copy), "--json", "--fail-on-regression")
    assert result.exit_code == 0, result.output
    diff = json.loads(result.stdout)
    assert set(diff) >= SUMMARY_KEYS and all(set(cell) >= CELL_KEYS for cell in diff["cells"])
    assert (diff["correction"], diff["alpha"], diff["resamples"]) == ("holm", 0.05, 10_000)
    assert diff["test"] == PERMUTATION_TEST == "sign-flip permutation (exact for n <= 16)"
    assert (diff["regressions"], diff["improvements"], diff["only_in_a"], diff["only_in_b"]) == (0, 0, [], [])
    assert len(diff["cells"]) == 32
    defined = [cell for cell in diff["cells"] if cell["verdict"] != "undefined"]
    assert len(defined) == 24  # the 8 cells refused on every turn have no defined seed
    for cell in defined:
        assert (cell["delta"], cell["ci_low"], cell["ci_high"], cell["p_value"]) == (0, 0, 0, 1)
        assert cell["verdict"] == "no_change" and cell["mean_a"] == cell["mean_b"]
        assert cell["own_mean_a"] == cell["own_mean_b"] == cell["mean_a"]  # every seed paired
        assert (cell["n_nonzero"], cell["p_floor"], cell["detectable"]) == (0, 1, False)
        assert cell["p_floor_paired"] == 2 / 2 ** cell["n_paired_seeds"] and cell["n_lost_seeds"] == 0
    assert diff["n_compared"] == 24 and diff["any_detectable"] is False
    assert diff["min_seeds_note"] == NO_POWER_NOTE  # 24 * 2/256 >= 0.05 even had every seed differed
    for cell in diff["cells"]:
        assert (cell["config_changes"], cell["flags_added"], cell["flags_removed"]) == ([], [], [])
    undefined = by_cell(diff)["vllm-default__qwen2.5-coder-0.5b-instruct__native"]
    assert (undefined["verdict"], undefined["n_paired_seeds"], undefined["delta"]) == ("undefined", 0, None)
    assert (undefined["n_undefined_a"], undefined["n_undefined_b"]) == (8, 8)
    assert (undefined["p_value"], undefined["p_floor"], undefined["detectable"]) == (None, None, False)


def test_table_output_names_correction_and_verdicts(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    result = invoke(str(CPU_RUN), str(copy))
    assert result.exit_code == 0, result.output
    assert "correction: holm over 24 cell(s), alpha 0.05; p: sign-flip permutation" in result.stdout
    assert "no_change" in result.stdout and "undefined" in result.stdout
    assert " ".join(result.stdout.split("\n")[-2].split()) == f"note: {NO_POWER_NOTE}"  # the last line


# --- config changes -------------------------------------------------------------------------------------------


def test_added_flag_is_a_config_change(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    cell = read_cell(copy, VLLM_CELL)
    cell["argv"] = [*cell["argv"], "--foo"]
    cell["config_sha256"] = config_sha256(cell)
    write_cell(copy, cell)
    diff = as_json(invoke(str(CPU_RUN), str(copy), "--json"))
    changed = by_cell(diff)[VLLM_CELL]
    assert changed["flags_added"] == ["--foo"] and changed["flags_removed"] == []
    fields = {c["field"]: c for c in changed["config_changes"]}
    assert set(fields) == {"argv", "config_sha256"}
    assert fields["argv"]["after"][-1] == "--foo" and "--foo" not in fields["argv"]["before"]
    assert fields["argv"]["status"] == "changed"
    others = [c for c in diff["cells"] if c["cell_id"] != VLLM_CELL]
    assert all(c["config_changes"] == [] for c in others)
    table = invoke(str(CPU_RUN), str(copy)).stdout  # 80 columns: the changes are listed under the table
    assert f"{VLLM_CELL}: config changes: argv, config_sha256" in table and "argv: added --foo" in table


def test_changed_flag_value_reads_as_one_removed_and_one_added(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    cell = read_cell(copy, VLLM_CELL)
    cell["argv"] = ["pythonic" if item == "hermes" else item for item in cell["argv"]]
    write_cell(copy, cell)
    changed = by_cell(as_json(invoke(str(CPU_RUN), str(copy), "--json")))[VLLM_CELL]
    assert changed["flags_added"] == ["--tool-call-parser pythonic"]
    assert changed["flags_removed"] == ["--tool-call-parser hermes"]


def test_other_port_and_cache_path_are_not_changes(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    cell = read_cell(copy, VLLM_CELL)
    text = json.dumps(cell).replace("33533", "41999").replace("/root/.cache/toolcall-matrix", "/srv/models")
    moved = json.loads(text)
    assert moved["base_url"].endswith(":41999") and "--port" in moved["argv"]
    assert moved["model_path"].startswith("/srv/models/")
    write_cell(copy, moved)
    changed = by_cell(as_json(invoke(str(CPU_RUN), str(copy), "--json")))[VLLM_CELL]
    assert (changed["config_changes"], changed["flags_added"], changed["flags_removed"]) == ([], [], [])


def test_older_cell_fields_are_absent_not_null() -> None:
    diff = diff_runs(V1_RUN, CPU_RUN)
    cell = next(c for c in diff.cells if c.cell_id == "vllm-hermes__qwen2.5-coder-0.5b-instruct__native")
    status = {c.field: c.status for c in cell.config_changes}
    assert status["sampler"] == status["config_sha256"] == "absent_in_a"
    assert "call_format" not in status  # absent in both, and absent reads as its default in the digest
    absent = next(c for c in cell.config_changes if c.field == "sampler")
    assert absent.before is None and absent.after is not None


def test_argv_units_pair_flags_with_their_values() -> None:
    assert argv_units(["bin", "--port", "8000", "--jinja", "-c", "2048", "--x=1"]) == [
        "bin",
        "--port 8000",
        "--jinja",
        "-c 2048",
        "--x=1",
    ]
    before = {"argv": ["bin", "--a", "--b", "1"], "base_url": "http://h:1"}
    after = {"argv": ["bin", "--b", "1", "--c"], "base_url": "http://h:2"}
    config = compare_configs(before, after)
    assert (config.flags_added, config.flags_removed) == (["--c"], ["--a"])


def test_argv_units_keep_a_negative_number_with_its_flag() -> None:
    argv = ["bin", "--temp", "-1", "--top-k", "-0.5", "--x", "1e-3", "--seed", "+3", "-", "--jinja"]
    assert argv_units(argv) == ["bin", "--temp -1", "--top-k -0.5", "--x 1e-3", "--seed +3", "-", "--jinja"]
    assert argv_units(["--a", "--b", "-1"]) == ["--a", "--b -1"]
    assert argv_units(["-1", "x"]) == ["-1", "x"]  # a number is never a flag, even first
    config = compare_configs({"argv": ["bin", "--temp", "-1"]}, {"argv": ["bin", "--temp", "-2"]})
    assert (config.flags_added, config.flags_removed) == (["--temp -2"], ["--temp -1"])


CANARY_TEXT = "<|im_start|>system\nYou are a canary<|im_end|>"


def canary(sha: str | None) -> dict[str, Any]:
    return {"via": "tokenize", "prompt": CANARY_TEXT + str(sha), "sha256": sha, "n_tokens": 9, "error": None}


def test_sampling_defaults_canary_and_raw_template_are_compared() -> None:
    defaults = {"source": "server:props", "values": {"temperature": 0.8}, "active_unsent": []}
    before = {"sampling_defaults": defaults, "canary": canary("aa"), "raw_template_sha256": "r1"}
    after = {
        "sampling_defaults": {**defaults, "values": {"temperature": 0.6}},
        "canary": canary("bb"),
        "raw_template_sha256": "r2",
    }
    changes = {c.field: c for c in compare_configs(before, after).config_changes}
    assert set(changes) == {"sampling_defaults", "canary", "raw_template_sha256"}
    assert all(c.status == "changed" for c in changes.values())
    assert changes["sampling_defaults"].after["values"] == {"temperature": 0.6}
    assert (changes["canary"].before, changes["canary"].after) == ("aa", "bb")  # by its sha256 alone
    assert (changes["raw_template_sha256"].before, changes["raw_template_sha256"].after) == ("r1", "r2")
    dumped = json.dumps(compare_configs(before, after).model_dump())
    assert CANARY_TEXT not in dumped  # never the prompt text
    same = {
        "sampling_defaults": defaults,
        "canary": {**canary("aa"), "prompt": "other text"},
        "raw_template_sha256": "r1",
    }
    assert compare_configs(before, same).config_changes == []  # the same sha256 is the same canary
    gone = {c.field: c for c in compare_configs(before, {}).config_changes}
    assert {f: c.status for f, c in gone.items()} == {f: "absent_in_b" for f in changes}
    assert gone["canary"].before == "aa" and gone["canary"].after is None


def plain_canary(sha: str | None, plain_sha: str | None) -> dict[str, Any]:
    return {**canary(sha), "plain": {**canary(plain_sha), "prompt": CANARY_TEXT + "plain"}}


def test_the_tool_less_canary_is_compared_too() -> None:
    old = {"canary": canary("aa"), "canary_sha256": "aa"}  # written before canary.plain existed
    new = {"canary": plain_canary("aa", "p1")}  # a newer file: no top-level canary_sha256
    assert compare_configs(new, {"canary": plain_canary("aa", "p1"), "canary_sha256": "aa"}).config_changes == []
    changed = {c.field: c for c in compare_configs(new, {"canary": plain_canary("aa", "p2")}).config_changes}
    assert set(changed) == {"canary_plain"} and changed["canary_plain"].status == "changed"
    assert (changed["canary_plain"].before, changed["canary_plain"].after) == ("p1", "p2")  # by its sha256
    both = {c.field: c for c in compare_configs(new, {"canary": plain_canary("bb", "p2")}).config_changes}
    assert {f: (c.before, c.after) for f, c in both.items()} == {"canary": ("aa", "bb"), "canary_plain": ("p1", "p2")}
    assert CANARY_TEXT not in json.dumps([c.model_dump() for c in both.values()])  # never the prompt text
    absent = {c.field: c for c in compare_configs(old, new).config_changes}
    assert set(absent) == {"canary_plain"}  # the with-tools canary is the same sha256, read either way
    assert (absent["canary_plain"].status, absent["canary_plain"].before, absent["canary_plain"].after) == (
        "absent_in_a",
        None,
        "p1",
    )
    assert [(c.field, c.status) for c in compare_configs(new, old).config_changes] == [("canary_plain", "absent_in_b")]
    # A rendering that failed has sha256 None: a key both files have, so a change, not an absence.
    failed = {c.field: c for c in compare_configs(new, {"canary": plain_canary("aa", None)}).config_changes}
    assert (failed["canary_plain"].status, failed["canary_plain"].after) == ("changed", None)
    # canary.sha256 comes first; an older file's top-level canary_sha256 only when the canary has none.
    assert (
        compare_configs({"canary": canary("aa"), "canary_sha256": "stale"}, {"canary_sha256": "aa"}).config_changes
        == []
    )


def test_a_key_one_file_lacks_is_absent_never_changed() -> None:
    new = {"canary": canary("c1"), "canary_sha256": "c1", "chat_template_sha256": "t1", "call_format": "json"}
    fields = {"canary", "chat_template_sha256", "call_format"}  # the canary is one field, by its sha256
    old_without: dict[str, Any] = {}  # written before the fields existed
    old_with_none = {"canary_sha256": None, "chat_template_sha256": None, "call_format": "auto"}
    absent = {c.field: c for c in compare_configs(old_without, new).config_changes}
    assert {f: c.status for f, c in absent.items()} == {f: "absent_in_a" for f in fields}
    assert all(c.before is None for c in absent.values()) and absent["canary"].after == "c1"
    changed = {c.field: c for c in compare_configs(old_with_none, new).config_changes}
    assert {f: c.status for f, c in changed.items()} == {f: "changed" for f in fields}
    assert (changed["canary"].before, changed["canary"].after) == (None, "c1")
    assert (changed["call_format"].before, changed["call_format"].after) == ("auto", "json")
    back = {c.field: c.status for c in compare_configs(new, old_without).config_changes}
    assert back == {f: "absent_in_b" for f in fields}
    # Missing on one side and at the digest's default on the other: no difference (the digest reads them alike).
    assert compare_configs({}, dict(IDENTITY_DEFAULTS)).config_changes == []
    assert [c.field for c in compare_configs({}, {"chat_template_sha256": None}).config_changes] == [
        "chat_template_sha256"  # no recorded default: a key one side lacks is absent, whatever its value
    ]


# --- seeds ----------------------------------------------------------------------------------------------------


def test_seed_fidelities_use_the_one_definition_and_keep_seed_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    real = diff_module.per_seed_fidelity

    def spy(seeds: list[str], outcomes: list[str]) -> dict[str, float | None]:
        calls.append(list(seeds))
        return real(seeds, outcomes)

    monkeypatch.setattr(diff_module, "per_seed_fidelity", spy)
    records = [
        {"suite": "ops", "seed": "s1", "outcome": "valid_call"},
        {"suite": "web", "seed": "s1", "outcome": "hallucinated_call"},  # same seed name, other suite
        {"suite": "ops", "seed": "s1", "sample": 1, "outcome": "rejected_request"},  # other sample: undefined
        {"suite": "ops", "seed": "s1", "outcome": "non_response"},  # not eligible
        {"suite": "ops", "seed": "s1", "outcome": "no_call_prose"},
    ]
    fidelity = seed_fidelities(records, {"suites": ["ops", "web"]})
    assert list(fidelity.items()) == [(("ops", "s1", 0), 0.5), (("web", "s1", 0), 0.0), (("ops", "s1", 1), None)]
    assert len(calls) == 1 and len(set(calls[0])) == 3  # one call, one key per (suite, seed, sample)
    assert seed_fidelities([], {}) == {}
    # A record without a suite takes the cell's only suite.
    assert seed_fidelities([{"seed": "s", "outcome": "valid_call"}], {"suites": ["ops"]}) == {("ops", "s", 0): 1.0}
    before = len(calls)
    diff_runs(CPU_RUN, CPU_RUN, cells=[REGRESSED_CELL])
    assert len(calls) == before + 2  # each side's seeds, through the same function


# --- regressions ----------------------------------------------------------------------------------------------


def test_forced_regression_over_all_cells_is_honestly_not_detectable(tmp_path: Path) -> None:
    worse = copy_run(tmp_path, "worse")
    rewrite_turns(worse, hallucinate(REGRESSED_CELL))
    result = invoke(str(CPU_RUN), str(worse), "--json", "--fail-on-regression")
    assert result.exit_code == 0, result.output  # 8 seeds over 24 cells: no correction lets it through
    diff = json.loads(result.stdout)
    cell = by_cell(diff)[REGRESSED_CELL]
    assert cell["mean_b"] == 0 and cell["delta"] < 0 and cell["ci_high"] < 0  # the interval does exclude 0
    assert (cell["n_paired_seeds"], cell["n_nonzero"]) == (8, 7)
    assert cell["p_value"] == pytest.approx(REGRESSED_P) and cell["p_floor"] == pytest.approx(2 / 2**7)
    assert cell["p_adjusted"] == pytest.approx(24 * REGRESSED_P) and cell["detectable"] is False
    # The interval excludes 0 but the corrected p cannot pass: inconclusive, not no_change.
    assert cell["verdict"] == "inconclusive" and (diff["regressions"], diff["improvements"]) == (0, 0)
    assert diff["any_detectable"] is False and diff["min_seeds_note"] == NO_POWER_NOTE
    plain = invoke(str(CPU_RUN), str(worse))
    assert plain.exit_code == 0 and "regressions: 0, improvements: 0" in plain.stdout
    assert "no single-cell change can reach corrected significance" in plain.stdout and "inconclusive" in plain.stdout
    others = [c for c in diff["cells"] if c["cell_id"] != REGRESSED_CELL and c["verdict"] != "undefined"]
    assert others and all(c["verdict"] == "no_change" for c in others)  # their intervals hold 0


def test_forced_regression_of_one_selected_cell_fails_the_exit_status(tmp_path: Path) -> None:
    worse = copy_run(tmp_path, "worse")
    rewrite_turns(worse, hallucinate(REGRESSED_CELL))
    result = invoke(str(CPU_RUN), str(worse), "--cell", REGRESSED_CELL, "--json", "--fail-on-regression")
    assert result.exit_code == 1, result.output
    diff = json.loads(result.stdout)
    assert [c["cell_id"] for c in diff["cells"]] == [REGRESSED_CELL] and diff["cell_globs"] == [REGRESSED_CELL]
    cell = diff["cells"][0]
    assert diff["n_compared"] == 1 and cell["p_adjusted"] == cell["p_value"] == pytest.approx(REGRESSED_P)
    assert cell["detectable"] is True and diff["min_seeds_note"] is None
    assert cell["verdict"] == "regression" and (diff["regressions"], diff["improvements"]) == (1, 0)
    plain = invoke(str(CPU_RUN), str(worse), "--cell", REGRESSED_CELL)  # only fails the exit status when asked
    assert plain.exit_code == 0 and "regressions: 1, improvements: 0" in plain.stdout
    assert f"holm over 1 cell(s) matching --cell {REGRESSED_CELL}" in plain.stdout and "note:" not in plain.stdout
    reverse = as_json(invoke(str(worse), str(CPU_RUN), "--cell", "*jinja__qwen*__constrained", "--json"))
    assert by_cell(reverse)[REGRESSED_CELL]["verdict"] == "improvement" and reverse["regressions"] == 0


def test_bh_is_selectable_and_named_and_cell_is_repeatable(tmp_path: Path) -> None:
    worse = copy_run(tmp_path, "worse")
    rewrite_turns(worse, hallucinate(REGRESSED_CELL))
    two = ("--cell", REGRESSED_CELL, "--cell", VLLM_CELL)
    diff = as_json(invoke(str(CPU_RUN), str(worse), "--json", "--correction", "bh", *two))
    assert (diff["correction"], diff["alpha"], diff["n_compared"]) == ("bh", 0.05, 2)
    cell = by_cell(diff)[REGRESSED_CELL]
    assert cell["p_adjusted"] == pytest.approx(2 * REGRESSED_P) and cell["verdict"] == "regression"
    strict = as_json(invoke(str(CPU_RUN), str(worse), "--json", "--correction", "bh", "--alpha", "0.01", *two))
    assert by_cell(strict)[REGRESSED_CELL]["verdict"] == "inconclusive" and strict["any_detectable"] is False


def test_cell_glob_matching_nothing_is_an_error_and_an_unchanged_cell_is_still_detectable() -> None:
    assert_clean_error(invoke(str(CPU_RUN), str(CPU_RUN), "--cell", "sglang*"), "--cell 'sglang*': matches no cell")
    diff = as_json(invoke(str(CPU_RUN), str(CPU_RUN), "--cell", VLLM_CELL, "--json"))
    # One cell, 8 paired seeds: a change could pass (2/256 < 0.05). Detectability is of the design: that
    # identical runs differ on no seed (p_floor 1, kept as information) does not make the cell blind.
    cell = diff["cells"][0]
    assert (cell["n_paired_seeds"], cell["n_nonzero"], cell["p_floor"], cell["p_floor_paired"]) == (8, 0, 1, 2 / 256)
    assert cell["detectable"] is True and diff["any_detectable"] is True and diff["min_seeds_note"] is None


def test_unchanged_release_passes_require_power_and_the_gate(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    gate = ("--cell", VLLM_CELL, "--require-power", "--fail-on-regression")
    result = invoke(str(CPU_RUN), str(copy), *gate)
    assert result.exit_code == 0, result.output
    assert "note:" not in result.stdout and "cannot reach corrected significance" not in result.stdout
    assert invoke(str(CPU_RUN), str(copy), *gate, "--json").exit_code == 0
    # The number of paired seeds decides, not how many differ: 2 seeds give 2/4 >= 0.05 even alone.
    two = copy_run(tmp_path, "two")
    keep_seeds(two, VLLM_CELL, ["ops-00", "ops-01"])
    short = invoke(str(two), str(two), "--cell", VLLM_CELL, "--require-power")
    assert short.exit_code == 3 and "with 2 paired seeds and 1 cells" in " ".join(short.output.split())


def test_seeds_and_cells_in_one_run_only_are_listed(tmp_path: Path) -> None:
    fewer = copy_run(tmp_path, "fewer")
    gone = "vllm-hermes__smollm2-135m-instruct__native"
    (fewer / "cells" / f"{gone}.json").unlink()

    rewrite_turns(fewer, lambda r: None if r["cell_id"] == gone else r)
    keep_seeds(fewer, REGRESSED_CELL, [f"ops-0{i}" for i in range(7)])  # ops-07 gone from B
    diff = as_json(invoke(str(CPU_RUN), str(fewer), "--json"))
    assert diff["only_in_a"] == [gone] and diff["only_in_b"] == []
    cell = by_cell(diff)[REGRESSED_CELL]
    assert cell["seeds_only_in_a"] == ["ops/ops-07"] and cell["n_paired_seeds"] == 7
    back = as_json(invoke(str(fewer), str(CPU_RUN), "--json"))
    assert back["only_in_b"] == [gone] and by_cell(back)[REGRESSED_CELL]["seeds_only_in_b"] == ["ops/ops-07"]
    # A cell gone from B fails the release gate, and the text says so; a cell new in B does not.
    gate = invoke(str(CPU_RUN), str(fewer), "--fail-on-regression")
    assert gate.exit_code == 1, gate.output
    assert f"cells only in A: {gone} (missing from B: fails --fail-on-regression)" in gate.stdout
    reason = " ".join(gate.output.split())
    assert "--fail-on-regression: failed: 1 cell(s) lost seeds defined in A (undefined or missing in B): " in reason
    assert f"{REGRESSED_CELL} (1); 1 cell(s) only in A (missing from B)" in reason  # ops-07 gone from B
    assert by_cell(diff)[REGRESSED_CELL]["n_lost_seeds"] == 1 and by_cell(back)[REGRESSED_CELL]["n_lost_seeds"] == 0
    assert invoke(str(CPU_RUN), str(fewer)).exit_code == 0  # only when asked
    assert invoke(str(fewer), str(CPU_RUN), "--fail-on-regression").exit_code == 0


def test_each_side_shows_its_own_figure_beside_the_paired_one(tmp_path: Path) -> None:
    fewer = copy_run(tmp_path, "fewer")  # ops-07 (1 valid of 1) gone from B: A's own mean keeps it
    keep_seeds(fewer, REGRESSED_CELL, [f"ops-0{i}" for i in range(7)])
    cell = by_cell(as_json(invoke(str(CPU_RUN), str(fewer), "--json")))[REGRESSED_CELL]
    assert cell["own_mean_a"] == pytest.approx(5.7 / 8) and cell["mean_a"] == pytest.approx(4.7 / 7)
    assert cell["own_mean_b"] == cell["mean_b"] == pytest.approx(4.7 / 7)
    table = invoke(str(CPU_RUN), str(fewer)).stdout
    row = next(line for line in table.splitlines() if "67.1 (71.2)" in line)  # paired (own) for A; B as one
    assert row.split()[2:5] == ["67.1", "(71.2)", "67.1"]
    assert row.split()[-1] == "no_change!"  # ops-07 is lost: marked, and the footer says how many


def refuse_all(cell_id: str):
    def change(record: dict[str, Any]) -> dict[str, Any]:
        if record["cell_id"] == cell_id:
            record["outcome"] = "rejected_request"
        return record

    return change


def test_refusal_collapse_became_undefined_fails_the_gate(tmp_path: Path) -> None:
    refused = copy_run(tmp_path, "refused")  # the stack now refuses every request of one cell
    rewrite_turns(refused, refuse_all(REGRESSED_CELL))
    result = invoke(str(CPU_RUN), str(refused), "--json", "--fail-on-regression")
    assert result.exit_code == 1, result.output
    diff = json.loads(result.stdout)
    cell = by_cell(diff)[REGRESSED_CELL]
    assert (cell["verdict"], cell["n_paired_seeds"], cell["mean_a"], cell["p_value"]) == (
        "became_undefined",
        0,
        None,
        None,
    )
    assert cell["own_mean_a"] == pytest.approx(5.7 / 8) and cell["own_mean_b"] is None  # A's figure stays in view
    assert (diff["became_undefined"], diff["became_defined"], diff["regressions"]) == (1, 0, 0)
    assert "1 cell(s) became undefined" in result.output
    assert invoke(str(CPU_RUN), str(refused), "--json").exit_code == 0  # only fails the exit status when asked
    table = invoke(str(CPU_RUN), str(refused), "--fail-on-regression")
    assert table.exit_code == 1 and "became_undefined" in table.stdout and "— (71.2)" in table.stdout
    assert "became undefined: 1, became defined: 0" in table.stdout
    back = as_json(invoke(str(refused), str(CPU_RUN), "--json", "--fail-on-regression"))  # exit 0 (as_json)
    assert by_cell(back)[REGRESSED_CELL]["verdict"] == "became_defined"
    assert (back["became_undefined"], back["became_defined"]) == (0, 1)
    assert invoke(str(refused), str(CPU_RUN), "--fail-on-regression").exit_code == 0
    # Undefined on both sides (refused in both runs) stays plain undefined, and passes.
    both = as_json(invoke(str(refused), str(refused), "--json"))
    assert by_cell(both)[REGRESSED_CELL]["verdict"] == "undefined" and both["became_undefined"] == 0


COLLAPSED = [f"ops-0{i}" for i in range(6)]  # 6 of REGRESSED_CELL's 8 seeds, all defined in A


def test_partial_collapse_lost_seeds_fail_the_gate(tmp_path: Path) -> None:
    collapsed = copy_run(tmp_path, "collapsed")  # B refuses every request of 6 seeds; ops-06, ops-07 unchanged

    def refuse(record: dict[str, Any]) -> dict[str, Any]:
        if record["cell_id"] == REGRESSED_CELL and record["seed"] in COLLAPSED:
            record["outcome"] = "rejected_request"
        return record

    rewrite_turns(collapsed, refuse)
    result = invoke(str(CPU_RUN), str(collapsed), "--json", "--fail-on-regression")
    assert result.exit_code == 1, result.output
    diff = json.loads(result.stdout)
    cell = by_cell(diff)[REGRESSED_CELL]
    # The 2 seeds left paired did not change: the statistics say no_change, and the verdict stays theirs.
    assert (cell["verdict"], cell["n_paired_seeds"], cell["delta"]) == ("no_change", 2, 0)
    assert (cell["n_undefined_b"], cell["n_lost_seeds"], cell["seeds_only_in_a"]) == (6, 6, [])
    assert (diff["regressions"], diff["became_undefined"]) == (0, 0)
    others = [c for c in diff["cells"] if c["cell_id"] != REGRESSED_CELL]
    assert all(c["n_lost_seeds"] == 0 for c in others)
    reason = " ".join(result.output.split())
    assert (
        "--fail-on-regression: failed: 1 cell(s) lost seeds defined in A (undefined or missing in B): "
        f"{REGRESSED_CELL} (6)"
    ) in reason
    alone = invoke(str(CPU_RUN), str(collapsed), "--cell", REGRESSED_CELL, "--fail-on-regression")
    assert alone.exit_code == 1 and "no_change!" in alone.stdout  # the text marks the cell
    assert "lost 6 seed(s) defined in A (undefined or missing in B): fails --fail-on-regression" in alone.stdout
    assert "! lost seeds defined in A" in alone.stdout
    assert invoke(str(CPU_RUN), str(collapsed)).exit_code == 0  # only fails the exit status when asked
    back = invoke(str(collapsed), str(CPU_RUN), "--json", "--fail-on-regression")  # seeds that became defined
    assert back.exit_code == 0 and by_cell(json.loads(back.stdout))[REGRESSED_CELL]["n_lost_seeds"] == 0


def test_require_power_exits_3_when_no_cell_is_detectable(tmp_path: Path) -> None:
    copy = copy_run(tmp_path)
    blind = invoke(str(CPU_RUN), str(copy), "--json", "--require-power")
    assert blind.exit_code == 3, blind.output
    assert json.loads(blind.stdout)["any_detectable"] is False  # stdout stays one JSON object
    assert f"--require-power: failed: {NO_POWER_NOTE}" in " ".join(blind.output.split())
    assert invoke(str(CPU_RUN), str(copy)).exit_code == 0  # without the flag: unchanged
    worse = copy_run(tmp_path, "worse")
    rewrite_turns(worse, hallucinate(REGRESSED_CELL))
    alone = ("--cell", REGRESSED_CELL, "--require-power")
    assert invoke(str(CPU_RUN), str(worse), *alone).exit_code == 0  # detectable: power is there
    assert invoke(str(CPU_RUN), str(worse), *alone, "--fail-on-regression").exit_code == 1
    nothing = invoke(str(CPU_RUN), str(copy), "--cell", "vllm-default__*__native", "--require-power")  # refused
    assert nothing.exit_code == 3 and "no cell has a seed defined in both runs" in nothing.output


# --- statistics -----------------------------------------------------------------------------------------------


def test_holm_and_bh_against_hand_computed_values() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06.
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: 0.005*4/1=0.02, 0.01*4/2=0.02, 0.03*4/3=0.04, 0.04*4/4=0.04 (running min from the top).
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # Capped at 1; BH steps up: 0.5*2/1=1.0 falls to 0.9*2/2=0.9.
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert benjamini_hochberg([0.5, 0.9]) == pytest.approx([0.9, 0.9])
    assert holm([0.2]) == benjamini_hochberg([0.2]) == pytest.approx([0.2])


def test_bh_matches_scipy() -> None:
    from scipy import stats  # a test dependency (pyproject's test extra): missing, the test errors, never skips
    p = np.random.default_rng(3).uniform(0, 0.2, size=17)
    assert benjamini_hochberg(p.tolist()) == pytest.approx(stats.false_discovery_control(p, method="bh").tolist())


def test_paired_interval_hand_computed() -> None:
    assert paired_bootstrap(np.full(8, -0.25)) == (-0.25, -0.25)  # all equal c: the interval is [c, c]
    assert paired_bootstrap(np.zeros(5)) == (0.0, 0.0)
    # Two seeds, differences 0 and 1: resampled means are 0, 0.5, 1 with chances 1/4, 1/2, 1/4, so the 95%
    # interval is [0, 1].
    assert paired_bootstrap(np.array([0.0, 1.0])) == (0.0, 1.0)
    # Deterministic under the recorded seed; another seed draws other resamples.
    values = np.round(np.random.default_rng(0).normal(size=12), 3)
    assert paired_bootstrap(values) == paired_bootstrap(values)
    assert paired_bootstrap(values, BootstrapSettings(rng_seed=1)) != paired_bootstrap(values)
    with pytest.raises(ValueError):
        paired_bootstrap(np.array([]))


def test_sign_flip_p_hand_computed() -> None:
    # [0.5]*3: of the 8 sign vectors only +++ and --- reach |mean| 0.5.
    assert sign_flip_p(np.array([0.5, 0.5, 0.5])) == 0.25
    assert sign_flip_p(np.array([0.5, 0.5, 0.5, 0.0])) == 0.25  # a zero flips to itself
    assert sign_flip_p(np.array([1.0, -1.0])) == 1.0  # means 0, 0, +-1: all reach the observed 0
    assert sign_flip_p(-np.arange(1, 9) / 10) == 2 / 256  # 8 distinct negatives: only all-same signs
    assert sign_flip_p(np.array([-0.7])) == 1.0  # one seed: -0.7 and +0.7 are equally far out
    assert sign_flip_p(np.zeros(6)) == 1.0
    # Float noise: 0.1 + 0.2 and 0.3 must tie, so [0.1, 0.2, -0.3] has p = 1 (every flip reaches |0| or more).
    assert sign_flip_p(np.array([0.1, 0.2, -0.3])) == 1.0
    # Observed sum 0.5; with +0.5 the others add 0.6, 0.4, 0.2, 0, 0, -0.2, -0.4, -0.6, so the totals 1.1, 0.9, 0.7,
    # 0.5 and 0.5 reach it (the two 0.5 only up to float noise); mirrored with -0.5: 10 of 16.
    assert sign_flip_p(np.array([0.3, -0.1, -0.2, 0.5])) == 10 / 16
    with pytest.raises(ValueError):
        sign_flip_p(np.array([]))


def brute_force_p(values: list[float]) -> float:
    """The exact sign-flip p by another route: every sign tuple from itertools, Python sums, a tolerance."""
    observed = abs(sum(values))
    flips = list(itertools.product((1, -1), repeat=len(values)))
    hits = sum(abs(sum(s * v for s, v in zip(signs, values, strict=True))) >= observed - 1e-9 for signs in flips)
    return hits / len(flips)


def test_sign_flip_p_matches_brute_force() -> None:
    rng = np.random.default_rng(5)
    for n in range(1, 11):
        values = np.round(rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0], size=n) * rng.uniform(0.5, 1.0), 3)
        assert sign_flip_p(values) == pytest.approx(brute_force_p(values.tolist())), values


def test_sign_flip_p_monte_carlo_past_16() -> None:
    # 20 differences of +-1, 14 positive: the flipped sum is 2B - 20 with B ~ Binomial(20, 1/2), so
    # p = P(|2B - 20| >= 8) = 2 * P(B <= 6), by math.comb.
    values = np.array([1.0] * 14 + [-1.0] * 6)
    exact = 2 * sum(math.comb(20, i) for i in range(7)) / 2**20
    assert exact == pytest.approx(0.11532, abs=1e-5)
    p = sign_flip_p(values)
    assert abs(p - exact) < 0.01 and p == sign_flip_p(values)  # within MC error, and deterministic
    assert sign_flip_p(values, BootstrapSettings(rng_seed=1)) != p
    assert p * 10_001 == pytest.approx(round(p * 10_001))  # (count + 1) / (resamples + 1)
    assert 1 / 10_001 <= sign_flip_p(np.linspace(0.1, 0.3, 20)) <= 5 / 10_001  # never 0, near the floor
    # 17 seeds, one of them 0: 16 differences move, so it is still exact (2 / 2^16, below any sampled p).
    assert sign_flip_p(np.r_[np.arange(1, 17) / 100, 0.0]) == 2 / 2**16


def test_p_floor_values_and_attained() -> None:
    assert [p_floor(k) for k in (0, 1, 2, 3, 8, 16)] == [1, 1, 0.5, 0.25, 2 / 256, 2 / 65536]
    assert p_floor(17) == p_floor(17, 10_000) == 1 / 10_001 and p_floor(40, 99) == 1 / 100
    for k in range(1, 9):  # distinct same-sign differences reach the floor exactly
        assert sign_flip_p(np.arange(1, k + 1) / 10) == p_floor(k)


# --- --within -------------------------------------------------------------------------------------------------


def test_within_pairs_the_models_and_modes_both_stacks_have() -> None:
    result = invoke(str(CPU_RUN), "--within", "llamacpp-jinja", "vllm-hermes", "--json")
    assert result.exit_code == 0, result.output
    diff = json.loads(result.stdout)
    assert diff["within"] == ["llamacpp-jinja", "vllm-hermes"] and diff["run_a"] == diff["run_b"]
    models = ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")
    modes = ("native", "native_hint", "text-tools", "constrained")
    assert {c["cell_id"] for c in diff["cells"]} == {f"{m}__{mode}" for m in models for mode in modes}
    for cell in diff["cells"]:
        assert cell["cell_a"] == f"llamacpp-jinja__{cell['cell_id']}"
        assert cell["cell_b"] == f"vllm-hermes__{cell['cell_id']}"
        fields = {c["field"] for c in cell["config_changes"]}
        assert {"stack", "argv", "parser"} <= fields
        assert "--tool-call-parser hermes" in cell["flags_added"] and "--jinja" in cell["flags_removed"]
    assert (diff["only_in_a"], diff["only_in_b"]) == ([], [])
    hint = by_cell(diff)["smollm2-135m-instruct__native_hint"]
    assert (hint["n_paired_seeds"], hint["n_undefined_a"]) == (7, 1)


def test_within_in_python_matches_the_cli() -> None:
    diff = diff_within(CPU_RUN, "llamacpp-jinja", "vllm-hermes", correction="bh")
    assert diff.correction == "bh" and diff.n_compared == 8
    narrowed = diff_within(CPU_RUN, "llamacpp-jinja", "vllm-hermes", cells=["*__constrained"])
    assert [c.cell_id for c in narrowed.cells] == [
        f"{m}__constrained" for m in ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")
    ]
    assert narrowed.n_compared == 2 and narrowed.cell_globs == ["*__constrained"]
    cli = as_json(
        invoke(str(CPU_RUN), "--within", "llamacpp-jinja", "vllm-hermes", "--cell", "*__constrained", "--json")
    )
    assert [c["cell_id"] for c in cli["cells"]] == [c.cell_id for c in narrowed.cells]
    with pytest.raises(DiffError, match="matches no cell"):
        diff_within(CPU_RUN, "llamacpp-jinja", "vllm-hermes", cells=["llamacpp-jinja__*"])  # the within-form id


def test_within_unknown_stack_and_wrong_arity() -> None:
    result = invoke(str(CPU_RUN), "--within", "llamacpp-jinja", "sglang-x")
    assert result.exit_code == 2 and "sglang-x" in result.output and "vllm-hermes" in result.output
    assert invoke(str(CPU_RUN), str(CPU_RUN), "--within", "a", "b").exit_code == 2
    assert invoke(str(CPU_RUN)).exit_code == 2
    with pytest.raises(DiffError):
        diff_within(CPU_RUN, "vllm-hermes", "vllm-hermes")


# --- bad input ------------------------------------------------------------------------------------------------


def assert_clean_error(result: Any, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output.replace("\n", ""), result.output


def test_missing_run_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert_clean_error(invoke(str(CPU_RUN), str(missing)), str(missing))


def test_corrupt_turn_line(tmp_path: Path) -> None:
    bad = copy_run(tmp_path, "bad")
    lines = (bad / "turns.jsonl").read_text().splitlines()
    lines[3] = "{not json"
    (bad / "turns.jsonl").write_text("\n".join(lines) + "\n")
    assert_clean_error(invoke(str(bad), str(CPU_RUN), "--json"), f"{bad / 'turns.jsonl'}:4")


def test_missing_cell_file(tmp_path: Path) -> None:
    bad = copy_run(tmp_path, "bad")
    path = bad / "cells" / f"{VLLM_CELL}.json"
    path.unlink()
    assert_clean_error(invoke(str(CPU_RUN), str(bad)), str(path))


def test_corrupt_cell_file_and_bad_options(tmp_path: Path) -> None:
    bad = copy_run(tmp_path, "bad")
    path = bad / "cells" / f"{VLLM_CELL}.json"
    path.write_text("[1, 2")
    assert_clean_error(invoke(str(CPU_RUN), str(bad)), str(path))
    assert_clean_error(invoke(str(CPU_RUN), str(CPU_RUN), "--correction", "bonferroni"), "bonferroni")
    assert_clean_error(invoke(str(CPU_RUN), str(CPU_RUN), "--alpha", "1.5"), "--alpha")
