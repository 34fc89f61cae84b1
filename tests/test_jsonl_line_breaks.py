"""JSON Lines end at `\\n` only (issue 28, defect 22): a JSON string may hold U+2028, U+2029, U+0085 or another
Unicode line break raw, and `audit` refused such a valid file as "truncated JSON" (`str.splitlines` cut it there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.jsonl import text_lines
from tests.cliinprocess import orchestrate

PLAIN = Path(__file__).resolve().parent / "fixtures" / "audit" / "plain"
BREAKS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]  # what str.splitlines cuts at


def test_text_lines_split_at_newline_only() -> None:
    text = '{"a": "x\u2028y\x85z"}\r\n\n  \n{"b": 1}'
    assert list(text_lines(text)) == [(1, '{"a": "x\u2028y\x85z"}\r'), (4, '{"b": 1}')]


def _with_breaks(source: Path, target: Path, escaped: bool) -> Path:
    """`source` with every Unicode line break in each `content` string, raw (or escaped, as the control)."""
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]

    def marked(value: object) -> object:
        if isinstance(value, dict):
            return {k: f"{v}{''.join(BREAKS)}." if k == "content" and isinstance(v, str) else marked(v)
                    for k, v in value.items()}  # fmt: skip
        if isinstance(value, list):
            return [marked(item) for item in value]
        return value

    written = [json.dumps(marked(row), ensure_ascii=escaped) for row in rows]
    # Only U+2028, U+2029 and U+0085 may stand raw in a JSON string; the C0 breaks are escaped either way.
    target.write_text("\n".join(written) + "\n", encoding="utf-8")
    return target


@pytest.mark.parametrize("name", ["messages.jsonl", "trajectories.jsonl"])
def test_audit_reads_raw_unicode_line_breaks(name: str, tmp_path: Path) -> None:
    raw = _with_breaks(PLAIN / name, tmp_path / f"raw-{name}", escaped=False)
    escaped = _with_breaks(PLAIN / name, tmp_path / f"escaped-{name}", escaped=True)
    text = raw.read_text(encoding="utf-8")
    assert "\u2028" in text and "\x85" in text and len(text.splitlines()) > text.count("\n")  # what broke it
    tools = str(PLAIN / "tools.json")
    done = orchestrate("audit", str(raw), "--tools", tools, "--json")
    control = orchestrate("audit", str(escaped), "--tools", tools, "--json")
    assert control.returncode == 0, control.stderr
    assert done.returncode == 0, done.stderr
    # The same figures, seeds and labels: only the file's name differs.
    assert json.loads(done.stdout.replace("raw-", "escaped-")) == json.loads(control.stdout)
    assert json.loads(done.stdout)["seeds"]
