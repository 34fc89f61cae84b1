"""A run resolves each stack and suite it uses once (runner/config/resolve.py); nothing else below the CLI turns a
stack or suite *name* into its definition.

The AST check is by what code does, not by today's function names: outside the resolving modules it flags
- a reference to any name-lookup primitive (the registry's and the suites' file readers, the directories they
  read: `load_stack`, `load_suite`, `stacks_dir`, `seeds_dir`, ...),
- a path built from a `"stacks"` or `"seeds"` literal (`REPO_ROOT / "seeds"`), or from a name and `.yaml`
  (`directory / f"{name}.yaml"`): a new lookup function is caught by its shape, whatever it is called,
- a YAML parse that bypasses the one bounded loader (`yaml.safe_load`, `yaml.load`, ...).
"""

from __future__ import annotations

import ast
import hashlib
import shutil
from pathlib import Path

import pytest

import orchestrator
from orchestrator.runner.config.matrixfile import load_matrix
from orchestrator.runner.config.resolve import RunAssets
from orchestrator.runner.run.runs import recorded_matrix, start_run_in
from orchestrator.runner.suites.tasks import SuiteError
from orchestrator.serving.registry import REPO_ROOT

PACKAGE = Path(orchestrator.__file__).resolve().parent
# Where a name may become a definition: the resolver, the two primitives it calls, and the CLI.
RESOLVING = {"runner/config/resolve.py", "serving/registry.py", "serving/yamlfiles.py"}
PRIMITIVES = {
    "load_stack",
    "load_suite",
    "read_stack_file",
    "stack_names",
    "stacks_dir",
    "seeds_dir",
    "checkout_seeds_dir",
    "from_checkout",
    "_listed_tools",
}
DEFINITION_DIRS = {"stacks", "seeds"}
RAW_YAML = {"safe_load", "load", "full_load", "unsafe_load", "safe_load_all", "load_all"}
# Functions that read today's checkout as a whole, by design, with the reason (no name is looked up):
CHECKOUT_WIDE = {
    ("runner/run/provenance.py", "fingerprint"): "the sha256 of every file of today's checkout, recorded at a run's "
    "start",
    ("runner/run/provenance.py", "snapshot_stacks"): "copies today's stacks into a new run (its snapshot)",
    ("runner/config/matrixfile.py", "load_matrix"): "a matrix file of the checkout: a new run's entry point",
    ("serving/compose.py", "launchable_stacks"): "the `compose` command renders compose/ from every stack (no run)",
    ("serving/compose.py", "write_all"): "writes compose/<stack>.yaml for every stack (no run)",
    # Not the checkout: an MCP server named by its suite lists its tools here, the one place (called by
    # resolve.listed_suites when a run starts; tests replace `_listed_tools`).
    ("runner/suites/tasks.py", "with_listed_tools"): "lists the tools of the MCP server a suite names",
}
# Names -> objects for the callers that hold only names (the CLI's `probe` command and tests); the runner passes
# the resolved definition (`spec=`). The list may only shrink: an entry that no longer looks anything up fails the
# test until it is removed from here.
NOT_YET: set[tuple[str, str]] = set()  # none left: serving/build.server_config takes the resolved stack


def _is_yaml_name_path(node: ast.BinOp) -> bool:
    """`anything / f"{...}.yaml"`: a file chosen by a name."""
    right = node.right
    return (
        isinstance(right, ast.JoinedStr)
        and any(isinstance(part, ast.FormattedValue) for part in right.values)
        and isinstance(right.values[-1], ast.Constant)
        and str(right.values[-1].value).endswith(".yaml")
    )


