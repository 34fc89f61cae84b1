"""`orchestrate triage`: one verdict per low cell, in the fixed order, on the committed CPU run and on copies of
it changed so that each later cause is the first one found."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.analysis.triage.triage import VERDICTS, triage_run
from orchestrator.cli import app
from tests.conftest import REPO

CPU_RUN = REPO / "results" / "examples" / "20261203T131653Z-cpu-87d008"
QWEN = "qwen2.5-coder-0.5b-instruct"
runner = CliRunner()


def copy_run(tmp_path: Path) -> Path:
    target = tmp_path / CPU_RUN.name
    shutil.copytree(CPU_RUN, target, ignore=shutil.ignore_patterns("report", "logs"))
    return target


def edit_cell(run: Path, cell_id: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = run / "cells" / f"{cell_id}.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_turns(run: Path, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    path = run / "turns.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in (change(r) or r for r in records)))


def verdicts(run: Path, threshold: float = 0.5) -> dict[str, Any]:
    return {v.cell_id: v for v in triage_run(run, threshold)}


def fidelity_by_hand(run: Path) -> dict[str, float | None]:
    """Per-seed mean over the counted turns, computed here from turns.jsonl (not through the product's stats)."""
    seeds: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for line in (run / "turns.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("superseded") or r["outcome"] in ("rejected_request", "non_response"):
            continue
        counts = seeds[r["cell_id"]][r["seed"]]
        counts[0] += r["outcome"] == "valid_call"
        counts[1] += 1
    result: dict[str, float | None] = {}
    for path in (run / "cells").glob("*.json"):
        cell = path.stem
        per_seed = [valid / n for valid, n in seeds[cell].values() if n]
        result[cell] = sum(per_seed) / len(per_seed) if per_seed else None
    return result


def test_every_low_cell_of_the_cpu_run_gets_one_verdict() -> None:
    found = verdicts(CPU_RUN)
    expected_low = {cell for cell, value in fidelity_by_hand(CPU_RUN).items() if value is None or value < 0.5}
    assert set(found) == expected_low
    assert all(v.verdict in VERDICTS for v in found.values())
    # Refused: exactly the cells every request of which was refused (tools= on llama.cpp without jinja, on vLLM
    # without a parser), with the refusal detail as evidence.
    refused = {c for c, v in found.items() if v.verdict == "refused"}
    assert refused == {
        f"{stack}__{model}__{mode}"
        for stack in ("llamacpp-no-jinja", "vllm-default")
        for model in (QWEN, "smollm2-135m-instruct")
        for mode in ("native", "native_hint")
    }
    assert found[f"llamacpp-no-jinja__{QWEN}__native"].evidence["details"] == {"refused:no_jinja": 8}
    assert found[f"vllm-default__{QWEN}__native"].evidence["details"] == {"refused:no_tool_parser": 8}
    # Qwen native writes its call as text neither parser takes: parser loss on both stacks, 8 of 8 turns.
    for stack in ("llamacpp-jinja", "vllm-hermes"):
        cell = found[f"{stack}__{QWEN}__native"]
        assert cell.verdict == "parser_loss" and cell.ruled_out == ["refused", "no_response", "no_parser"]
        assert (cell.evidence["n_parse_lost"], cell.evidence["n_failed_turns"]) == (8, 8)
    # The text-tools gap between the stacks is not explained by anything the run recorded: the model.
    text_tools = found[f"vllm-hermes__{QWEN}__text-tools"]
    assert text_tools.verdict == "model"
    assert {p["cell_id"].split("__")[0] for p in text_tools.evidence["peers"]} == {
        "llamacpp-jinja",
        "llamacpp-no-jinja",
        "vllm-default",
    }


def test_cli_json_is_one_strict_object_per_low_cell(tmp_path: Path) -> None:
    run = copy_run(tmp_path)  # triage writes report/triage.json and rewrites the page: never in the repository
    result = runner.invoke(app, ["triage", str(run), "--json"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) for line in lines]
    assert len(rows) == len(verdicts(CPU_RUN))
    assert all({"cell_id", "verdict", "evidence", "summary"} <= set(row) for row in rows)
    # The verdicts are saved (nothing else in the run is touched) and the next report shows them on its page.
    saved = json.loads((run / "report" / "triage.json").read_text())
    assert saved["turns_bytes"] == (run / "turns.jsonl").stat().st_size
    assert [(r["cell_id"], r["verdict"]) for r in saved["rows"]] == [(r["cell_id"], r["verdict"]) for r in rows]
    assert sorted(p.name for p in (run / "report").iterdir()) == ["triage.json"]
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    page = (run / "report" / "index.html").read_text()
    section = page.split('<h2 class="section">Triage verdicts</h2>')[1].split("</table>")[0]
    assert section.count("<tr>") == len(rows) + 1 and all(r["cell_id"] in section for r in rows)
    assert "stale" not in section
    # Once the run changes (a resume appended records), the page says the verdicts are stale. The appended record
    # is a new one (a seed of its own from turn 0): a copy of an existing line would be damage, not a change.
    first = json.loads((run / "turns.jsonl").read_text().splitlines()[0])
    with (run / "turns.jsonl").open("a") as turns:
        turns.write(json.dumps({**first, "seed": "ops-resumed", "turn": 0, "attempt": 0, "seed_attempt": 0}) + "\n")
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    page = (run / "report" / "index.html").read_text()
    assert "stale: the run changed after triage.json was written" in page.split("Triage verdicts</h2>")[1][:300]
    table = runner.invoke(app, ["triage", str(run)])
    assert table.exit_code == 0 and "parser_loss" in table.stdout and "triage.json" in table.stdout


def test_a_higher_threshold_takes_in_more_cells() -> None:
    assert len(verdicts(CPU_RUN, 0.8)) > len(verdicts(CPU_RUN, 0.5))


PEER = f"llamacpp-jinja__{QWEN}__constrained"  # 71%: ahead of the vLLM cell by more than PEER_GAP
LOW = f"vllm-hermes__{QWEN}__constrained"  # 59%: low under a 65% threshold


def with_canaries(run: Path, low_prompt: str, peer_prompt: str) -> None:
    for cell, prompt in ((LOW, low_prompt), (PEER, peer_prompt)):
        sha = f"sha-{abs(hash(prompt))}"

        def set_canary(data: dict[str, Any], prompt: str = prompt, sha: str = sha) -> None:
            data["canary"] = {"prompt": prompt, "sha256": sha}
            data["sampling_defaults"] = {"values": {}, "active_unsent": []}

        edit_cell(run, cell, set_canary)


def test_a_better_peer_given_another_first_prompt_is_template_differs(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    with_canaries(run, "same", "same")
    # The same first request on both stacks, but this one's server used 40 more prompt tokens on one seed.
    edit_turns(
        run, lambda r: r["tokens"].update(prompt=r["tokens"]["prompt"] + 40) if first_of(r, LOW, "ops-03") else None
    )
    cell = verdicts(run, 0.65)[LOW]
    assert cell.verdict == "template_differs" and cell.evidence["peer"]["cell_id"] == PEER
    assert cell.evidence["compared"] == "first-turn prompt tokens per seed"
    assert list(cell.evidence["differing_seeds"]) == ["ops-03"]
    # The same first prompts on every seed: the template is ruled out, nothing else differs: the model.
    plain = copy_run(tmp_path / "plain")  # a tool-rendering difference only, the same first prompts
    with_canaries(plain, "<|im_start|>system\nA", "<|im_start|>system\nB")
    cell = verdicts(plain, 0.65)[LOW]
    assert cell.verdict == "model" and "template_differs" in cell.ruled_out


def first_of(record: dict[str, Any], cell: str, seed: str) -> bool:
    return record["cell_id"] == cell and record["seed"] == seed and record["turn"] == 0


def test_without_first_turn_counts_the_canary_is_compared(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    with_canaries(run, "<|im_start|>system\nA\n<|im_end|>", "<|im_start|>system\nB\n<|im_end|>")
    edit_turns(run, lambda r: r["tokens"].update(prompt=None) if r["cell_id"] in (LOW, PEER) else None)
    cell = verdicts(run, 0.65)[LOW]
    assert cell.verdict == "template_differs" and cell.evidence["compared"] == "canary prompt (with tools)"
    assert "-A" in cell.evidence["hunk"] and "+B" in cell.evidence["hunk"]


def test_a_peer_less_than_the_gap_ahead_is_no_evidence(tmp_path: Path) -> None:
    """vLLM text-tools is 8 points ahead of llama.cpp (< PEER_GAP): different first prompts would not count."""
    run = copy_run(tmp_path)
    low = f"llamacpp-jinja__{QWEN}__text-tools"
    edit_turns(
        run, lambda r: r["tokens"].update(prompt=r["tokens"]["prompt"] + 40) if first_of(r, low, "ops-03") else None
    )
    assert verdicts(run)[low].verdict == "model"


def test_a_sampler_stage_left_on_by_one_server_is_sampling_differs(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    with_canaries(run, "same", "same")
    edit_cell(run, LOW, lambda d: d["sampling_defaults"].update(active_unsent=["dry_multiplier"]))
    cell = verdicts(run, 0.65)[LOW]
    assert cell.verdict == "sampling_differs"
    assert cell.evidence["fields"] == {"active_stack_stages": [["dry_multiplier"], []]}


def test_a_prompt_the_server_cut_is_truncated(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    cell_id = f"vllm-hermes__{QWEN}__text-tools"

    def cut_on(seeds: set[str]) -> Callable[[dict[str, Any]], None]:
        def cut(record: dict[str, Any]) -> None:
            if record["cell_id"] == cell_id and record["seed"] in seeds and record["outcome"] != "valid_call":
                record["flags"] = [*record["flags"], "truncated:prompt"]
                record["prompt_tokens_rendered"] = (record["tokens"]["prompt"] or 0) + 50

        return cut

    edit_turns(run, cut_on({"ops-00"}))  # a few cut turns do not explain a low cell
    assert verdicts(run)[cell_id].verdict == "model"
    edit_turns(run, cut_on({f"ops-0{i}" for i in range(8)}))
    cell = verdicts(run)[cell_id]
    assert cell.verdict == "truncated" and cell.evidence["n_truncated_turns"] == cell.evidence["n_failed_turns"]


def test_tools_answered_as_text_without_a_parser_is_no_parser(tmp_path: Path) -> None:
    """SGLang's case: tools= accepted (200), no parser configured, the call left in the text."""
    run = copy_run(tmp_path)
    cell_id = f"vllm-default__{QWEN}__native"

    def answered(record: dict[str, Any]) -> None:
        if record["cell_id"] == cell_id:
            record.update(outcome="unparseable_text", http_status=200, text_call_recoverable=True, detail=None)

    edit_turns(run, answered)
    cell = verdicts(run)[cell_id]
    assert cell.verdict == "no_parser" and cell.evidence["parser"] is None
    assert cell.evidence["n_turns_with_call_in_text"] == 8


def test_silence_and_a_server_that_never_started_are_no_response(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    timed_out = f"vllm-hermes__{QWEN}__text-tools"
    edit_turns(
        run,
        lambda r: {**r, "outcome": "non_response", "detail": "transport:timeout"} if r["cell_id"] == timed_out else r,
    )
    never = f"llamacpp-jinja__{QWEN}__text-tools"
    edit_turns(run, lambda r: None if r["cell_id"] == never else r)
    lines = [line for line in (run / "turns.jsonl").read_text().splitlines() if json.loads(line)["cell_id"] != never]
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n")
    edit_cell(run, never, lambda d: d.update(status="launch_failed", error="binary not found"))
    found = verdicts(run)
    assert found[timed_out].verdict == "no_response"
    assert found[timed_out].evidence["details"] == {"transport:timeout": found[timed_out].evidence["n_turns"]}
    assert found[never].verdict == "no_response" and found[never].evidence["error"] == "binary not found"


def test_parser_loss_shows_the_raw_template_cell_beside_it(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    source, raw = f"llamacpp-jinja__{QWEN}__text-tools", f"llamacpp-jinja__{QWEN}__raw-template"
    data = json.loads((run / "cells" / f"{source}.json").read_text())
    (run / "cells" / f"{raw}.json").write_text(json.dumps({**data, "cell_id": raw, "tools_mode": "raw-template"}))
    copies = [
        json.dumps({**r, "cell_id": raw, "tools_mode": "raw-template"})
        for r in map(json.loads, (run / "turns.jsonl").read_text().splitlines())
        if r["cell_id"] == source
    ]
    with (run / "turns.jsonl").open("a") as handle:
        handle.write("\n".join(copies) + "\n")
    cell = verdicts(run)[f"llamacpp-jinja__{QWEN}__native"]
    assert cell.verdict == "parser_loss" and cell.evidence["raw_template"]["cell_id"] == raw
    assert cell.evidence["raw_template"]["per_seed_mean"] == pytest.approx(fidelity_by_hand(run)[raw])


def test_bad_input_is_one_clear_error(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["triage", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "nope" in missing.output and "Traceback" not in missing.output
    run = copy_run(tmp_path)
    lines = (run / "turns.jsonl").read_text().splitlines()
    lines[3] = "{not json"
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n")
    corrupt = runner.invoke(app, ["triage", str(run)])
    assert corrupt.exit_code == 2 and "turns.jsonl" in corrupt.output and "Traceback" not in corrupt.output
    bad_threshold = runner.invoke(app, ["triage", str(copy_run(tmp_path / "b")), "--threshold", "0"])
    assert bad_threshold.exit_code == 2


def test_retried_attempts_do_not_make_an_answered_cell_silent(tmp_path: Path) -> None:
    """Every turn first timed out, then got its answer: the final attempts decide, not the retried ones."""
    run = copy_run(tmp_path)
    cell_id = f"vllm-hermes__{QWEN}__text-tools"
    lines = []
    for record in map(json.loads, (run / "turns.jsonl").read_text().splitlines()):
        if record["cell_id"] == cell_id:
            failed = {**record, "attempt": 0, "outcome": "non_response", "detail": "transport:timeout", "end": None}
            lines.append(json.dumps(failed))
            record["attempt"] = 1
        lines.append(json.dumps(record))
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n")
    assert verdicts(run)[cell_id].verdict == "model"


def test_a_stack_that_cannot_say_its_sampler_is_no_evidence(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    edit_turns(run, lambda r: r["tokens"].update(prompt=None) if r["cell_id"] in (LOW, PEER) else None)
    edit_cell(run, LOW, lambda d: d.update(sampling_defaults={"values": None, "active_unsent": None}))
    edit_cell(run, PEER, lambda d: d.update(sampling_defaults={"values": {"top_k": 40}, "active_unsent": []}))
    assert verdicts(run, 0.65)[LOW].verdict == "model"


def test_a_parser_rejection_that_quotes_nothing_is_the_models_turn(tmp_path: Path) -> None:
    """llama.cpp b11312's 500 'does not match the expected format' quotes none of the output: without a
    recovered call, and without a raw-template arm doing better, the stack is not blamed."""
    run = copy_run(tmp_path)
    cell_id = f"llamacpp-jinja__{QWEN}__native"

    def rejected(record: dict[str, Any]) -> None:
        if record["cell_id"] == cell_id:
            record.update(http_status=500, text_call_recoverable=False, detail="parse:server_rejected_output")

    edit_turns(run, rejected)
    assert verdicts(run)[cell_id].verdict == "model"


def add_raw_template_cell(run: Path, source: str, raw: str, valid: bool) -> None:
    """A raw-template cell built from another cell's seeds, every answer made valid (or not)."""
    data = json.loads((run / "cells" / f"{source}.json").read_text())
    (run / "cells" / f"{raw}.json").write_text(json.dumps({**data, "cell_id": raw, "tools_mode": "raw-template"}))
    outcome = "valid_call" if valid else "no_call_prose"
    copies = [
        json.dumps({**r, "cell_id": raw, "tools_mode": "raw-template", "outcome": outcome})
        for r in map(json.loads, (run / "turns.jsonl").read_text().splitlines())
        if r["cell_id"] == source
    ]
    with (run / "turns.jsonl").open("a") as handle:
        handle.write("\n".join(copies) + "\n")


def test_a_parser_rejection_is_the_stacks_when_the_raw_template_arm_does_better(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    cell_id = f"llamacpp-jinja__{QWEN}__native"
    edit_turns(
        run,
        lambda r: (
            r.update(http_status=500, text_call_recoverable=False, detail="parse:server_rejected_output")
            if r["cell_id"] == cell_id
            else None
        ),
    )
    add_raw_template_cell(
        run, f"llamacpp-jinja__{QWEN}__text-tools", f"llamacpp-jinja__{QWEN}__raw-template", valid=True
    )
    cell = verdicts(run)[cell_id]
    assert cell.verdict == "parser_loss" and cell.evidence["raw_template"]["per_seed_mean"] == 1.0


def test_turns_the_template_could_not_render_are_not_the_servers_silence(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    cell_id = f"vllm-hermes__{QWEN}__text-tools"
    records = list(map(json.loads, (run / "turns.jsonl").read_text().splitlines()))
    last = {r["seed"]: r["turn"] for r in records if r["cell_id"] == cell_id}  # each seed's last turn (one run each)
    lines = []
    for record in records:
        lines.append(json.dumps(record))
        if record["cell_id"] == cell_id and record["turn"] == last[record["seed"]]:
            # each seed: 5 more turns that never went out, numbered on from its last (a seed run has no gap)
            lines += [
                json.dumps(
                    {
                        **record,
                        "turn": record["turn"] + 1 + k,
                        "outcome": "non_response",
                        "detail": "template:render_failed",
                        "http_status": None,
                        "end": None,
                    }
                )
                for k in range(5)
            ]
    (run / "turns.jsonl").write_text("\n".join(lines) + "\n")
    cell = verdicts(run)[cell_id]
    assert cell.verdict == "model"  # 40 of 75 records are template failures: no majority of silence


def test_a_cell_file_without_its_mode_is_named(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    edit_cell(run, LOW, lambda d: d.pop("tools_mode"))
    result = runner.invoke(app, ["triage", str(run)])
    assert result.exit_code == 2 and f"{LOW}.json" in result.output and "tools_mode" in result.output
    assert "Traceback" not in result.output


def test_a_mode_without_tools_compares_the_tool_less_canary(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    edit_turns(run, lambda r: r["tokens"].update(prompt=None) if r["cell_id"] in (LOW, PEER) else None)
    for cell, plain in ((LOW, "P"), (PEER, "P")):  # same tool-less prompt, different tool rendering
        edit_cell(run, cell, lambda d, plain=plain, cell=cell: d.update(
            canary={"prompt": cell, "sha256": cell, "plain": {"prompt": plain, "sha256": plain}},
            sampling_defaults={"values": {}, "active_unsent": []},
        ))  # fmt: skip
    assert verdicts(run, 0.65)[LOW].verdict == "model"
    edit_cell(run, PEER, lambda d: d["canary"].update(plain={"prompt": "Q", "sha256": "Q"}))
    cell = verdicts(run, 0.65)[LOW]
    assert cell.verdict == "template_differs" and cell.evidence["compared"] == "canary prompt (no tools)"


def test_the_model_verdict_says_how_alike_the_same_request_went_on_each_peer() -> None:
    cell = verdicts(CPU_RUN)[f"llamacpp-jinja__{QWEN}__text-tools"]
    first: dict[str, dict[str, tuple]] = defaultdict(dict)
    for r in map(json.loads, (CPU_RUN / "turns.jsonl").read_text().splitlines()):
        if r["turn"] == 0 and r["tools_mode"] == "text-tools" and r["model"] == QWEN:
            first[r["stack_config"]][r["seed"]] = (r["tokens"]["prompt"], r["raw_content"])
    mine = first["llamacpp-jinja"]
    for peer in cell.evidence["peers"]:
        theirs = first[peer["cell_id"].split("__")[0]]
        prompts = sum(mine[s][0] == theirs[s][0] for s in mine)
        answers = sum(mine[s][1] == theirs[s][1] for s in mine)
        assert (peer["same_first_prompt_tokens"], peer["same_first_answer"]) == (f"{prompts}/8", f"{answers}/8")
    by_stack = {p["cell_id"].split("__")[0]: p for p in cell.evidence["peers"]}
    assert by_stack["llamacpp-no-jinja"]["same_first_answer"] == "8/8"  # no tools sent: the same request


def test_verdicts_come_out_when_the_run_cannot_be_written_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saving report/triage.json is an extra: a full disk or a read-only run still gets every verdict printed."""
    import orchestrator.runner.store.runstore as store

    def full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "write_json_atomic", full)
    run = copy_run(tmp_path)
    result = runner.invoke(app, ["triage", str(run), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == len(verdicts(CPU_RUN)) > 0
    assert "report/triage.json not written" in result.stderr and "No space left" in result.stderr
    assert not (run / "report" / "triage.json").exists()

