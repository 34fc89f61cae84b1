"""Secrets never reach a run directory or the console.

A real run (llama-server, one small model) with a distinctive random secret everywhere a secret can come from:
OPENAI_API_KEY, LLAMA_API_KEY (the stack's bearer token: api_key_env), HF_TOKEN and VLLM_API_KEY in the
process environment and in the stack's server env, and `--api-key SECRET` among the matrix's extra_args. The
server enforces the key (the run's turns are answered, so the bearer header was sent); then every byte of the
run directory (records, cells, manifest, stack snapshots, server logs, report) and all console output are
scanned for the secret as is, URL-encoded and base64."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.core.redact import (
    REDACTED,
    MissingEnvReference,
    argv_secrets,
    encodings,
    expand_env,
    redact_argv,
    redact_env,
    redact_matrix,
    scrub,
)
from orchestrator.runner.store.runstore import RunStore
from orchestrator.serving.registry import REPO_ROOT

SECRET = "sk-tcm-" + secrets.token_hex(16)
MATRIX = f"""\
name: secrets
stacks:
  - stack: llamacpp
    tool_config: jinja
    launcher: process
    ctx: 1024
    extra_args: ["--api-key", "{SECRET}"]
models:
  - name: smollm2-135m-instruct
    sources: {{llamacpp: {{asset: smollm2-135m-instruct}}}}
modes: [text-tools]
tasks:
  - {{suite: ops, count: 1}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 24, seed: 5}}
turn_cap: 2
bootstrap: {{resamples: 200}}
"""


def leaks(data: bytes) -> list[str]:
    return [form for form in encodings(SECRET) if form.encode() in data]


def stacks_with_secret_env(target: Path) -> Path:
    shutil.copytree(REPO_ROOT / "stacks", target)
    path = target / "llamacpp.yaml"
    text = path.read_text()
    assert "  default_ctx: 4096\n" in text and "api_key_env" not in text
    env = f'  env: {{HF_TOKEN: "{SECRET}", VLLM_API_KEY: "{SECRET}"}}\n'
    path.write_text(
        text.replace("  default_ctx: 4096\n", "  default_ctx: 4096\n" + env) + "api_key_env: LLAMA_API_KEY\n"
    )
    return target


@pytest.mark.integration
def test_no_secret_in_the_run_directory_or_console(
    tmp_path: Path, llama_server_binary: str, fault_counts: Callable[[str], None]
) -> None:
    env = {
        **os.environ,
        "COLUMNS": "250",
        "TOOLCALL_MATRIX_STACKS": str(stacks_with_secret_env(tmp_path / "stacks")),
        **{name: SECRET for name in ("OPENAI_API_KEY", "LLAMA_API_KEY", "HF_TOKEN", "VLLM_API_KEY")},
    }
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "r"

    def orchestrate(*args: str) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "orchestrator", *args]
        return subprocess.run(command, capture_output=True, env=env, timeout=600)

    done = orchestrate("matrix", str(matrix), "--results", str(results))
    console = done.stdout + done.stderr
    assert done.returncode == 0, console.decode()[-3000:]
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    # The key was in force and sent: the server was started with it and answered the turns (a missing or
    # wrong bearer token is a 401 on every request: rejected_request).
    (cell,) = RunStore(run).read_cells()
    assert cell["argv"][cell["argv"].index("--api-key") + 1] == REDACTED
    assert cell["env"]["HF_TOKEN"] == REDACTED and cell["env"]["VLLM_API_KEY"] == REDACTED
    outcomes = {turn["outcome"] for turn in RunStore(run).read_turns()}
    assert outcomes and "rejected_request" not in outcomes, outcomes
    report = orchestrate("report", str(run))
    assert report.returncode == 0, report.stderr.decode()[-3000:]
    # A secret that was never stored cannot be restored by a resume: a clear refusal, not a run with a wrong key.
    resumed = orchestrate("matrix", "--resume", str(run))
    assert resumed.returncode != 0 and b"${NAME}" in resumed.stderr, resumed.stderr.decode()[-2000:]

    scanned = {"console": console, "report console": report.stdout + report.stderr}
    scanned["resume console"] = resumed.stdout + resumed.stderr
    files = [p for p in run.rglob("*") if p.is_file()]
    names = {p.relative_to(run).parts[0] for p in files}
    assert {"turns.jsonl", "manifest.json", "cells", "stacks", "logs", "report"} <= names, names
    scanned |= {str(p.relative_to(run)): p.read_bytes() for p in files}
    found = {where: forms for where, data in scanned.items() if (forms := leaks(data))}
    assert not found, f"the secret leaked into: {sorted(found)}"
    total = sum(map(len, scanned.values()))
    fault_counts(f"{len(files)} run files and 3 console outputs scanned, {total} bytes, 0 leaks")


def test_redaction_rules() -> None:
    argv = ["srv", "--api-key", "k1k1k1k1", "--hf-token=t2t2t2t2", "--api-key-file", "/p", "--port", "80", "--jinja"]
    assert redact_argv(argv) == [
        "srv",
        "--api-key",
        REDACTED,
        "--hf-token=" + REDACTED,
        "--api-key-file",
        "/p",
        "--port",
        "80",
        "--jinja",
    ]
    assert argv_secrets(argv) == {"k1k1k1k1", "t2t2t2t2"}
    assert redact_argv(["--api-key", "${LLAMA_KEY}"]) == ["--api-key", "${LLAMA_KEY}"]  # a reference, kept
    env = {"HF_TOKEN": "a", "OPENAI_API_KEY": "b", "DB_PASSWORD": "c", "MY_SECRET_X": "d", "HF_HUB_OFFLINE": "1"}
    assert redact_env(env) == {**{k: REDACTED for k in list(env)[:4]}, "HF_HUB_OFFLINE": "1"}
    text = "a sk/+= b " + "".join(sorted(encodings("sk/+=secret")))
    assert "secret" not in scrub(text, {"sk/+=secret"}).replace(REDACTED, "")
    dumped = {"name": "m", "stacks": [{"stack": "x", "extra_args": ["--api-key", "v1v1v1v1"]}]}
    assert redact_matrix(dumped)["stacks"][0]["extra_args"] == ["--api-key", REDACTED]
    assert expand_env("--x=${A_KEY}", {"A_KEY": "val"}) == "--x=val"
    with pytest.raises(MissingEnvReference, match="B_KEY is not set"):
        expand_env("${B_KEY}", {})
