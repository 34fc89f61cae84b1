"""Hostile runs: a copy of a committed run damaged in random ways (Hypothesis) — a turn line duplicated, dropped,
truncated, re-typed or nested deep; a cell file, the manifest or a stack snapshot lost, truncated, re-typed,
nested or enlarged; a file or folder swapped for a symlink out of the run — then read by every analysis command
that reads a run (`report`, `report --allow-damaged`, `stats`, `triage`, `diff`; on a product run `channels`
and `gate` too) and by `load_run()`.

For each, one of three answers and nothing else:
- the intact run's answer (exit status and figures: the damage changed nothing that is counted);
- exit 0 under `--allow-damaged` with the damage named in the report's DAMAGE.md;
- one clear error (exit ≠ 0, no traceback) naming the damaged file; `load_run()` raises StoreError naming it.
Never a traceback, never a write outside the run (a sentinel folder beside it, where the symlinks point, is
compared byte for byte), never an unbounded wait (a deadline per example)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
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
EXAMPLES = REPO / "results" / "examples"
# Values of another type than any field holds, and shapes a careless edit or an attacker writes.
RETYPED: list[Any] = [None, "", "x" * 300, -1, 2**70, 1.5, True, [], [1, "a"], {}, {"k": {"k": "v"}}]
TURN_KEYS = ["cell_id", "seed", "turn", "attempt", "outcome", "tools_mode", "flags", "schema_version", "calls",
             "superseded", "sample", "seed_attempt", "tokens", "http_status", "suite", "channel"]  # fmt: skip
CELL_KEYS = ["cell_id", "status", "schema_version", "stack", "launches", "timings", "tool_flags", "order", "channel"]
MANIFEST_KEYS = ["run_id", "schema_version", "matrix", "provenance", "started", "finished", "matrix_sha256"]


@dataclass(frozen=True)
class Example:
    """A committed run to damage, and what reads it."""

    name: str
    product: bool = False  # a product run: `channels` and `gate` read it too
    manifest_keys: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return EXAMPLES / self.name

    @property
    def cell_files(self) -> list[str]:
        return sorted(f"cells/{p.name}" for p in (self.path / "cells").glob("*.json"))

    @property
    def turn_lines(self) -> int:
        return len((self.path / "turns.jsonl").read_bytes().splitlines())


SMALL = Example("20261203T173011Z-diffcheck-98d599")  # 2 cells, 41 turns
PRODUCT = Example("20261203T194941Z-product-cpu-7ec463", product=True, manifest_keys=("cases", "guards"))


@dataclass(frozen=True)
class Damage:
    """One edit of the run copy: what it does to which file (relative to the run): the name an error must give."""

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


def _spliced(text: str | bytes, key: str, raw: str) -> str:
    """The JSON object `text` with `key` set to the JSON text `raw`, spliced as text: a nesting deeper than
    json.dumps would write is written all the same."""
    record = json.loads(text)
    record.pop(key, None)
    body = json.dumps(record)
    return f'{{"{key}": {raw}, {body[1:]}' if len(body) > 2 else f'{{"{key}": {raw}}}'


def _edit_line(run: Path, index: int, key: str, raw: str) -> None:
    lines = _lines(run)
    lines[index] = _spliced(lines[index], key, raw).encode()
    _write_lines(run, lines)


def _symlink_out(path: Path, outside: Path) -> None:
    """The file or folder swapped for a link out of the run, to a copy of itself (a missing one: an empty folder)."""
    target = outside / f"linked-{path.name}"
    if path.exists() and not target.exists():
        (shutil.copytree if path.is_dir() else shutil.copyfile)(path, target)
    elif not target.exists():
        target.mkdir()
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
    path.symlink_to(target, target_is_directory=target.is_dir())


def apply(run: Path, outside: Path, damage: Damage) -> None:
    path, arg = run / damage.target, damage.arg
    lines = _lines(run) if damage.kind in ("duplicate_line", "drop_line") else []
    edits: dict[str, Callable[[], Any]] = {
        "duplicate_line": lambda: _write_lines(run, [*lines[: arg + 1], lines[arg], *lines[arg + 1 :]]),
        "drop_line": lambda: _write_lines(run, [*lines[:arg], *lines[arg + 1 :]]),
        "retype_line": lambda: _edit_line(run, arg[0], arg[1], json.dumps(arg[2])),
        "nest_line": lambda: _edit_line(run, arg[0], arg[1], nested(arg[2])),
        "drop": lambda: shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True),
        "truncate": lambda: path.write_bytes(path.read_bytes()[: int(path.stat().st_size * arg)]),
        "retype": lambda: path.write_text(_spliced(path.read_bytes(), arg[0], json.dumps(arg[1]))),
        "nest": lambda: path.write_text(_spliced(path.read_bytes(), arg[0], nested(arg[1]))),
        "enlarge": lambda: path.write_text(_spliced(path.read_bytes(), "padding", json.dumps("x" * arg))),
        "symlink": lambda: _symlink_out(path, outside),
        "nest_yaml": lambda: path.write_text("a: " + nested(arg) + "\n"),
    }
    if not (path.exists() or damage.kind == "symlink") or not path.parent.is_dir():
        return  # a file (or folder) an earlier damage removed: nothing more to damage
    with contextlib.suppress(ValueError, RecursionError):  # a file an earlier damage left no JSON: damaged already
        edits[damage.kind]()


def damages(example: Example) -> st.SearchStrategy[Damage]:
    line = st.integers(0, example.turn_lines - 1)
    cell = st.sampled_from(example.cell_files)
    json_file = st.one_of(cell, st.just("manifest.json"))
    keyed = st.one_of(
        st.tuples(cell, st.sampled_from(CELL_KEYS)),
        st.tuples(st.just("manifest.json"), st.sampled_from(MANIFEST_KEYS + list(example.manifest_keys))),
    )
    depth = st.sampled_from([50, 5_000])
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
            Damage, st.just("nest_line"), st.just("turns.jsonl"), st.tuples(line, st.sampled_from(TURN_KEYS), depth)
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
        keyed.flatmap(lambda fk: st.builds(Damage, st.just("nest"), st.just(fk[0]), st.tuples(st.just(fk[1]), depth))),
        st.builds(Damage, st.just("enlarge"), json_file, st.sampled_from([1 << 20, 20 << 20])),
        st.builds(
            Damage,
            st.just("symlink"),
            st.sampled_from(["report", "cells", "manifest.json", "turns.jsonl", example.cell_files[0]]),
        ),
        st.builds(Damage, st.just("nest_yaml"), st.just("stacks/llamacpp.yaml"), depth),
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def figures(run: Path) -> bytes:
    return (run / "report" / "cells_long.csv").read_bytes()


def _flat(text: str) -> str:
    return "".join(text.split())  # a path rich wrapped over lines still reads as the path


def same_text(answer: str, run: Path, intact: str, intact_run: Path) -> bool:
    """Two command outputs say the same, the run's path aside (rich centres a title in the width: a path of
    another length moves its padding)."""
    return _flat(answer.replace(str(run), "RUN")) == _flat(intact.replace(str(intact_run), "RUN"))


# What each command is asked: its arguments for run `run` (the intact run is `a`, the one to compare with).
COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "stats": lambda run, _a: ["stats", str(run / "turns.jsonl")],
    "triage": lambda run, _a: ["triage", str(run)],
    "diff": lambda run, a: ["diff", str(a), str(run)],
}
PRODUCT_COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "channels": lambda run, _a: ["channels", str(run)],
    "gate": lambda run, _a: ["gate", str(run)],
}


class Intact:
    """What the intact run answers, computed once (the same commands on an undamaged copy). Not a dataclass: a
    failing example prints its arguments, and the intact run's bytes would drown it."""

    def __init__(self, example: Example, run: Path) -> None:
        self.example, self.run = example, run
        self.report = figures(run)
        self.cells = load_run(run).cells
        self.answers: dict[str, tuple[int, str]] = {}

    def __repr__(self) -> str:
        return f"Intact({self.example.name})"

    @property
    def commands(self) -> dict[str, Callable[[Path, Path], list[str]]]:
        return {**COMMANDS, **(PRODUCT_COMMANDS if self.example.product else {})}


