"""A full disk under a real run (llama-server, one small model): one clear error naming the file and "no space
left" (no traceback), the server torn down, every record already written intact, and `--resume` after space
is freed finishing with the full record set.

The disk is a real small tmpfs mounted as the results directory (ENOSPC), filled by a filler file once the
first turn is written; the resume runs after the filler is deleted. Where mounting is not permitted (an
unprivileged container) the run is made under a real file-size limit instead (RLIMIT_FSIZE: EFBIG, the
report's Parquet file being the first over it), and the resume runs without the limit."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.runner.store.runstore import RunStore
from orchestrator.serving.assets import cache_root

pytestmark = pytest.mark.integration
ENV = {**os.environ, "COLUMNS": "250"}
SEEDS = 2
MATRIX = f"""\
name: fulldisk
stacks:
  - {{stack: llamacpp, tool_config: jinja, launcher: process, ctx: 1024}}
models:
  - name: smollm2-135m-instruct
    sources: {{llamacpp: {{asset: smollm2-135m-instruct}}}}
modes: [text-tools]
tasks:
  - {{suite: ops, count: {SEEDS}}}
decoding: {{temperature: 1.0, top_p: 1.0, max_tokens: 24, seed: 5}}
turn_cap: 2
bootstrap: {{resamples: 200}}
"""
FSIZE_LIMIT = 24_000  # fallback: above every file of the sweep (cells ~8 KB), below the report's Parquet (~45 KB)


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[bool]:
    """A real tmpfs of `size` at `where`; yields False (nothing mounted) where mounting is not permitted."""
    where.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    try:
        yield done.returncode == 0
    finally:
        if done.returncode == 0:
            subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem has no byte left."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as out:
        chunk = b"\0" * 65536
        while True:
            try:
                out.write(chunk)
            except OSError:
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    return filler


def orchestrate(*args: str, preexec: object = None, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=preexec,  # type: ignore[arg-type]
        **popen,  # type: ignore[arg-type]
    )


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode, out + err


def lines_all_parse(run: Path) -> list[dict]:
    raw = (run / "turns.jsonl").read_bytes()
    assert not raw or raw.endswith(b"\n"), "a torn last line was left"
    return [json.loads(line) for line in raw.decode().splitlines()]


def limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))


def test_full_disk_is_one_clear_error_and_resume_finishes(
    tmp_path: Path, llama_server_binary: str, fault_counts: Callable[[str], None]
) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "disk"
    with small_tmpfs(results, "3m") as mounted:
        proc = orchestrate(
            "matrix", str(matrix), "--results", str(results), preexec=None if mounted else limit_file_size
        )
        filler = None
        try:
            if mounted:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline and proc.poll() is None:
                    turns = list(results.glob("*/turns.jsonl"))
                    if turns and turns[0].stat().st_size > 0:
                        filler = fill(results)
                        break
                    time.sleep(0.05)
                assert filler is not None, "the run wrote no turn (or ended) before the disk could be filled"
            code, output = finish(proc, 300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        assert code != 0, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, output[-3000:]
        assert "no space left" in errors[0], errors[0]
        (run,) = [p for p in results.iterdir() if p.is_dir()]
        assert str(run) in errors[0], errors[0]  # the file (turns.jsonl, a cell file, the report) is named
        assert f"--resume {run}" in output
        # The server is down: no recorded PID of this run is left.
        assert not [p for p in (cache_root() / "pids").glob("*.json") if run.name in p.read_text()], "server left"
        # What was written is intact: every line parses, the store reads it, no temporary file is left.
        before = lines_all_parse(run)
        assert RunStore(run).read_turns() == before
        assert not list(run.rglob("*.tmp"))
        json.loads((run / "manifest.json").read_text())
        for cell in (run / "cells").glob("*.json"):
            json.loads(cell.read_text())
        if mounted:
            assert before, "the first turn was written before the disk filled"
            filler.unlink()  # type: ignore[union-attr]
        resumed = orchestrate("matrix", "--resume", str(run))
        code, output = finish(resumed, 600)
        assert code == 0, output[-3000:]
        after = lines_all_parse(run)
        report = sorted(p.name for p in (run / "report").iterdir())
        cells = [json.loads(p.read_text()) for p in (run / "cells").glob("*.json")]
    keys = [(r["cell_id"], r["seed"], r.get("seed_attempt", 0), r["turn"], r["attempt"]) for r in after]
    assert len(keys) == len(set(keys)), "a record was written twice"
    ended = sorted(r["seed"] for r in after if r.get("end"))
    assert ended == [f"ops-{i:02d}" for i in range(SEEDS)], ended
    # Seeds that had ended before the disk filled kept their records unchanged.
    done = {r["seed"] for r in before if r.get("end")}
    assert [r for r in after if r["seed"] in done] == [r for r in before if r["seed"] in done]
    assert [c["status"] for c in cells] == ["complete"]
    assert {"cells_long.csv", "cells_long.parquet", "cells_wide.md"} <= set(report), report
    fault_counts(
        f"{'tmpfs full' if mounted else 'file size limit'}: {len(before)} record(s) intact at the error "
        f"({errors[0][:90]}...); after the resume {len(after)} records, {len(ended)} seeds ended"
    )
