"""Hostile runs: a copy of a committed run damaged in random ways (Hypothesis) — a turn line duplicated, dropped,
truncated, re-typed or nested deep; a cell file, the manifest or a stack snapshot lost, truncated, re-typed,
nested or enlarged; a file or the report folder swapped for a symlink out of the run — then read by every
analysis command (`report`, `report --allow-damaged`, `stats`, `triage`, `diff`) and by `load_run()`.

For each, one of three answers and nothing else:
- exit 0 with the figures of the intact run (the damage changed nothing that is counted);
- exit 0 under `--allow-damaged` with the damage named in the report's DAMAGE.md;
- one clear error (exit ≠ 0, no traceback) naming the damaged file; `load_run()` raises StoreError.
Never a traceback, never a write outside the run (a sentinel folder beside it, the symlinks' target, is
compared byte for byte), never an unbounded wait (a deadline per example)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import load_run
from orchestrator.runner.store.runstore import StoreError
from tests.cliinprocess import orchestrate

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "results" / "examples" / "20261203T173011Z-diffcheck-98d599"  # small: 2 cells, 41 turns
CELL_FILES = sorted(p.name for p in (EXAMPLE / "cells").glob("*.json"))
TURN_LINES = len((EXAMPLE / "turns.jsonl").read_bytes().splitlines())
# Values of another type than any field holds, and shapes a careless edit or an attacker writes.
RETYPED: list[Any] = [None, "", "x" * 300, -1, 2**70, 1.5, True, [], [1, "a"], {}, {"k": {"k": "v"}}]
TURN_KEYS = ["cell_id", "seed", "turn", "attempt", "outcome", "tools_mode", "flags", "schema_version", "calls",
             "superseded", "sample", "seed_attempt", "tokens", "http_status", "suite"]  # fmt: skip
CELL_KEYS = ["cell_id", "status", "schema_version", "stack", "launches", "timings", "tool_flags", "order", "mode"]
MANIFEST_KEYS = ["run_id", "schema_version", "matrix", "provenance", "started", "finished", "matrix_sha256"]


@dataclass(frozen=True)
class Damage:
    """One edit of the run copy: what it does to which file (relative to the run) — the name an error must give."""

    kind: str
    target: str
    arg: Any = None

    def __str__(self) -> str:
        return f"{self.kind}({self.target}, {str(self.arg)[:40]!r})"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _lines(run: Path) -> list[bytes]:
    return (run / "turns.jsonl").read_bytes().split(b"\n")


def _write_lines(run: Path, lines: list[bytes]) -> None:
    (run / "turns.jsonl").write_bytes(b"\n".join(lines))


def _edit_json(path: Path, key: str, raw: str) -> None:
    """Set `key` of the JSON object in `path` to the JSON text `raw` (spliced as text: a nesting deeper than
    json.dumps would write is written all the same)."""
    record = json.loads(path.read_bytes())
    record.pop(key, None)
    body = json.dumps(record)
    path.write_text(f'{{"{key}": {raw}, {body[1:]}' if len(body) > 2 else f'{{"{key}": {raw}}}')


def _turn_line_edit(run: Path, index: int, key: str, raw: str) -> None:
    lines = _lines(run)
    record = json.loads(lines[index])
    record.pop(key, None)
    body = json.dumps(record)
    lines[index] = f'{{"{key}": {raw}, {body[1:]}'.encode()
    _write_lines(run, lines)


def apply(run: Path, outside: Path, damage: Damage) -> None:
    path = run / damage.target
    kind, arg = damage.kind, damage.arg
    if kind == "duplicate_line":
        lines = _lines(run)
        _write_lines(run, [*lines[: arg + 1], lines[arg], *lines[arg + 1 :]])
    elif kind == "drop_line":
        lines = _lines(run)
        _write_lines(run, [*lines[:arg], *lines[arg + 1 :]])
    elif kind == "retype_line":
        _turn_line_edit(run, arg[0], arg[1], json.dumps(arg[2]))
    elif kind == "nest_line":
        _turn_line_edit(run, arg[0], arg[1], nested(arg[2]))
    elif kind == "drop":
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    elif kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * arg)])
    elif kind == "retype":
        _edit_json(path, arg[0], json.dumps(arg[1]))
    elif kind == "nest":
        _edit_json(path, arg[0], nested(arg[1]))
    elif kind == "enlarge":
        _edit_json(path, "padding", json.dumps("x" * arg))
    elif kind == "symlink":  # the file (or folder) swapped for a link out of the run, to a copy of itself
        target = outside / f"linked-{path.name}"
        if path.exists() and not target.exists():
            (shutil.copytree if path.is_dir() else shutil.copyfile)(path, target)
        elif not target.exists():
            target.mkdir()
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
        path.symlink_to(target, target_is_directory=target.is_dir())
    elif kind == "nest_yaml":
        path.write_text("a: " + "[" * arg + "]" * arg + "\n")


def damages() -> st.SearchStrategy[Damage]:
    line = st.integers(0, TURN_LINES - 1)
    cell = st.sampled_from([f"cells/{name}" for name in CELL_FILES])
    json_file = st.one_of(cell, st.just("manifest.json"))
    keyed = st.one_of(
        st.tuples(cell, st.sampled_from(CELL_KEYS)), st.tuples(st.just("manifest.json"), st.sampled_from(MANIFEST_KEYS))
    )
    return st.one_of(
        st.builds(Damage, st.just("duplicate_line"), st.just("turns.jsonl"), line),
        st.builds(Damage, st.just("drop_line"), st.just("turns.jsonl"), line),
        st.builds(
            Damage,
            st.just("retype_line"),
            st.just("turns.jsonl"),
            st.tuples(line, st.sampled_from(TURN_KEYS), st.sampled_from(RETYPED)),
        ),
        st.builds(
            Damage,
            st.just("nest_line"),
            st.just("turns.jsonl"),
            st.tuples(line, st.sampled_from(TURN_KEYS), st.sampled_from([50, 5_000])),
        ),
        st.builds(Damage, st.just("drop"), st.one_of(json_file, st.sampled_from(["cells", "stacks/llamacpp.yaml"]))),
        st.builds(
            Damage, st.just("truncate"), st.one_of(json_file, st.just("turns.jsonl")), st.sampled_from([0.0, 0.3, 0.97])
        ),
        keyed.flatmap(
            lambda fk: st.builds(
                Damage, st.just("retype"), st.just(fk[0]), st.tuples(st.just(fk[1]), st.sampled_from(RETYPED))
            )
        ),
        keyed.flatmap(
            lambda fk: st.builds(
                Damage, st.just("nest"), st.just(fk[0]), st.tuples(st.just(fk[1]), st.sampled_from([50, 5_000]))
            )
        ),
        st.builds(Damage, st.just("enlarge"), json_file, st.sampled_from([1 << 20, 20 << 20])),
        st.builds(
            Damage,
            st.just("symlink"),
            st.sampled_from(["report", "cells", "manifest.json", "turns.jsonl", CELL_FILES[0].join(["cells/", ""])]),
        ),
        st.builds(Damage, st.just("nest_yaml"), st.just("stacks/llamacpp.yaml"), st.sampled_from([50, 5_000])),
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def figures(run: Path) -> bytes:
    return (run / "report" / "cells_long.csv").read_bytes()


@dataclass(repr=False)  # a failing example prints its arguments: the intact run's bytes would drown it
class Intact:
    """What the intact run answers, computed once (the same commands on an undamaged copy)."""

    root: Path
    run: Path
    report: bytes
    stats: str
    triage: str
    diff: str
    cells: Any

    def __repr__(self) -> str:
        return f"Intact({self.run})"


def same_text(answer: str, run: Path, intact: str, intact_run: Path) -> bool:
    """Two command outputs say the same, the run's path aside (rich centres a title in the width: a path of
    another length moves its padding)."""
    return _flat(answer.replace(str(run), "RUN")) == _flat(intact.replace(str(intact_run), "RUN"))


@pytest.fixture(scope="module")
def intact() -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "intact" / EXAMPLE.name
        shutil.copytree(EXAMPLE, run)
        assert orchestrate("report", str(run)).returncode == 0
        stats = orchestrate("stats", str(run / "turns.jsonl"))
        triage = orchestrate("triage", str(run))
        diff = orchestrate("diff", str(run), str(run))
        assert stats.returncode == triage.returncode == diff.returncode == 0
        yield Intact(root, run, figures(run), stats.stdout, triage.stdout, diff.stdout, load_run(run).cells)


def _flat(text: str) -> str:
    return "".join(text.split())  # a path rich wrapped over lines still reads as the path


def check_answer(name: str, result: Any, damaged: list[Damage], run: Path, same: Callable[[], bool]) -> None:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, f"{name}: a traceback\n{output[-3000:]}"
    if result.returncode == 0:
        assert same(), f"{name}: exit 0 with other figures than the intact run's, and no damage named"
        return
    named = {Path(d.target).name for d in damaged} | {Path(d.target).parts[0] for d in damaged}
    assert any(n in _flat(output) for n in named), f"{name}: exit {result.returncode} names none of {named}\n{output}"


def run_commands(run: Path, intact: Intact, damaged: list[Damage]) -> None:
    report = orchestrate("report", str(run))
    check_answer("report", report, damaged, run, lambda: figures(run) == intact.report)
    allowed = orchestrate("report", "--allow-damaged", str(run))
    damage_md = run / "report" / "DAMAGE.md"

    def same_or_named() -> bool:
        return figures(run) == intact.report or (damage_md.is_file() and damage_md.stat().st_size > 0)

    check_answer("report --allow-damaged", allowed, damaged, run, same_or_named)
    stats = orchestrate("stats", str(run / "turns.jsonl"))
    check_answer("stats", stats, damaged, run, lambda: same_text(stats.stdout, run, intact.stats, intact.run))
    triage = orchestrate("triage", str(run))
    check_answer("triage", triage, damaged, run, lambda: same_text(triage.stdout, run, intact.triage, intact.run))
    diff = orchestrate("diff", str(intact.run), str(run))
    check_answer("diff", diff, damaged, run, lambda: same_text(diff.stdout, run, intact.diff, intact.run))
    try:
        loaded = load_run(run)
    except StoreError as exc:
        assert any(Path(d.target).parts[0] in _flat(str(exc)) or Path(d.target).name in _flat(str(exc))
                   for d in damaged), f"load_run: {exc}"  # fmt: skip
    else:
        assert loaded.cells.equals(intact.cells), "load_run: other cells than the intact run's, no error"


@pytest.mark.slow  # a symlink made and dozens of report writes per example; in-process, but ~1 s each
@settings(max_examples=40, deadline=timedelta(seconds=90), derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(damaged=st.lists(damages(), min_size=1, max_size=3))
def test_a_damaged_run_is_read_the_same_named_as_damage_or_refused_by_name(
    intact: Intact, damaged: list[Damage]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "runs" / EXAMPLE.name
        shutil.copytree(EXAMPLE, run)
        shutil.rmtree(run / "report")  # each command writes its own report; the intact one is not left to read
        outside = root / "outside"
        (outside / "cells").mkdir(parents=True)
        (outside / "cells" / "keep.json").write_text("{}")
        for damage in damaged:
            apply(run, outside, damage)
        before = tree_bytes(outside)
        run_commands(run, intact, damaged)
        assert tree_bytes(outside) == before, f"a write outside the run: {[str(d) for d in damaged]}"