def intact_answers(example: Example) -> Iterator[Intact]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "intact" / example.name
        shutil.copytree(example.path, run)
        assert orchestrate("report", str(run)).returncode == 0
        intact = Intact(example, run)
        for name, args in intact.commands.items():
            answer = orchestrate(*args(run, run))
            assert "Traceback" not in answer.stdout + answer.stderr
            intact.answers[name] = (answer.returncode, answer.stdout)
        yield intact


@pytest.fixture(scope="module")
def small() -> Iterator[Intact]:
    yield from intact_answers(SMALL)


@pytest.fixture(scope="module")
def product() -> Iterator[Intact]:
    yield from intact_answers(PRODUCT)


def damaged_paths(run: Path, damaged: list[Damage]) -> set[str]:
    """What an answer must name: a damaged file by its path in the run (a folder's path names what is in it); a
    file's bare name is not enough (a hint naming `report` or `cells` is in many errors)."""
    return {_flat(str(run / d.target)) for d in damaged}


def names_damage(text: str, run: Path, damaged: list[Damage]) -> bool:
    return any(path in _flat(text) for path in damaged_paths(run, damaged))


def check_answer(name: str, result: Any, run: Path, damaged: list[Damage], same: Callable[[], bool]) -> None:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, f"{name}: a traceback\n{output[-3000:]}"
    if same():
        return
    assert result.returncode != 0, f"{name}: exit 0 with other figures than the intact run's, and no damage named"
    wanted = damaged_paths(run, damaged)
    assert names_damage(output, run, damaged), f"{name}: exit {result.returncode} names none of {wanted}\n{output}"


