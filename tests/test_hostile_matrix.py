"""Hostile matrix files and names (issue 14): every bad file is one MatrixError naming the file and the line,
quickly and in bounded memory; names never leave the results directory, never break rich, never collide."""

from __future__ import annotations

import io
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.core.cell import CellKey, slug
from orchestrator.core.stats import MAX_RESAMPLES, MAX_RNG_SEED
from orchestrator.core.types import ToolsMode
from orchestrator.runner.config.matrix import MAX_CELL_ID, Matrix, expand
from orchestrator.runner.config.matrixchecks import check_cell_ids
from orchestrator.runner.config.matrixentries import MAX_NAME
from orchestrator.runner.config.matrixfile import MatrixError, load_matrix
from orchestrator.runner.sweep.progress import SweepProgress
from orchestrator.serving.registry import REPO_ROOT
from orchestrator.serving.yamlfiles import MAX_BYTES, MAX_DEPTH
from tests.test_matrix import GOOD
from tests.test_matrix_channels import CHANNELS


def write(tmp_path: Path, data: bytes | str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def refused(path: Path, pattern: str, seconds: float = 10.0) -> str:
    """The one MatrixError: it starts with the file, matches `pattern`, fits on one line, comes in time."""
    started = time.monotonic()
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    text = str(raised.value)
    assert time.monotonic() - started < seconds, text
    assert text.startswith(str(path)) and "\n" not in text, text
    assert re.search(pattern, text), text
    return text


def good(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)

# Each hostile class: (file bytes, what the one error says). The table in the report counts these.
HOSTILE_FILES = {
    "latin-1": (
        good("name: t\n", "name: t\ndescription: caf\xe9\n").encode("latin-1"),
        r"bad\.yaml:2: not UTF-8.*0xe9",
    ),
    "binary": (bytes(range(256)) * 8, r"bad\.yaml:\d+: not UTF-8 .*offset 128"),
    "nul byte raw": (good("name: t", "name: t\x00").encode(), r"bad\.yaml:1: .*#x0000 is not allowed"),
    "nul in a name": (good("name: t", 'name: "t\\0"'), r"bad\.yaml:1: field name: .*may hold only"),
    "10,000 [": ("a: " + "[" * 10_000, rf"bad\.yaml:1: YAML refused: nested more than {MAX_DEPTH}"),
    "10,000 {": ("a: " + "{b: " * 10_000, r"YAML refused: nested more than"),
    "block nesting": ("".join(" " * i + "a:\n" for i in range(200)), r"YAML refused: nested more than"),
    "billion laughs": (LAUGHS, r"bad\.yaml:1: YAML refused: more than 100000 nodes once its aliases"),
    "alias in itself": ("a: &a [*a]\n", r"bad\.yaml:1: YAML refused: an alias refers to a collection that contains"),
    "many aliases": ("a: &a x\nb: [" + "*a, " * 1500 + "*a]\n", r"bad\.yaml:2: YAML refused: more than 1000 aliases"),
    "python object": ("a: !!python/object/apply:os.system [echo hi]\n", r":1: not valid YAML: .*python/object.*plain"),
    "python name": ("a: !!python/name:os.system\n", r"not valid YAML: .*constructor for the tag"),
    "unknown tag": ("a: !custom x\n", r"not valid YAML: .*constructor for the tag '!custom'"),
    "1.0e400": (good("turn_cap: 4", "turn_cap: 1.0e400"), r":13: field turn_cap: Input should be a valid integer"),
    "10**10000": (good("turn_cap: 4", "turn_cap: " + "9" * 10_000), r":13: YAML refused: an integer of 10000"),
    "4000 digits": (good("turn_cap: 4", "turn_cap: " + "9" * 999), r":13: field turn_cap: .*less than or equal"),
    "sexagesimal": ("a: " + "1:" * 20_000 + "1\n", r":1: YAML refused: an integer of"),
    ".inf seconds": (good("turn_cap: 4", "turn_cap: 4\ntimeouts: {request_s: .inf}"), r"timeouts\.request_s: .*finite"),
    ".nan temperature": (good("turn_cap: 4", "turn_cap: 4\ndecoding: {temperature: .nan}"), r"decoding\.temperature"),
    "too large": ("#" * (MAX_BYTES + 1), rf"bad\.yaml: larger than {MAX_BYTES} bytes"),
    "two documents": (GOOD + "---\n" + GOOD, r"bad\.yaml:1\d: not valid YAML"),
    "a list": ("- 1\n- 2\n", r"bad\.yaml:1: a matrix file is a mapping"),
    "empty": ("", r"bad\.yaml:1: a matrix file is a mapping"),
    "unhashable key": ("? [a]\n: 1\n", r"not valid YAML: .*unhashable key"),
    "a date for a name": (good("name: t", "name: 2001-01-01"), r":1: field name: Input should be a valid string"),
    "unicode model": (good("- name: m", "- name: 模型"), r":6: field models\.0\.name: a model name '模型' may hold"),
    "unicode matrix name": (good("name: t", "name: tést"), r":1: field name: a matrix name"),
    "rtl and zero-width": (good("- name: m", '- name: "m\\u200b\\u202e"'), r"field models\.0\.name"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_a_hostile_file_is_one_matrix_error_naming_file_and_line(tmp_path: Path, case: str) -> None:
    data, pattern = HOSTILE_FILES[case]
    refused(write(tmp_path, data), pattern)


def test_a_billion_laughs_is_refused_fast_and_small(tmp_path: Path) -> None:
    import tracemalloc

    path = write(tmp_path, LAUGHS)
    tracemalloc.start()
    refused(path, r"aliases are expanded", seconds=1.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20, peak  # 10**9 leaves would be gigabytes


def test_an_honest_file_with_aliases_and_windows_line_ends_still_loads(tmp_path: Path) -> None:
    text = good(
        "    sources:\n      llamacpp: {asset: smollm2-135m-instruct}\n",
        "    sources:\n      llamacpp: &src {asset: smollm2-135m-instruct}\n",
    )
    text = text.replace("      vllm: {asset: smollm2-135m-instruct}", "      vllm: *src")
    matrix, digest = load_matrix(write(tmp_path, ("\ufeff" + text).replace("\n", "\r\n"), "ok.yaml"))
    assert len(expand(matrix)) == 2
    plain, _ = load_matrix(write(tmp_path, "\ufeff" + text, "plain.yaml"))
    assert plain == matrix  # a BOM and CRLF read as the text Path.read_text() gives
    assert load_matrix(write(tmp_path, "\ufeff" + text, "same.yaml"))[1] == digest


# Counts are strict: never coerced from a string, a float or a bool.
COUNTS = [
    ("turn_cap: 4", "turn_cap: {}", "turn_cap"),
    ("{suite: ops, count: 3}", "{{suite: ops, count: {}}}", "tasks.0.count"),
    ("turn_cap: 4", "turn_cap: 4\nbootstrap: {{resamples: {}}}", "bootstrap.resamples"),
    ("turn_cap: 4", "turn_cap: 4\ndecoding: {{max_tokens: {}}}", "decoding.max_tokens"),
    ("turn_cap: 4", "turn_cap: 4\nretries: {{max_attempts: {}}}", "retries.max_attempts"),
    ("turn_cap: 4", "turn_cap: 4\nconcurrency: {}", "concurrency"),
    ("{stack: llamacpp, tool_config: jinja}", "{{stack: llamacpp, tool_config: jinja, ctx: {}}}", "stacks.0.ctx"),
]


@pytest.mark.parametrize(("old", "new", "field"), COUNTS)
@pytest.mark.parametrize("value", ['"8"', "8.9", "8.0", "true", "1e12"])
def test_counts_are_strict_integers(tmp_path: Path, old: str, new: str, field: str, value: str) -> None:
    if field == "stacks.0.ctx":
        value = value.replace("8", "4096") if value != "true" else value
    refused(write(tmp_path, good(old, new.format(value))), f"field {re.escape(field)}: Input should be")


@pytest.mark.parametrize(
    ("bootstrap", "field", "message"),
    [
        ("{rng_seed: -1}", "rng_seed", "greater than or equal to 0"),
        (f"{{rng_seed: {MAX_RNG_SEED + 1}}}", "rng_seed", "less than or equal"),
        ("{resamples: 1e12}", "resamples", "valid integer"),
        (f"{{resamples: {MAX_RESAMPLES + 1}}}", "resamples", "less than or equal to 1000000"),
        ("{resamples: 0}", "resamples", "greater than or equal to 1"),
        ("{resample: 2000}", "resample", "Extra inputs are not permitted"),
        ("{confidence: 1.5}", "confidence", "less than 1"),
    ],
)
def test_bootstrap_settings_are_bounded_at_validation(tmp_path: Path, bootstrap: str, field: str, message: str) -> None:
    refused(
        write(tmp_path, good("turn_cap: 4", f"turn_cap: 4\nbootstrap: {bootstrap}")),
        rf":14: field bootstrap\.{field}: .*{message}",
    )


def test_the_bootstrap_bounds_are_ones_numpy_takes(tmp_path: Path) -> None:
    import numpy as np

    path = write(tmp_path, good("turn_cap: 4", f"turn_cap: 4\nbootstrap: {{rng_seed: {MAX_RNG_SEED}, resamples: 7}}"))
    matrix, _ = load_matrix(path)
    assert (matrix.bootstrap.rng_seed, matrix.bootstrap.resamples) == (MAX_RNG_SEED, 7)
    assert np.random.default_rng(matrix.bootstrap.rng_seed).integers(0, 10) in range(10)
    assert np.random.RandomState(matrix.bootstrap.rng_seed).randint(10) in range(10)


@pytest.mark.parametrize(
    ("section", "line"),
    [
        ("timeouts: {request_s: 5, request: 3}", 14),
        ("retries: {attempts: 2}", 14),
        ("decoding: {temp: 0}", 14),
        ("exclude:\n  - {stack: vllm-default, modes: native}", 15),
    ],
)
def test_unknown_keys_in_a_nested_section_are_refused(tmp_path: Path, section: str, line: int) -> None:
    text = good("turn_cap: 4", f"turn_cap: 4\n{section}")
    refused(write(tmp_path, text), rf":{line}: field \w+\.\S*: Extra inputs are not permitted")


def test_an_unknown_seed_id_names_the_field_and_the_line(tmp_path: Path) -> None:
    text = good("  - {suite: ops, count: 3}", "  - suite: ops\n    seeds: [ops-00, ops-99]")
    refused(write(tmp_path, text), r":13: field tasks\.0\.seeds: seeds\[1\]: suite 'ops' has no seed 'ops-99'")
    refused(
        write(tmp_path, good("{suite: ops, count: 3}", "{suite: ops, seeds: [ops-00, ops-00]}")),
        r"'ops-00' is listed twice",
    )
    refused(
        write(tmp_path, good("{suite: ops, count: 3}", "{suite: ops, count: 99}")),
        r":12: field tasks\.0: count: .*12 seeds",
    )
    refused(write(tmp_path, good("{suite: ops,", "{suite: ../seeds/ops,")), r":12: field tasks\.0\.suite: a suite name")


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        ("name: t", "name: ../../etc", r":1: field name: a matrix name '\.\./\.\./etc'"),
        ("name: t", "name: a/b", r"field name: a matrix name 'a/b'"),
        ("name: t", "name: .hidden", r"field name: a matrix name '\.hidden'"),
        (
            "{stack: llamacpp, tool_config: jinja}",
            "{stack: llamacpp, tool_config: jinja, id: ../x}",
            r":3: field stacks\.0\.id: a stack id",
        ),
        ("- name: m", "- name: ../../m", r":6: field models\.0\.name: .*no '\.\.'"),
        ("- name: m", "- name: .m", r"field models\.0\.name"),
        ("- name: m", "- name: '[/x]'", r"field models\.0\.name: a model name '\[/x\]'"),
        (
            "- name: m",
            f"- name: {'m' * (MAX_NAME + 1)}",
            rf"models\.0\.name: name 'm+'… is {MAX_NAME + 1} characters long; at most",
        ),
        ("name: t", f"name: {'t' * 5000}", r"field name: name 't+'… is 5000 characters"),
    ],
)
def test_names_that_would_leave_the_results_directory_or_break_files_are_refused(
    tmp_path: Path, old: str, new: str, pattern: str
) -> None:
    text = refused(write(tmp_path, good(old, new)), pattern)
    assert len(text) < 600  # a 5,000-character name is not echoed whole


@pytest.mark.server
def test_names_at_their_bounds_give_file_safe_ids_within_the_file_name_limit(tmp_path: Path) -> None:
    model, stack = "Org/" + "m" * (MAX_NAME - 4), "s" * MAX_NAME
    text = good("- name: m", f"- name: {model}").replace("tool_config: jinja}", f"tool_config: jinja, id: {stack}}}")
    text += "stream: [false, true]\ntool_choice: [auto, required]\nparallel_tool_calls: [default, false]\n"
    plans = expand(load_matrix(write(tmp_path, text))[0])
    ids = [cell.cell_id for plan in plans for cell in plan.cells] + [plan.server_id for plan in plans]
    assert all(Path(i).name == i and not i.startswith(".") and len(i) <= MAX_CELL_ID for i in ids), ids
    assert max(len(i) for i in ids) == MAX_CELL_ID  # every agent-loop axis at once, names at their bound: it fits
    # The channels add `__channel-product`, `__sample-2`: past the bound, refused by name rather than failing mid-run.
    channels = CHANNELS.replace("- name: m", f"- name: {model}").replace("modes: [text-tools]", "modes: [native]")
    channels = channels.replace("tool_config: jinja}", f"tool_config: jinja, id: {stack}}}")
    channels += "stream: [true]\ntool_choice: [required]\nparallel_tool_calls: [false]\n"
    refused(write(tmp_path, channels), rf"field models: cell id '.*… is \d+ characters, at most {MAX_CELL_ID}.*shorten")


def test_cell_id_checks_name_the_long_id_and_both_colliding_names() -> None:
    with pytest.raises(ValueError, match=r"cell id 'aaa.*… is 201 characters, at most 200.*shorten model 'm'"):
        check_cell_ids([("a" * 201, "s", "m")], max_length=200, max_cells=10)
    with pytest.raises(ValueError, match=r"stack 's' with model 'm:' and stack 's' with model 'm_' give the same"):
        check_cell_ids([("s__m_", "s", "m_"), ("s__m_", "s", "m:")], max_length=200, max_cells=10)
    with pytest.raises(ValueError, match=r"more than 1 cells"):
        check_cell_ids([("a", "s", "m"), ("b", "s", "m")], max_length=200, max_cells=1)
    assert check_cell_ids([("a", "s", "m"), ("b", "s", "m")], max_length=200, max_cells=2) == 2


def test_slug_never_gives_a_path_or_a_hidden_file() -> None:
    for text in ["..", "../x", "/etc/passwd", ".", "a/../../b", "\x00", "[/x]"]:
        safe = slug(text)
        assert "/" not in safe and not safe.startswith(".") and Path(safe).name == safe and "\x00" not in safe
    assert slug("vllm-hermes__qwen2.5-coder_0.5b__native") == "vllm-hermes__qwen2.5-coder_0.5b__native"
    key = CellKey(stack_config="..", model="../..", tools_mode=ToolsMode.NATIVE)
    assert key.cell_id == "_.__.._..__native"


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        (
            "modes: [native, text-tools]",
            "modes: [native, text-tools, native]",
            r":10: field modes: 'native' is listed twice",
        ),
        (
            "models:\n",
            "models:\n  - {name: m, sources: {vllm: {asset: x}}}\n",
            r":6: field models: model 'm' is listed twice",
        ),
        ("- name: m\n", "- name: 'm:'\n", None),
        ("turn_cap: 4", "turn_cap: 4\nexclude: [{model: m}]", r":15: field exclude: the matrix has no cells"),
        ("turn_cap: 4", "turn_cap: 4\nexclude: [{model: mm}]", r":15: field exclude\.0\.model: 'mm' is no model"),
        ("turn_cap: 4", "turn_cap: 4\nexclude: [{stack: nope}]", r"field exclude\.0\.stack: 'nope' is no stack"),
        (
            "turn_cap: 4",
            "turn_cap: 4\nexclude: [{mode: constrained}]",
            r"field exclude\.0\.mode: 'constrained' is not in",
        ),
        (
            "{stack: vllm, tool_config: default}",
            "{stack: llamacpp, tool_config: jinja}",
            r":4: field stacks\.1: stack label 'llamacpp-jinja' is used twice",
        ),
    ],
)
def test_duplicates_collisions_and_empty_matrices_are_refused(
    tmp_path: Path, old: str, new: str, pattern: str | None
) -> None:
    text = good(old, new.replace("[{", "\n  - {").rstrip("]") if "exclude" in new else new)
    if pattern is None:  # 'm:' and 'm_' are two names with one slug: the error names both
        text = text.replace("models:\n", "models:\n  - {name: m_, sources: {llamacpp: {asset: x}}}\n")
        pattern = (
            r"field models: stack 'llamacpp-jinja' with model 'm:' and stack 'llamacpp-jinja' with model 'm_' "
            r"give the same cell id 'llamacpp-jinja__m___native'"
        )
    refused(write(tmp_path, text), pattern)