def _imported_primitives(tree: ast.Module) -> set[str]:
    """The local names a module binds to a primitive (`from orchestrator... import load_stack as x`: x)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orchestrator")
        for alias in node.names
        if alias.name in PRIMITIVES
    }


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _offences(function: ast.AST, imported: set[str]) -> list[str]:
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in imported:
            found.append(f"line {node.lineno}: uses {node.id}")  # a call, or passed on as a value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PRIMITIVES:
            found.append(f"line {node.lineno}: calls {node.func.id}")  # however it came into scope
        if isinstance(node, ast.Attribute) and node.attr in PRIMITIVES:
            found.append(f"line {node.lineno}: uses {node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in RAW_YAML and _is_name(node.value, "yaml"):
            found.append(f"line {node.lineno}: parses YAML outside the bounded loader (yaml.{node.attr})")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            sides = (node.left, node.right)
            if any(isinstance(side, ast.Constant) and side.value in DEFINITION_DIRS for side in sides):
                found.append(f"line {node.lineno}: builds a path into stacks/ or seeds/")
            elif _is_yaml_name_path(node):
                found.append(f"line {node.lineno}: builds a definition's path from a name")
    return found


def _functions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Every function (methods and nested ones by their own name), and the module's top level as `<module>`."""
    top = ast.Module(body=[s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.ClassDef))], type_ignores=[])
    found: list[tuple[str, ast.AST]] = [("<module>", top)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = ast.Module(
                body=[s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))],
                type_ignores=[],
            )
            found.append((node.name, inner))
    return found


def name_lookups(package: Path) -> dict[tuple[str, str], list[str]]:
    """(module, function) -> what it does that resolves a name, for every module outside the resolving ones."""
    lookups: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module in RESOLVING or module.startswith("cli/"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported = _imported_primitives(tree)
        for name, function in _functions(tree):
            offences = _offences(function, imported)
            if offences:
                lookups[(module, name)] = offences
    return lookups


def test_no_function_below_the_cli_looks_a_stack_or_suite_up_by_name() -> None:
    lookups = name_lookups(PACKAGE)
    unexpected = {key: found for key, found in lookups.items() if key not in CHECKOUT_WIDE and key not in NOT_YET}
    assert not unexpected, "resolve it in runner/config/resolve.py and carry the object instead:\n" + "\n".join(
        f"{module}:{function}: {'; '.join(found)}" for (module, function), found in sorted(unexpected.items())
    )
    assert not (NOT_YET - set(lookups)), f"no longer looks anything up: drop from NOT_YET: {NOT_YET - set(lookups)}"
    stale = set(CHECKOUT_WIDE) - set(lookups)
    assert not stale, f"no longer reads the checkout: drop from CHECKOUT_WIDE: {sorted(stale)}"


@pytest.mark.parametrize(
    "source",
    [
        "def lookup(name):\n    return load_stack(name)\n",
        "def lookup(name):\n    return Suite.model_validate(read(REPO_ROOT / 'seeds' / name))\n",
        "def find(kind, name, base):\n    return parse(base / f'{name}.yaml')\n",
        "def read(path):\n    return yaml.safe_load(path.read_text())\n",
        "class Thing:\n    def spec(self):\n        return registry.stacks_dir()\n",
        "from orchestrator.serving.registry import load_stack\n\nLOOKUP = {'default': load_stack}\n",
    ],
)
def test_the_check_catches_a_new_lookup_by_its_shape(tmp_path: Path, source: str) -> None:
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "newthing.py").write_text(source)
    (tmp_path / "runner" / "config").mkdir()
    (tmp_path / "runner" / "config" / "resolve.py").write_text(source)  # the resolving module may
    assert list(name_lookups(tmp_path)) and all(module == "runner/newthing.py" for module, _ in name_lookups(tmp_path))


# ---- once per run ------------------------------------------------------------------------------------------

SMOKE = REPO_ROOT / "matrices" / "cpu.yaml"


