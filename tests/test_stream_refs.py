"""Issue 28 defect 11: a streamed turn is re-labelled from the side-file line its own `stream_ref` names (file and
line), and only when that line is in its cell's file and holds its own attempt key. A stray file, a line in
another cell's file or a line holding another attempt's key is never used: the recorded verdict stands, and a
line the turn points at that holds a foreign key is damage, named in DAMAGE.md."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.report.reclassify import reclassify
from orchestrator.runner.run.provenance import run_stacks
from orchestrator.runner.store.runstore import RunStore
from orchestrator.runner.store.streamstore import read_streams
from tests.cliinprocess import orchestrate
from tests.conftest import REPO

STREAM_RUN = REPO / "results" / "examples" / "20261204T133347Z-stream-cpu-53d12b"
Json = dict[str, Any]


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / STREAM_RUN.name
    shutil.copytree(STREAM_RUN, target)
    return target


def _turns(run: Path) -> list[Json]:
    return [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]


def _side_line(run: Path, ref: str) -> Json:
    name, number = ref.rsplit(":", 1)
    return json.loads((run / name).read_bytes().split(b"\n")[int(number) - 1])


def _final(turns: list[Json]) -> list[Json]:
    """Streamed attempts no later attempt of the same turn replaced (reclassify relabels only those)."""
    keys = {(t["cell_id"], t["seed"], t.get("seed_attempt", 0), t["turn"], t["attempt"]) for t in turns}
    return [
        t
        for t in turns
        if t.get("stream_ref")
        and (t["cell_id"], t["seed"], t.get("seed_attempt", 0), t["turn"], t["attempt"] + 1) not in keys
    ]


def _victim_and_donor(run: Path) -> tuple[Json, Json]:
    """A streamed turn, and another turn of the same cell whose events re-label to another outcome."""
    final = _final(_turns(run))
    for victim in final:
        for donor in final:
            same_cell = donor["cell_id"] == victim["cell_id"]
            if same_cell and donor["outcome"] != victim["outcome"] and victim["outcome"] == "valid_call":
                return victim, donor
    raise AssertionError("the streamed example has no two turns of one cell with different outcomes")


def _relabelled(run: Path) -> dict[str, Json]:
    store = RunStore(run)
    cells = {cell["cell_id"]: cell for cell in store.read_cells()}
    again = reclassify(store.read_turns(), cells, run_stacks(store), read_streams(run))
    return {t["stream_ref"]: t for t in again if t.get("stream_ref")}


def _append_line(path: Path, record: Json) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


@pytest.mark.parametrize("where", ["a-stray-file", "another-cells-file"])
def test_a_line_outside_the_turns_own_reference_is_never_used(tmp_path: Path, where: str) -> None:
    run = _copy(tmp_path)
    victim, donor = _victim_and_donor(run)
    planted = {**_side_line(run, donor["stream_ref"]), "key": _side_line(run, victim["stream_ref"])["key"]}
    own_file = victim["stream_ref"].rsplit(":", 1)[0].removeprefix("streams/")
    others = sorted(path for path in (run / "streams").glob("*.jsonl") if path.name > own_file)
    target = run / "streams" / "zzz-stray.jsonl" if where == "a-stray-file" else others[-1]
    _append_line(target, planted)
    fresh = _relabelled(run)[victim["stream_ref"]]
    assert (fresh["outcome"], fresh["detail"]) == (victim["outcome"], victim["detail"])
    assert not any(flag.startswith("stream:events_") for flag in fresh["flags"])


def test_a_referenced_line_holding_another_attempts_key_is_damage_never_used(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    victim, donor = _victim_and_donor(run)
    name, number = victim["stream_ref"].rsplit(":", 1)
    lines = (run / name).read_bytes().split(b"\n")
    lines[int(number) - 1] = json.dumps(_side_line(run, donor["stream_ref"])).encode()  # the donor's line, its key
    (run / name).write_bytes(b"\n".join(lines))
    fresh = _relabelled(run)[victim["stream_ref"]]
    assert (fresh["outcome"], fresh["detail"]) == (victim["outcome"], victim["detail"])
    assert "stream:events_damaged" in fresh["flags"]
    result = orchestrate("report", str(run), "--reclassify")
    assert result.returncode == 0, result.stderr
    damage = (run / "report" / "DAMAGE.md").read_text()
    assert f"{name}:{number}" in damage and "another attempt" in damage


def test_a_stream_ref_naming_another_cells_file_is_damage_never_used(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    victim, donor = _victim_and_donor(run)
    own = _side_line(run, victim["stream_ref"])
    other = next(p for p in sorted((run / "streams").glob("*.jsonl")) if p.name not in victim["stream_ref"])
    count = other.read_bytes().count(b"\n")
    _append_line(other, {**_side_line(run, donor["stream_ref"]), "key": own["key"]})
    moved = f"streams/{other.name}:{count + 1}"
    turns = _turns(run)
    for turn in turns:
        if turn.get("stream_ref") == victim["stream_ref"]:
            turn["stream_ref"] = moved
    (run / "turns.jsonl").write_text("".join(json.dumps(turn) + "\n" for turn in turns))
    fresh = _relabelled(run)[moved]
    assert (fresh["outcome"], fresh["detail"]) == (victim["outcome"], victim["detail"])
    assert "stream:events_damaged" in fresh["flags"]