@pytest.mark.server
@pytest.mark.parametrize("name", ["cpu", "smoke", "full", "paper", "paper-cpu", "product-cpu", "stream-cpu"])
def test_a_shipped_matrix_round_trips_through_its_manifest(name: str) -> None:
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / f"{name}.yaml")
    again = Matrix.model_validate(yaml.safe_load(yaml.safe_dump(matrix.model_dump(mode="json"))))
    assert again == matrix  # a resume re-validates the manifest's copy: strict counts must take their own dump


def test_markup_in_names_prints_as_text_on_a_live_display_and_plain_lines() -> None:
    for plain in (True, False):
        out = io.StringIO()
        console = Console(file=out, width=200, force_terminal=not plain)
        with SweepProgress(console, plain=plain) as progress:
            task = progress.add_task("server [/x] [bold]\\", total=2)
            progress.update(task, "cell [/y] turn 1\\")
            progress.advance(task)
            progress.line("line [/z] [red]")
            progress.cell_done("cell[/w]", "complete")
        text = out.getvalue()
        assert "[/z] [red]" in text and "cell[/w] complete" in text, text
        assert "server [/x] [bold]" in text, text
        assert ("cell [/y] turn 1" in text) is not plain, text  # the live display shows what a task is doing


runner = CliRunner()