@pytest.mark.slow  # start_run asks git for the checkout's state (provenance)
def test_an_edit_to_a_suite_after_resolution_changes_nothing_the_run_records(tmp_path: Path) -> None:
    """A run resolves its suites at the start; editing seeds/ mid-run changes neither what later cells record nor
    the run's snapshot. (The checkout's suite is edited in a copy of the seeds directory, not in place.)"""
    from orchestrator.runner.config.cellconfig import cell_config
    from orchestrator.runner.config.matrix import expand

    seeds = tmp_path / "seeds"
    shutil.copytree(REPO_ROOT / "seeds", seeds)
    assets = RunAssets(REPO_ROOT / "stacks", seeds)
    matrix, digest = load_matrix(SMOKE, assets)
    (suite_name,) = {task.suite for task in matrix.tasks}
    store = start_run_in(tmp_path / "run", matrix, SMOKE, digest)
    cells = [cell for plan in expand(matrix) for cell in plan.cells]
    before = cell_config(matrix, cells[0], None, None, None, resolved=matrix.suites())
    original = (seeds / f"{suite_name}.yaml").read_bytes()
    edited = original.replace(b"Get the status of a Kubernetes pod by name.", b"EDITED mid-run.", 1)
    (seeds / f"{suite_name}.yaml").write_bytes(edited)
    assert RunAssets(REPO_ROOT / "stacks", seeds).suite(suite_name).tools != matrix.suites()[suite_name].tools
    assert (seeds / f"{suite_name}.yaml").read_bytes() != original
    later = cell_config(matrix, cells[-1], None, None, None, resolved=matrix.suites())
    assert later["tools_sha256"] == before["tools_sha256"] and later["tools"] == before["tools"]
    assert matrix.assets.suite(suite_name) is matrix.tasks[0].resolved_suite  # the same object, read once
    assert (store.dir / "seeds" / f"{suite_name}.yaml").read_bytes() == original  # the snapshot: as resolved
    recorded = store.manifest()["suites_snapshot"][f"{suite_name}.yaml"]
    assert recorded == hashlib.sha256(original).hexdigest()
    # A resume resolves from the run's own snapshot, not the edited checkout.
    again = recorded_matrix(store.dir, store.manifest())
    assert again.tasks[0].resolved_suite == matrix.tasks[0].resolved_suite


def test_a_recorded_run_reads_its_snapshot_never_today(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "seeds").mkdir(parents=True)
    text = (REPO_ROOT / "seeds" / "ops.yaml").read_text()
    (run / "seeds" / "ops.yaml").write_text(text.replace("version: 2", "version: 99", 1))
    assert RunAssets.from_run(run, {}).suite("ops").version == 99


def test_an_older_run_gets_todays_suite_only_when_it_is_the_recorded_one(tmp_path: Path) -> None:
    today = (REPO_ROOT / "seeds" / "ops.yaml").read_bytes()
    recorded = {"seeds": {"ops.yaml": hashlib.sha256(today).hexdigest()}}
    reader = tmp_path / "reader"
    assert RunAssets.from_run(reader, recorded).suite("ops").suite == "ops"
    assert not (reader / "seeds").exists()  # an analysis command reads it in place: never writes into the run
    same = tmp_path / "same"
    RunAssets.from_run(same, recorded, launch=True).suite("ops")
    assert (same / "seeds" / "ops.yaml").read_bytes() == today  # a resume copies it into the run's snapshot
    drifted = tmp_path / "drifted"
    assert RunAssets.from_run(drifted, {"seeds": {"ops.yaml": "0" * 64}}, allow_drift=True, launch=True).suite("ops")
    assert not (drifted / "seeds").exists()  # a drifted file is read in place: the snapshot never hides drift
    other = tmp_path / "other"
    with pytest.raises(SuiteError, match=r"ops.*not the file it recorded"):
        RunAssets.from_run(other, {"seeds": {"ops.yaml": "0" * 64}}).suite("ops")
    assert not (other / "seeds").exists()
    with pytest.raises(SuiteError, match="not the file it recorded"):
        RunAssets.from_run(other, {}).suite("ops")  # nothing recorded: nothing to match


def test_validation_never_starts_an_mcp_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.runner.suites import mcpclient

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("validation started an MCP server")

    monkeypatch.setattr(mcpclient, "list_server_tools", refuse)
    monkeypatch.setattr(mcpclient.McpToolServer, "start", refuse)
    from orchestrator.runner.suites import tasks

    tasks._listed_tools.cache_clear()
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / "product-cpu.yaml")
    (suite,) = matrix.suites().values()
    assert suite.mcp is not None and suite.tools == []  # listed when a run starts (Sweep), not here