def check_report(run: Path, intact: Intact, damaged: list[Damage]) -> None:
    plain = orchestrate("report", str(run))
    check_answer("report", plain, run, damaged, lambda: plain.returncode == 0 and figures(run) == intact.report)
    allowed = orchestrate("report", "--allow-damaged", str(run))
    damage_md = run / "report" / "DAMAGE.md"

    def same_or_named() -> bool:
        if allowed.returncode != 0:
            return False
        return figures(run) == intact.report or (
            damage_md.is_file() and names_damage(damage_md.read_text(), run, damaged)
        )

    check_answer("report --allow-damaged", allowed, run, damaged, same_or_named)


def check_command(name: str, answer: Any, run: Path, intact: Intact, damaged: list[Damage]) -> None:
    code, text = intact.answers[name]
    check_answer(
        name,
        answer,
        run,
        damaged,
        lambda: answer.returncode == code and same_text(answer.stdout, run, text, intact.run),
    )


def check_load_run(run: Path, intact: Intact, damaged: list[Damage]) -> None:
    try:
        loaded = load_run(run)
    except StoreError as exc:
        wanted = damaged_paths(run, damaged)
        assert names_damage(str(exc), run, damaged), f"load_run: the error names none of {wanted}: {exc}"
    else:
        assert loaded.cells.equals(intact.cells), "load_run: other cells than the intact run's, and no error"


def check_damaged(intact: Intact, damaged: list[Damage]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "runs" / intact.example.name
        shutil.copytree(intact.example.path, run)
        shutil.rmtree(run / "report")  # each command writes its own report; the intact one is not left to read
        outside = root / "outside"
        (outside / "cells").mkdir(parents=True)
        (outside / "cells" / "keep.json").write_text("{}")
        for damage in damaged:
            apply(run, outside, damage)
        before = tree_bytes(outside)
        check_report(run, intact, damaged)
        for name, args in intact.commands.items():
            check_command(name, orchestrate(*args(run, intact.run)), run, intact, damaged)
        check_load_run(run, intact, damaged)
        assert tree_bytes(outside) == before, f"a write outside the run: {[str(d) for d in damaged]}"


EXAMPLE_SETTINGS = settings(
    max_examples=25,
    deadline=timedelta(seconds=120),
    derandomize=True,  # the same damages on every machine: a failure here reproduces there
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow  # dozens of in-process command runs per example (~1 s each)
@EXAMPLE_SETTINGS
@given(damaged=st.lists(damages(SMALL), min_size=1, max_size=3))
def test_a_damaged_run_reads_the_same_names_its_damage_or_is_refused_by_name(
    small: Intact, damaged: list[Damage]
) -> None:
    check_damaged(small, damaged)


@pytest.mark.slow
@EXAMPLE_SETTINGS
@given(damaged=st.lists(damages(PRODUCT), min_size=1, max_size=2))
def test_a_damaged_product_run_reads_the_same_names_its_damage_or_is_refused_by_name(
    product: Intact, damaged: list[Damage]
) -> None:
    check_damaged(product, damaged)