def test_cli_validate_of_a_hostile_file_is_one_line_with_the_file_and_no_traceback(tmp_path: Path) -> None:
    for case in ("latin-1", "10,000 [", "billion laughs", "python object", "unicode model"):
        path = write(tmp_path, HOSTILE_FILES[case][0], f"[{case}].yaml")
        result = runner.invoke(app, ["validate", str(path)], env={"COLUMNS": "300"})
        assert result.exit_code == 2, (case, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), (case, result.output)
        assert ("Traceback" not in result.output and result.exception is None) or isinstance(
            result.exception, SystemExit
        )


def test_cli_validate_prints_a_file_named_like_markup(tmp_path: Path) -> None:
    (tmp_path / "[bold]" / "[").mkdir(parents=True)
    path = write(tmp_path / "[bold]", GOOD, "[/x].yaml")  # the path reads `.../[bold]/[/x].yaml`
    from tests.cliinprocess import orchestrate  # the width asked for reaches the CLI's console (an xdist worker too)

    result = orchestrate("validate", str(path), env={"COLUMNS": "400"})
    assert result.returncode == 0, result.stdout + result.stderr
    unwrapped = "".join(line.strip() for line in result.stdout.splitlines())  # the title wraps at the table's width
    assert "[bold]/[/x].yaml" in unwrapped and "llamacpp-jinja__m__native" in result.stdout