def test_a_launch_never_starts_from_a_redacted_stack_snapshot(tmp_path: Path) -> None:
    """A resume or an ablation starts servers: a snapshot whose secret was redacted is replaced by today's file
    only when that is byte for byte the file the run recorded; the analysis reads the snapshot as it is."""
    from orchestrator.core.redact import REDACTED
    from orchestrator.serving.registry import InvalidStackError

    today = (REPO_ROOT / "stacks" / "llamacpp.yaml").read_bytes()
    run = tmp_path / "run"
    (run / "stacks").mkdir(parents=True)
    redacted = today.replace(b"description:", f"# token {REDACTED}\ndescription:".encode(), 1)
    (run / "stacks" / "llamacpp.yaml").write_bytes(redacted)
    recorded = {"stacks": {"llamacpp.yaml": hashlib.sha256(today).hexdigest()}}
    launched = RunAssets.from_run(run, recorded, launch=True).stack("llamacpp")
    assert launched == RunAssets.from_checkout().stack("llamacpp")
    assert RunAssets.from_run(run, recorded).stack("llamacpp") == launched  # same definition, read from the snapshot
    with pytest.raises(InvalidStackError, match="secret redacted"):
        RunAssets.from_run(run, {"stacks": {"llamacpp.yaml": "0" * 64}}, launch=True).stack("llamacpp")


def test_each_definition_is_read_once_per_run_not_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation, expansion and every cell's config read each stack and suite file once: a cell holds the very
    definition its matrix entry was resolved to (never a fresh read, which on a resume would be today's)."""
    from collections import Counter

    from orchestrator.runner.config import resolve
    from orchestrator.runner.config.cellconfig import cell_config
    from orchestrator.runner.config.matrix import expand

    reads: Counter[str] = Counter()
    read = resolve.read_bytes_bounded

    def counted(path: Path) -> bytes:
        reads[path.parent.name] += 1
        return read(path)

    monkeypatch.setattr(resolve, "read_bytes_bounded", counted)
    matrix, _ = load_matrix(REPO_ROOT / "matrices" / "full.yaml")
    cells = [cell for plan in expand(matrix) for cell in plan.cells]
    configs = [cell_config(matrix, cell, None, None, None, resolved=matrix.suites()) for cell in cells]
    stacks = {entry.stack for entry in matrix.stacks} | {name for model in matrix.models for name in model.sources}
    assert len(cells) == len(configs) > len(stacks)
    assert reads == {"stacks": len(stacks), "seeds": len({task.suite for task in matrix.tasks})}
    by_label = {entry.label: entry.spec for entry in matrix.stacks}
    assert all(cell.stack.spec is by_label[cell.stack.label] for cell in cells)


def test_a_definition_is_parsed_once_per_content_and_anew_when_edited(tmp_path: Path) -> None:
    """Two resolutions of the same bytes share the parsed (frozen) object; an edited file is parsed anew, so a
    run never sees another content than the bytes it read."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    text = (REPO_ROOT / "seeds" / "ops.yaml").read_text()
    (seeds / "ops.yaml").write_text(text)
    first = RunAssets(tmp_path / "stacks", seeds).suite("ops")
    assert RunAssets(tmp_path / "stacks", seeds).suite("ops") is first
    (seeds / "ops.yaml").write_text(text.replace("version: 2", "version: 77", 1))
    edited = RunAssets(tmp_path / "stacks", seeds).suite("ops")
    assert edited.version == 77 and first.version != 77


def test_prompt_templates_are_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a seed renders and the template hash its cell records come from one read of orchestrator/templates:
    after the first use, the package's files are never read again (an edit during a run changes nothing)."""
    import jinja2

    from orchestrator.core.types import ToolsMode
    from orchestrator.runner.turn import prompts

    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
    first = prompts.initial_messages(ToolsMode.TEXT_TOOLS, "sys", "do it", tools)
    digest = prompts.template_sha256(ToolsMode.TEXT_TOOLS)

    def no_reading(*_args: object) -> None:
        raise AssertionError("a prompt template was read again")

    monkeypatch.setattr(jinja2.PackageLoader, "get_source", no_reading)
    monkeypatch.setattr(jinja2.FileSystemLoader, "get_source", no_reading)
    assert prompts.initial_messages(ToolsMode.TEXT_TOOLS, "sys", "do it", tools) == first
    assert prompts.template_sha256(ToolsMode.TEXT_TOOLS) == digest
    assert prompts.template_sha256(ToolsMode.CONSTRAINED) != digest  # a hash of each mode's own templates
