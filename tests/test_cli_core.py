"""`orchestrate classify` and `orchestrate stats` end to end through the CLI (in-process, tests/cliinprocess.py);
the SIGINT test at the end needs a real process started by a shell, and is slow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import bodies as b
from tests.cliinprocess import orchestrate


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return orchestrate(*args)  # COLUMNS=200: rich wraps tables to the terminal width


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_classify_writes_one_line_per_exchange(tmp_path: Path) -> None:
    exchanges = [
        {
            "id": "a",
            "stack": "vllm",
            "mode": "native",
            "tools": b.TOOLS,
            "http_status": 400,
            "body": b.VLLM_AUTO_REFUSAL_FLAT,
            "error": None,
        },
        {
            "id": "b",
            "stack": "llamacpp",
            "mode": "text-tools",
            "tools": b.TOOLS,
            "http_status": 200,
            "body": b.openai_reply('<tool_call>{"name": "pod_status", "arguments": {"name": "x"}}</tool_call>'),
            "error": None,
        },
        {
            "id": "c",
            "stack": "ollama",
            "mode": "native",
            "tools": b.TOOLS,
            "http_status": None,
            "body": None,
            "error": {"kind": "timeout", "message": "read timed out"},
        },
        {
            "id": "d",
            "stack": "sglang",
            "mode": "native",
            "tools": b.TOOLS,
            "http_status": 502,
            "body": "<html>bad gateway</html>",
            "error": None,
        },
    ]
    result = run("classify", str(write_jsonl(tmp_path / "ex.jsonl", exchanges)))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["id"], r["outcome"], r["detail"]) for r in rows] == [
        ("a", "rejected_request", "refused:no_tool_parser"),
        ("b", "valid_call", None),
        ("c", "non_response", "transport:timeout"),
        ("d", "non_response", "server:http_502"),
    ]
    assert rows[1]["calls"] == [{"name": "pod_status", "arguments": {"name": "x"}, "id": None}]


def test_classify_prints_finish_reason_and_flags(tmp_path: Path) -> None:
    def exchange(ident: str, stack: str, mode: str, status: int | None, body: object) -> dict[str, object]:
        return {"id": ident, "stack": stack, "mode": mode, "tools": b.TOOLS, "http_status": status, "body": body}

    exchanges = [
        exchange("cut", "vllm", "text-tools", 200, b.TRUNCATED_CALL_REPLY),
        exchange("cut-constrained", "vllm", "constrained", 200, b.TRUNCATED_CALL_REPLY),
        exchange("whole", "vllm", "native", 200, b.openai_reply("The pod is fine.")),
        exchange("parse-500", "llamacpp", "native", 500, b.LLAMACPP_PARSE_FAILURE),
        exchange("rate-limited", "openai", "native", 429, b.OPENAI_RATE_LIMITED),
        exchange("no-reply", "ollama", "native", None, None),
    ]
    result = run("classify", str(write_jsonl(tmp_path / "ex.jsonl", exchanges)))
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert all({"finish_reason", "flags", "retryable"} <= set(r) for r in rows.values())
    cut = rows["cut"]
    assert (cut["outcome"], cut["finish_reason"], cut["flags"]) == (
        "unparseable_text",
        "length",
        ["truncated:max_tokens"],
    )
    assert rows["cut-constrained"]["flags"] == ["truncated:max_tokens", "constraint:violated"]
    assert (rows["whole"]["finish_reason"], rows["whole"]["flags"]) == ("stop", [])
    parse = rows["parse-500"]
    assert (parse["outcome"], parse["detail"], parse["retryable"]) == (
        "unparseable_text",
        "parse:server_rejected_output",
        False,
    )
    assert parse["text_call_recoverable"] is True
    assert (rows["rate-limited"]["detail"], rows["rate-limited"]["retryable"]) == ("server:rate_limited", True)
    assert (rows["no-reply"]["finish_reason"], rows["no-reply"]["flags"]) == (None, [])


def test_classify_bad_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = {"id": 1, "stack": "vllm", "mode": "native", "tools": [], "http_status": 200, "body": None, "error": None}
    path.write_text(json.dumps(good) + "\n{not json\n")
    result = run("classify", str(path))
    assert result.returncode == 2
    assert f"{path}:2" in result.stderr and "bad JSON" in result.stderr
    assert result.stdout.count("\n") == 1  # the first line was still answered


def test_classify_missing_field_and_unknown_stack(tmp_path: Path) -> None:
    missing = write_jsonl(tmp_path / "m.jsonl", [{"id": 1, "stack": "vllm", "tools": [], "http_status": 200}])
    result = run("classify", str(missing))
    assert result.returncode == 2 and f"{missing}:1" in result.stderr and "mode" in result.stderr
    unknown = write_jsonl(
        tmp_path / "u.jsonl", [{"id": 1, "stack": "vlm", "mode": "native", "tools": [], "http_status": 200}]
    )
    result = run("classify", str(unknown))
    assert result.returncode == 2 and "did you mean 'vllm'" in result.stderr


def test_classify_names_the_call_format_and_takes_one_per_exchange(tmp_path: Path) -> None:
    pythonic = b.openai_reply('[pod_status(name="api-1")]')
    exchanges = [
        {"id": "auto", "stack": "vllm", "mode": "native", "tools": b.TOOLS, "http_status": 200, "body": pythonic},
        {"id": "json-only", "call_format": "json", "stack": "vllm", "mode": "text-tools", "tools": b.TOOLS}
        | {"http_status": 200, "body": pythonic},
    ]
    result = run("classify", str(write_jsonl(tmp_path / "f.jsonl", exchanges)))
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in map(json.loads, result.stdout.splitlines())}
    auto = rows["auto"]
    assert (auto["outcome"], auto["detail"], auto["call_format"], auto["calls"]) == (
        "unparseable_text",
        "parse:call_in_text",
        "pythonic",
        [],
    )
    assert auto["text_calls"] == [{"name": "pod_status", "arguments": {"name": "api-1"}, "id": None}]
    assert (rows["json-only"]["outcome"], rows["json-only"]["call_format"]) == ("no_call_prose", None)
    bad = write_jsonl(tmp_path / "b.jsonl", [{**exchanges[0], "call_format": "yaml"}])
    result = run("classify", str(bad))
    assert result.returncode == 2 and f"{bad}:1: field 'call_format'" in result.stderr
    assert "unknown call format 'yaml'" in result.stderr and "Traceback" not in result.stderr


def test_unreadable_file_is_one_clear_error(tmp_path: Path) -> None:
    result = run("stats", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2 and "nope.jsonl" in result.stderr and "Traceback" not in result.stderr


def test_stats_json_and_table(tmp_path: Path) -> None:
    rows = []
    for seed in range(8):
        rows.append(
            {
                "stack": "llamacpp",
                "model": "q",
                "tools_mode": "native",
                "seed": seed,
                "turn": 0,
                "outcome": "valid_call" if seed % 2 else "no_call_prose",
            }
        )
        rows.append(
            {
                "stack": "vllm",
                "model": "q",
                "tools_mode": "native",
                "seed": seed,
                "turn": 0,
                "outcome": "rejected_request",
            }
        )
    path = write_jsonl(tmp_path / "turns.jsonl", rows)
    result = run("stats", str(path), "--json", "--resamples", "2000")
    assert result.returncode == 0, result.stderr
    cells = {c["stack"]: c for c in json.loads(result.stdout)}
    assert cells["vllm"]["stack_config"] == "vllm"  # defaults to the stack when records carry no config
    assert cells["llamacpp"]["per_seed_mean"] == 0.5 and cells["llamacpp"]["n_seeds"] == 8
    assert 0 <= cells["llamacpp"]["ci_low"] < 0.5 < cells["llamacpp"]["ci_high"] <= 1
    assert cells["vllm"]["status"] == "undefined" and cells["vllm"]["per_seed_mean"] is None
    assert cells["vllm"]["n_rejected"] == 8
    expected_keys = {
        "stack",
        "model",
        "tools_mode",
        "status",
        "per_seed_mean",
        "ci_low",
        "ci_high",
        "pooled",
        "n_seeds",
        "n_eligible_turns",
        "n_rejected",
        "n_non_response",
        "pooled_gap",
        "few_seeds",
    }
    assert expected_keys <= set(cells["vllm"])
    table = run("stats", str(path), "--resamples", "2000")
    assert table.returncode == 0 and "undefined" in table.stdout and "llamacpp" in table.stdout


def test_stats_missing_outcome_names_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [{"stack": "s", "model": "m", "tools_mode": "native", "seed": 1, "turn": 0}]
    )
    result = run("stats", str(path))
    assert result.returncode == 2 and f"{path}:1" in result.stderr and "outcome" in result.stderr


@pytest.mark.slow
def test_a_run_started_in_the_background_still_stops_on_sigint() -> None:
    # `cmd &` in a non-interactive shell starts Python with SIGINT ignored; the CLI must undo that.
    code = (
        "import signal; from orchestrator.serving.launchers import install_termination_handler;"
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN);"
        "install_termination_handler(); print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    out = subprocess.run(
        ["bash", "-c", f'{sys.executable} -c "{code}" & wait'], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True"], "SIGINT was ignored before, and is Ctrl-C's after"
