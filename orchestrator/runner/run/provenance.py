"""What a run was made with, so a resume can tell when it would mix two different things.

At start a run records a fingerprint (git commit and dirty flag; the sha256 of every stack definition, task
suite and prompt template) and keeps a snapshot of the stack definitions it used (`stacks/` in the run
directory), so `--reclassify` applies the run's own refusal and parser-failure signatures, not today's.
A resume whose fingerprint differs refuses with the list of differences unless drift is allowed, and then
the drift is recorded in the manifest.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from orchestrator.core.redact import known_secrets, scrub
from orchestrator.runner.config.resolve import RunAssets, seeds_dir
from orchestrator.runner.store.runstore import RunStore, StoreError
from orchestrator.serving.registry import REPO_ROOT, InvalidStackError, UnknownStackError, stacks_dir
from orchestrator.serving.stackspec import StackSpec
from orchestrator.serving.yamlfiles import YamlInputError, load_yaml

PACKAGES = ("toolcall-matrix", "pydantic", "httpx", "numpy", "pandas", "docker", "jsonschema", "typer", "jinja2")


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    # Run outputs are not code: a run's own directory (and other runs beside it) under results/ leaves the tree
    # clean; any other change, tracked or not, makes it dirty.
    status = git("status", "--porcelain", "--", ".", ":(exclude)results")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def host_facts() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions

TEMPLATES_DIR = REPO_ROOT / "orchestrator" / "templates"
SNAPSHOT_DIR = "stacks"


def _digests(directory: Path, pattern: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob(pattern))}


def fingerprint(git: dict[str, Any]) -> dict[str, Any]:
    return {
        "git_commit": git.get("commit"),
        "stacks": _digests(stacks_dir(), "*.yaml"),
        "seeds": _digests(seeds_dir(), "*.yaml"),
        "templates": _digests(TEMPLATES_DIR, "*.j2"),
    }


def drift(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """Human-readable differences between a run's recorded fingerprint and today's."""
    if not recorded:
        return ["the run recorded no fingerprint (made before provenance was kept)"]
    differences = []
    if recorded.get("git_commit") != current.get("git_commit"):
        differences.append(f"git commit {recorded.get('git_commit')} -> {current.get('git_commit')}")
    for kind in ("stacks", "seeds", "templates"):
        before, now = recorded.get(kind) or {}, current.get(kind) or {}
        for name in sorted(set(before) | set(now)):
            if name not in now:
                differences.append(f"{kind}/{name} removed")
            elif name not in before:
                differences.append(f"{kind}/{name} added")
            elif before[name] != now[name]:
                differences.append(f"{kind}/{name} changed")
    return differences


def snapshot_stacks(run_dir: Path) -> None:
    target = run_dir / SNAPSHOT_DIR
    target.mkdir(exist_ok=True)
    for path in sorted(stacks_dir().glob("*.yaml")):
        shutil.copy2(path, target / path.name)
        text = path.read_text()
        clean = scrub(text, known_secrets(env=stack_env(path)))  # a token written into a stack's env: redacted
        if clean != text:
            (target / path.name).write_text(clean)


def stack_env(path: Path) -> dict[str, str]:
    """Every environment a stack definition gives its server (launch.env, local_model_env, prompt_cache.env)."""
    try:
        data = load_yaml(path)[2] or {}
    except YamlInputError:
        return {}
    if not isinstance(data, dict):
        return {}
    launch, cache = data.get("launch") or {}, data.get("prompt_cache") or {}
    env: dict[str, str] = {}
    for part in (launch.get("env"), launch.get("local_model_env"), cache.get("env")):
        if isinstance(part, dict):
            env.update({str(k): str(v) for k, v in part.items()})
    return env


def run_stacks(store: RunStore) -> Callable[[str], StackSpec]:
    """name -> the run's own stack definition, resolved once per name from its snapshot (runner/config/resolve.py: a
    stack the run kept no snapshot of is today's file only when its sha256 is the one the run recorded). The
    manifest is the store's (read once by a RunDir; a damaged one's stand-in in recover mode)."""
    manifest = store.manifest() if store.manifest_path.is_file() else {}
    assets = RunAssets.from_run(store.dir, manifest.get("provenance"))

    def lookup(name: str) -> StackSpec:
        try:
            return assets.stack(name)
        except InvalidStackError as exc:  # e.g. a snapshot from an older stack schema
            path, _, problem = str(exc).partition(": ")  # the message starts with the snapshot file's path
            message = f"{path}: the run's stack snapshot cannot be read by this orchestrator: {problem}"
            raise StoreError(message) from exc
        except UnknownStackError as exc:  # a record naming a stack the run never had (or a path: never read)
            raise StoreError(f"{store.dir}: a recorded turn or cell: {exc}") from None

    return lookup
