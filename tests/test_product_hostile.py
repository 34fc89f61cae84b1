"""Issue 28, hostile input on the product surfaces: a tampered product run (manifest `cases`, the recorded gates,
turn records' `executions`) is one clear error naming the file and field, or damage under --allow-damaged,
never a traceback; `channels` on a run without channels writes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cliinprocess import orchestrate
from tests.conftest import REPO

PRODUCT_RUN = REPO / "results" / "examples" / "20261203T194941Z-product-cpu-7ec463"
PLAIN_RUN = REPO / "results" / "examples" / "20261203T131653Z-cpu-87d008"
Json = dict[str, Any]


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*-ablation"))
    return target


def _edit_manifest(run: Path, change: Callable[[Json], None]) -> None:
    path = run / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _edit_turns(run: Path, change: Callable[[Json], None]) -> None:
    path = run / "turns.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        change(record)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def _set_cases(value: Any) -> Callable[[Json], None]:
    return lambda manifest: manifest.__setitem__("cases", value)


def _set_suite_fact(key: str, value: Any) -> Callable[[Json], None]:
    return lambda manifest: manifest["cases"]["formation"].__setitem__(key, value)


def _set_expectation(value: Any) -> Callable[[Json], None]:
    return lambda manifest: manifest["cases"]["formation"]["expect"].__setitem__("f-01", value)


def _set_gate(value: Any) -> Callable[[Json], None]:
    return lambda manifest: manifest["matrix"].__setitem__("gate", value)


# (name, manifest change, the field the error names)
MANIFEST_DAMAGE = [
    ("suite-facts-a-list", _set_cases({"formation": []}), "cases.formation"),
    ("expect-a-list", _set_suite_fact("expect", [1]), "cases.formation.expect"),
    ("core-a-number", _set_suite_fact("core", 5), "cases.formation.core"),
    ("expectation-a-number", _set_expectation(5), "cases.formation.expect.f-01"),
    ("expectation-empty", _set_expectation({}), "cases.formation.expect.f-01"),
    ("gate-a-number", _set_gate([5]), "matrix.gate"),
    ("gate-a-string", _set_gate("product.core.answer >= 1/2"), "matrix.gate"),
    ("gate-unreadable", _set_gate(["x"]), "matrix.gate"),
    ("gate-threshold-5000-digits", _set_gate(["product.core.answer >= " + "9" * 5000]), "matrix.gate"),
    ("channels-a-string", lambda m: m["matrix"].__setitem__("channels", "product"), "matrix.channels"),
]


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in MANIFEST_DAMAGE], ids=[c[0] for c in MANIFEST_DAMAGE])
@pytest.mark.parametrize("command", ["channels", "gate", "report"])
def test_a_tampered_product_manifest_is_one_clear_error(
    tmp_path: Path, command: str, change: Callable[[Json], None], field: str
) -> None:
    run = _copy(PRODUCT_RUN, tmp_path)
    _edit_manifest(run, change)
    result = orchestrate(command, str(run))
    assert result.returncode == 2, result.stdout + result.stderr
    error = " ".join(result.stderr.split())
    assert "manifest.json" in error and f"field '{field}" in error, error
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in MANIFEST_DAMAGE], ids=[c[0] for c in MANIFEST_DAMAGE])
def test_a_tampered_product_manifest_is_damage_under_allow_damaged(
    tmp_path: Path, change: Callable[[Json], None], field: str
) -> None:
    run = _copy(PRODUCT_RUN, tmp_path)
    _edit_manifest(run, change)
    result = orchestrate("report", str(run), "--allow-damaged")
    assert result.returncode == 0, result.stdout + result.stderr
    damage = (run / "report" / "DAMAGE.md").read_text()
    assert "manifest.json" in damage and f"field '{field}" in damage


def _executions_an_object(record: Json) -> None:
    if record.get("executions"):
        record["executions"] = {"call": "md5"}


def _execution_a_number(record: Json) -> None:
    if record.get("executions"):
        record["executions"] = [5]


def _final_answer_an_object(record: Json) -> None:
    if record.get("final_answer"):
        record["final_answer"] = {"text": record["final_answer"]}


TURN_DAMAGE = [
    ("executions-an-object", _executions_an_object, "executions"),
    ("execution-a-number", _execution_a_number, "executions"),
    ("final-answer-an-object", _final_answer_an_object, "final_answer"),
]


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in TURN_DAMAGE], ids=[c[0] for c in TURN_DAMAGE])
@pytest.mark.parametrize("command", ["channels", "gate", "report"])
def test_tampered_product_records_are_one_clear_error(
    tmp_path: Path, command: str, change: Callable[[Json], None], field: str
) -> None:
    run = _copy(PRODUCT_RUN, tmp_path)
    _edit_turns(run, change)
    result = orchestrate(command, str(run))
    assert result.returncode == 2, result.stdout + result.stderr
    error = " ".join(result.stderr.split())
    assert "turns.jsonl:" in error and field in error, error


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in TURN_DAMAGE], ids=[c[0] for c in TURN_DAMAGE])
def test_tampered_product_records_are_damage_under_allow_damaged(
    tmp_path: Path, change: Callable[[Json], None], field: str
) -> None:
    run = _copy(PRODUCT_RUN, tmp_path)
    _edit_turns(run, change)
    result = orchestrate("report", str(run), "--allow-damaged")
    assert result.returncode == 0, result.stdout + result.stderr
    damage = (run / "report" / "DAMAGE.md").read_text()
    assert "turns.jsonl:" in damage and field in damage


def test_channels_on_a_run_without_channels_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    run = _copy(PLAIN_RUN, tmp_path)
    before = sorted(path.relative_to(run) for path in run.rglob("*"))
    result = orchestrate("channels", str(run))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "this run has no product channels" in " ".join(result.stderr.split())
    assert sorted(path.relative_to(run) for path in run.rglob("*")) == before


def test_a_gate_threshold_of_thousands_of_digits_is_one_gate_error() -> None:
    from orchestrator.core.gateexpr import GateError, parse_gate

    for threshold in ("9" * 5000, "1/" + "9" * 5000, "0." + "9" * 5000 + "%"):
        with pytest.raises(GateError, match="threshold of"):
            parse_gate(f"product.core.answer >= {threshold}")


GOOD_ENTRY = {
    "stack": "vllm",
    "host": "gpu",
    "image": "vllm/vllm-openai:v0.9.0",
    "repository": "vllm/vllm-openai",
    "tag": "v0.9.0",
    "pinned_digest": None,
    "status": "unresolved",
    "reason": "no Docker engine",
    "changed": None,
    "identity": None,
}
BAD_RECORDS = [
    ("entry-a-number", {"entries": [5]}, "entries.0"),
    ("entry-without-host", {"entries": [{k: v for k, v in GOOD_ENTRY.items() if k != "host"}]}, "entries.0.host"),
    ("status-a-list", {"entries": [{**GOOD_ENTRY, "status": ["x"]}]}, "entries.0.status"),
    ("entries-an-object", {"entries": {"a": GOOD_ENTRY}}, "entries"),
]


@pytest.mark.parametrize(("record", "field"), [c[1:] for c in BAD_RECORDS], ids=[c[0] for c in BAD_RECORDS])
def test_images_never_writes_a_bad_record_into_a_run(tmp_path: Path, record: Json, field: str) -> None:
    run = _copy(PLAIN_RUN, tmp_path)
    manifest = (run / "manifest.json").read_bytes()
    saved = tmp_path / "images.json"
    saved.write_text(json.dumps(record))
    result = orchestrate("images", "--record", str(saved), "--into", str(run))
    assert result.returncode == 2, result.stdout + result.stderr
    error = " ".join(result.stderr.split())
    assert "--record" in error and f"field '{field}" in error, error
    assert (run / "manifest.json").read_bytes() == manifest


def test_a_deeply_nested_images_record_is_one_clear_error(tmp_path: Path) -> None:
    saved = tmp_path / "images.json"
    saved.write_text('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = orchestrate("images", "--record", str(saved))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--record" in result.stderr


def test_a_bad_recorded_images_entry_is_one_clear_error_for_previous(tmp_path: Path) -> None:
    run = _copy(PLAIN_RUN, tmp_path)
    _edit_manifest(run, lambda manifest: manifest.__setitem__("images", {"entries": [{"stack": 5}]}))
    matrix = tmp_path / "m.yaml"
    matrix.write_text("never: read\n")
    result = orchestrate("images", "--matrix", str(matrix), "--previous", str(run))
    assert result.returncode == 2, result.stdout + result.stderr
    error = " ".join(result.stderr.split())
    assert "--previous" in error and "manifest.json" in error and "field 'images.entries.0" in error, error


@pytest.mark.parametrize("where", ["a-directory", "no-such-folder/images.json"])
def test_an_unwritable_out_is_one_clear_error(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-directory").mkdir()
    saved = tmp_path / "images.json"
    saved.write_text(json.dumps({"entries": [GOOD_ENTRY]}))
    result = orchestrate("images", "--record", str(saved), "--out", str(tmp_path / where))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--out" in result.stderr


def test_a_good_images_record_goes_into_the_run_and_reads_back(tmp_path: Path) -> None:
    run = _copy(PLAIN_RUN, tmp_path)
    saved = tmp_path / "images.json"
    saved.write_text(json.dumps({"entries": [GOOD_ENTRY]}))
    assert orchestrate("images", "--record", str(saved), "--into", str(run)).returncode == 0
    assert json.loads((run / "manifest.json").read_text())["images"]["entries"] == [GOOD_ENTRY]
    again = orchestrate("images", "--record", str(saved), "--previous", str(run))
    assert again.returncode == 0, again.stderr
    assert "NOT RESOLVED (no Docker engine)" in again.stdout
