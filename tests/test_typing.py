"""The type checker's bargain (pyproject's [tool.mypy]): the folders it checks may silence it only line by line,
naming the error code (mypy's `ignore-without-code` enforces that) and saying why (this test does)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<rest>.*)$")
# `# type: ignore[code, ...]` and then a comment of its own: the reason.
WITH_REASON = re.compile(r"^\[[a-z-]+(?:,\s*[a-z-]+)*\]\s+#\s*\S.{4,}$")


def checked_folders() -> list[Path]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    return [REPO / folder for folder in config["files"]]


def test_the_checker_covers_core_and_serving_at_least() -> None:
    folders = {path.relative_to(REPO).as_posix() for path in checked_folders()}
    assert {"orchestrator/core", "orchestrator/serving"} <= folders
    assert all(path.is_dir() for path in checked_folders())


def test_every_ignore_in_the_checked_folders_names_its_code_and_says_why() -> None:
    bare = []
    for folder in checked_folders():
        for path in sorted(folder.rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                found = IGNORE.search(line)
                if found and not WITH_REASON.match(found["rest"].strip()):
                    bare.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not bare, "a `# type: ignore[code]` without a `# reason` after it:\n" + "\n".join(bare)