# Property: whatever the bytes, text or structure, load_matrix gives a Matrix or a MatrixError, in time.
BASE = yaml.safe_load(GOOD)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.text(max_size=40),
    st.sampled_from(["../x", "[/x]", "a\x00b", "模型", "ops-99", "native", "." * 3, "9" * 70]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
PATHS = st.sampled_from(
    [
        ("name",),
        ("turn_cap",),
        ("modes",),
        ("models", 0, "name"),
        ("models", 0, "sources"),
        ("stacks", 0),
        ("stacks", 0, "id"),
        ("tasks", 0, "seeds"),
        ("tasks", 0, "count"),
        ("bootstrap",),
        ("decoding",),
        ("exclude",),
        ("timeouts",),
        ("gate",),
        ("samples",),
        ("channels",),
        ("stream",),
        ("extra",),
        ("retries", "max_attempts"),
    ]
)


def outcome_of(data: bytes) -> Matrix | MatrixError:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "m.yaml"
        path.write_bytes(data)
        started = time.monotonic()
        try:
            result: Matrix | MatrixError = load_matrix(path)[0]
        except MatrixError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc), str(exc)
            result = exc
        assert time.monotonic() - started < 5.0
        return result


# Each example loads a file (~0.1 s with stacks and suites); HOSTILE_MATRIX_EXAMPLES=2000 for a deeper hunt.
EXAMPLES = int(os.environ.get("HOSTILE_MATRIX_EXAMPLES", "80"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.binary(max_size=400))
def test_any_bytes_give_a_matrix_or_a_matrix_error(data: bytes) -> None:
    assert isinstance(outcome_of(data), Matrix | MatrixError)


@PROPERTY
@given(st.text(alphabet=st.sampled_from(list("[]{}:,-&*!|>'\"#%@`?\n \t\x00\x85\ufeffab1.~")), max_size=200))
def test_yaml_ish_text_gives_a_matrix_or_a_matrix_error(text: str) -> None:
    assert isinstance(outcome_of(text.encode("utf-8", "surrogatepass")), Matrix | MatrixError)


@PROPERTY
@given(st.lists(st.tuples(PATHS, VALUES), min_size=1, max_size=3))
def test_any_value_anywhere_in_a_good_matrix_gives_a_matrix_or_a_matrix_error(
    changes: list[tuple[tuple, object]],
) -> None:
    data = yaml.safe_load(GOOD)
    for path, value in changes:
        node = data
        for part in path[:-1]:
            if isinstance(node, dict):
                node = node.setdefault(part, {})
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
        if isinstance(node, dict):
            node[path[-1]] = value
    assert isinstance(outcome_of(yaml.safe_dump(data, allow_unicode=True).encode()), Matrix | MatrixError)
