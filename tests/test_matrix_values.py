"""What a matrix file says is what runs, or one clear error (issue 28, defects 9, 14, 15): seed selection never
differs silently from the file, `decoding.extra` holds only what a JSON body can carry, and a key written twice
in any YAML the product reads is refused with the file and the line, never "the last one wins"."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runner.config.matrixfile import MatrixError, load_matrix
from orchestrator.runner.config.resolve import RunAssets
from orchestrator.runner.suites.tasks import SuiteError
from orchestrator.serving.registry import REPO_ROOT, InvalidStackError, read_stack_file, stacks_dir
from orchestrator.serving.yamlfiles import YamlInputError, parse_yaml
from tests.cliinprocess import orchestrate
from tests.test_matrix import GOOD

TASKS = "  - {suite: ops, count: 3}\n"


def matrix_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str, pattern: str) -> str:
    """`load_matrix` refuses the text with one MatrixError naming the file and matching `pattern`."""
    path = matrix_file(tmp_path, text)
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    message = str(raised.value)
    assert message.startswith(f"{path}:") and "\n" not in message, message
    assert re.search(pattern, message), message
    return message


def with_tasks(tasks: str) -> str:
    assert TASKS in GOOD
    return GOOD.replace(TASKS, tasks)


# --- defect 9: seed selection ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tasks", "pattern"),
    [
        (
            "  - {suite: ops, count: 2}\n  - {suite: ops, count: 3}\n",
            r":13: field tasks\.1: suite 'ops' is listed twice \(first at tasks\.0\): its seeds would run twice",
        ),
        (
            "  - {suite: ops, seeds: [ops-00]}\n  - {suite: ops, seeds: [ops-01]}\n",
            r"field tasks\.1: suite 'ops' is listed twice",
        ),
        ("  - {suite: ops, seeds: []}\n", r":12: field tasks\.0\.seeds: an empty list selects no seed"),
        (
            "  - {suite: ops, seeds: [ops-03], count: 5}\n",
            r":12: field tasks\.0: give `seeds` or `count`, not both: count 5 would be ignored for the 1 seed",
        ),
    ],
)
def test_a_seed_selection_that_would_differ_from_the_file_is_refused(tmp_path: Path, tasks: str, pattern: str) -> None:
    refused(tmp_path, with_tasks(tasks), pattern)


def test_validate_names_the_repeated_suite_on_one_line(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, with_tasks("  - {suite: ops, count: 2}\n  - {suite: ops, count: 3}\n"))
    result = orchestrate("validate", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "suite 'ops' is listed twice" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ("  - {suite: ops, count: 3}\n", ["ops-00", "ops-01", "ops-02"]),
        ("  - {suite: ops, seeds: [ops-05, ops-02]}\n", ["ops-05", "ops-02"]),
        ("  - {suite: ops}\n", [f"ops-{n:02d}" for n in range(12)]),
    ],
)
def test_a_valid_selection_runs_exactly_the_seeds_the_file_names(
    tmp_path: Path, tasks: str, expected: list[str]
) -> None:
    matrix, _ = load_matrix(matrix_file(tmp_path, with_tasks(tasks)))
    assert [seed for task in matrix.tasks for seed in task.seed_ids()] == expected


# --- defect 14: decoding.extra is what a JSON body can carry ----------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        ("{cache_prompt2: .nan}", r"key 'cache_prompt2': nan is not a finite number"),
        ("{x: {y: [1, -.inf]}}", r"key 'x\.y\[1\]': -inf is not a finite number"),
        ("{blob: !!binary aGVsbG8=}", r"key 'blob': a bytes is not a JSON value"),
        ("{tags: !!set {a, b}}", r"key 'tags': a set is not a JSON value"),
        ("{until: 2001-01-01}", r"key 'until': a date is not a JSON value"),
        ("{at: 2001-12-14t21:59:43.10-05:00}", r"key 'at': a datetime is not a JSON value"),
        ("{x: {1: a}}", r"key 'x': holds the key 1, not a string"),
    ],
)
def test_decoding_extra_that_cannot_be_sent_as_json_is_refused_naming_the_key(
    tmp_path: Path, extra: str, pattern: str
) -> None:
    text = GOOD.replace("turn_cap: 4", f"turn_cap: 4\ndecoding: {{extra: {extra}}}")
    message = refused(tmp_path, text, r":14: field decoding\.extra: " + pattern)
    assert "cannot be sent in a request body" in message


def test_decoding_extra_that_validates_is_sent_as_strict_json(tmp_path: Path) -> None:
    extra = "{a: 1, b: [x, {c: 2.5, d: null}], e: true, f: '2001-01-01'}"
    matrix, _ = load_matrix(
        matrix_file(tmp_path, GOOD.replace("turn_cap: 4", f"turn_cap: 4\ndecoding: {{extra: {extra}}}"))
    )
    sent: dict[str, Any] = json.loads(json.dumps(matrix.decoding.extra, allow_nan=False))  # httpx: allow_nan=False
    assert sent == {"a": 1, "b": ["x", {"c": 2.5, "d": None}], "e": True, "f": "2001-01-01"}


# --- defect 15: a key written twice ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        (
            "turn_cap: 4",
            "turn_cap: 4\nturn_cap: 999",
            r":14: YAML refused: key 'turn_cap' appears twice .*lines 13 and 14",
        ),
        (
            "turn_cap: 4",
            "turn_cap: 4\ndecoding: {temperature: 1.0, temperature: 50}",
            r":14: YAML refused: key 'temperature' appears twice",
        ),
        (
            "{suite: ops, count: 3}",
            "{suite: ops, count: 3, count: 12}",
            r":12: YAML refused: key 'count' appears twice",
        ),
        (
            "      vllm: {asset: smollm2-135m-instruct}",
            "      vllm: {asset: smollm2-135m-instruct}\n      vllm: {asset: other}",
            r":10: YAML refused: key 'vllm' appears twice",
        ),
    ],
)
def test_a_key_written_twice_in_a_matrix_is_refused_with_the_line(
    tmp_path: Path, old: str, new: str, pattern: str
) -> None:
    assert old in GOOD
    refused(tmp_path, GOOD.replace(old, new), pattern)


def test_validate_of_a_duplicate_key_is_one_error(tmp_path: Path) -> None:
    result = orchestrate(
        "validate", str(matrix_file(tmp_path, GOOD.replace("turn_cap: 4", "turn_cap: 4\nturn_cap: 999")))
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "m.yaml:14: YAML refused: key 'turn_cap' appears twice" in " ".join(result.stderr.split())


def test_a_key_written_twice_in_a_stack_file_is_refused(tmp_path: Path) -> None:
    text = (REPO_ROOT / "stacks" / "vllm.yaml").read_text()
    path = tmp_path / "vllm.yaml"
    path.write_text(text.replace("\napi: openai\n", "\napi: openai\napi: ollama\n", 1))
    with pytest.raises(InvalidStackError, match=r"vllm\.yaml:\d+: YAML refused: key 'api' appears twice"):
        read_stack_file(path)


def test_a_key_written_twice_in_a_suite_file_is_refused(tmp_path: Path) -> None:
    text = (REPO_ROOT / "seeds" / "ops.yaml").read_text()
    assert "\nversion: 2\n" in text
    (tmp_path / "ops.yaml").write_text(text.replace("\nversion: 2\n", "\nversion: 2\nversion: 3\n", 1))
    with pytest.raises(
        SuiteError, match=r"ops\.yaml:4: YAML refused: key 'version' appears twice in one mapping \(lines 3 and 4\)"
    ):
        RunAssets(stacks_dir(), tmp_path).suite("ops")


def test_merge_keys_still_override_and_equal_values_of_different_types_are_two_keys() -> None:
    _, data = parse_yaml("base: &b {x: 1, y: 2}\nuse: {<<: *b, x: 3}\nkeys: {1: a, '1': b}\n", Path("t.yaml"))
    assert data == {"base": {"x": 1, "y": 2}, "use": {"x": 3, "y": 2}, "keys": {1: "a", "1": "b"}}
    with pytest.raises(YamlInputError, match=r"t\.yaml:1: YAML refused: key 1 appears twice"):
        parse_yaml("{1: a, 0x1: b}", Path("t.yaml"))  # two spellings of one integer: one key


@pytest.mark.parametrize("kind", ["stacks", "seeds", "matrices"])
def test_every_shipped_definition_writes_each_key_once(kind: str) -> None:
    for path in sorted((REPO_ROOT / kind).glob("*.yaml")):
        parse_yaml(path.read_text(), path)


def test_two_suites_sharing_a_seed_id_are_refused_naming_both() -> None:
    """A turn record names its case by seed id (its identity: core/runrecords.py): two suites of one matrix with a
    common id would make their records copies of each other, so validation refuses them."""
    from orchestrator.runner.config.matrixchecks import check_seed_ids_distinct

    check_seed_ids_distinct({"ops": ["ops-00", "ops-01"], "formation": ["f-00"]})
    with pytest.raises(ValueError, match=r"tasks\.1: suite 'b' has seed id 'x-01', as suite 'a' has"):
        check_seed_ids_distinct({"a": ["x-00", "x-01"], "b": ["x-01"]})
    shipped = {path.stem: [seed["id"] for seed in parse_yaml(path.read_text(), path)[1]["seeds"]]
               for path in sorted((REPO_ROOT / "seeds").glob("*.yaml"))}  # fmt: skip
    check_seed_ids_distinct(shipped)  # the shipped suites can run together
