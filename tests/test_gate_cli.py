"""`orchestrate gate` and `orchestrate channels` on a run directory built from turn records as the runner
writes them: the exit code a release pipeline reads, the numbers it prints, and a planned case that never ran
counting as not passing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.test_scoring import call, execution, record

runner = CliRunner()
CASES = {
    "formation": {
        "version": 1,
        "core": ["f-05", "f-10"],
        "expect": {
            "f-05": {"call": {"tool": "md5", "arguments": {"input": "hello"}}, "answer": "5d41"},
            "f-10": {"ask_user": True},
            "f-08": {"call": {"tool": "entity_status"}, "answer": "filed"},
        },
    }
}
CELL = "llamacpp-jinja__qwen__text-tools__channel-product"


def make_run(
    directory: Path, gates: list[str], records: list[dict[str, Any]], seeds: list[str], status: str = "complete"
) -> Path:
    """A run of one product-channel cell planning `seeds`; a complete cell ended every seed it planned (the reader's
    rule), so a planned case without records is in a cell that did not complete (`status`)."""
    (directory / "cells").mkdir(parents=True)
    manifest = {"schema_version": 2, "run_id": directory.name, "matrix": {"gate": gates, "channels": ["product"]}}
    (directory / "manifest.json").write_text(json.dumps({**manifest, "cases": CASES}))
    cell = {"cell_id": CELL, "stack_label": "llamacpp-jinja", "model": "qwen", "tools_mode": "text-tools"}
    cell |= {"channel": "product", "without": None, "suites": ["formation"], "seeds": seeds, "status": status}
    (directory / "cells" / f"{CELL}.json").write_text(json.dumps(cell))
    (directory / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return directory


def md5_run(answer: str) -> dict[str, Any]:
    return record(
        "f-05",
        calls=[call("md5", input="hello")],
        executions=[execution("md5", input="hello")],
        end="short_circuit",
        final_answer=answer,
    )


def asked() -> dict[str, Any]:
    return record("f-10", raw_content="Which state?", end="answered", final_answer="Which state and name?")


def test_gate_passes_with_exit_0_and_prints_the_numbers(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", ["product.core.answer >= 2/2"], [md5_run("5d41abc"), asked()], ["f-05", "f-10"])
    result = runner.invoke(app, ["gate", str(run)])
    assert result.exit_code == 0, result.output
    assert "PASS product.core.answer 2/2" in result.output


def test_a_failing_gate_exits_1_and_json_has_one_object_per_gate(tmp_path: Path) -> None:
    gates = ["product.core.answer >= 2/2", "product.all.tool >= 0.5"]
    run = make_run(tmp_path / "r", gates, [md5_run("wrong"), asked()], ["f-05", "f-10"])
    result = runner.invoke(app, ["gate", str(run), "--json"])
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(line["metric"], line["passes"], line["total"], line["ok"]) for line in lines] == [
        ("product.core.answer", 1, 2, False),
        ("product.all.tool", 2, 2, True),
    ]


def test_a_planned_case_that_never_ran_counts_as_not_passing(tmp_path: Path) -> None:
    # f-08 is planned in the cell but has no record (its server died first): the gate over all cases cannot pass on it.
    planned = ["f-05", "f-10", "f-08"]
    run = make_run(tmp_path / "r", ["product.all.answer >= 0.9"], [md5_run("5d41"), asked()], planned, "server_died")
    result = runner.invoke(app, ["gate", str(run)])
    assert result.exit_code == 1
    assert "2/3" in result.output and "1 unscored" in result.output


@pytest.mark.parametrize(
    ("gates", "message"), [([], "declares no gate"), (["product.core.speed >= 1/2"], "unknown dimension")]
)
def test_no_gate_or_a_bad_one_exits_2_with_one_clear_line(tmp_path: Path, gates: list[str], message: str) -> None:
    run = make_run(tmp_path / "r", gates, [asked()], ["f-10"])
    result = runner.invoke(app, ["gate", str(run)])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_channels_writes_the_side_by_side_table(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", [], [md5_run("5d41"), asked()], ["f-05", "f-10"])
    result = runner.invoke(app, ["channels", str(run)])
    assert result.exit_code == 0, result.output
    table = (run / "report" / "channels.md").read_text()
    assert "| llamacpp-jinja | qwen | text-tools | formation |" in table
    verdicts = json.loads((run / "report" / "case_verdicts.json").read_text())
    assert {(v["seed"], v["dimension"], v["passed"]) for v in verdicts} == {
        ("f-05", "tool", True),
        ("f-05", "args", True),
        ("f-05", "answer", True),
        ("f-10", "tool", True),
        ("f-10", "answer", True),
    }


def test_first_answer_agreement_pairs_model_and_product_by_case_and_sample() -> None:
    from orchestrator.analysis.product.productreport import first_answer_agreement

    same = [record("f-05", channel=c, raw_content="{md5}") for c in ("model", "product")]
    differ = [record("f-05", channel="model", sample=1, raw_content="a")]
    differ += [record("f-05", channel="product", sample=1, raw_content="b")]
    later = [record("f-05", channel="product", sample=1, turn=1, raw_content="a")]  # not a first answer
    alone = [record("f-10", channel="model", raw_content="x")]  # no product partner: not a pair
    assert first_answer_agreement(same + differ + later + alone) == (1, 2)


def test_a_model_served_under_another_name_is_one_group_under_its_matrix_label(tmp_path: Path) -> None:
    # Ollama serves the entry `qwen` as `qwen2.5-coder:0.5b`: the records carry the served name, the cell its label.
    served = [{**r, "model": "qwen2.5-coder:0.5b"} for r in (md5_run("5d41"), asked())]
    run = make_run(tmp_path / "r", ["product.core.answer >= 2/2"], served, ["f-05", "f-10"])
    result = runner.invoke(app, ["gate", str(run), "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(line["model"], line["passes"], line["total"]) for line in lines] == [("qwen", 2, 2)]
