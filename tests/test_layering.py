"""The package's import direction runs one way: core <- serving <- runner <- analysis <- cli.

Every import is checked, including those inside functions: a lazy import that points upwards is still a
dependency the wrong way round. The pure core also never imports Docker or HTTP clients.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"
RANK = {"core": 0, "serving": 1, "runner": 2, "analysis": 3, "cli": 4, "__main__": 5}
CORE_FORBIDDEN = ("docker", "httpx", "subprocess", "socket", "typer", "rich")


def layer_of(module: str) -> str | None:
    """'orchestrator.runner.sweep.sweep' -> 'runner'; None for the package root itself."""
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return None
    return parts[1]


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module.split(".")[0] == "orchestrator":  # `from orchestrator.runner import sweep`: a module too
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def own_layer(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def test_every_module_lives_in_a_layer() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert loose == [], f"modules outside a layer folder: {loose}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: Path) -> None:
    mine = own_layer(path)
    if mine == "__init__":
        return
    wrong = []
    for line, module in imports_of(path):
        target = layer_of(module)
        if target is None or target not in RANK:
            continue
        if RANK[target] > RANK[mine]:
            wrong.append(f"{path.name}:{line} ({mine}) imports {module} ({target})")
    assert wrong == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("*.py")), ids=lambda p: p.name)
def test_core_does_no_io_imports(path: Path) -> None:
    bad = [f"{path.name}:{line} {m}" for line, m in imports_of(path) if m.split(".")[0] in CORE_FORBIDDEN]
    assert bad == []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_relative_imports(path: Path) -> None:
    """Relative imports would slip past the layer check above: every import names its layer."""
    tree = ast.parse(path.read_text(), filename=str(path))
    relative = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert relative == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker itself can fail: a lazy upward import inside a function is found."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from orchestrator.runner.sweep.sweep import Sweep\n    return Sweep\n")
    found = imports_of(sample)
    assert (2, "orchestrator.runner.sweep.sweep") in found
    assert RANK[layer_of("orchestrator.runner.sweep.sweep") or ""] > RANK["core"]


# Inside a layer, its subpackages point down too: each imports only those listed before it (or itself).
SUBPACKAGE_RANK = {
    "runner": ["store", "suites", "turn", "config", "run", "product", "sweep", "executors"],
    "analysis": ["compare", "audit", "product", "report", "triage"],
}


def subpackage_of(module: str) -> tuple[str, str] | None:
    """'orchestrator.runner.sweep.session' -> ('runner', 'sweep'); None outside a ranked subpackage."""
    parts = module.split(".")
    if len(parts) < 3 or parts[0] != "orchestrator" or parts[1] not in SUBPACKAGE_RANK:
        return None
    return (parts[1], parts[2]) if parts[2] in SUBPACKAGE_RANK[parts[1]] else None


def test_ranked_layers_hold_only_subpackages() -> None:
    """A module dropped loose into runner/ or analysis/ (or a subpackage nobody ranked) fails here."""
    loose = []
    for layer, ranked in SUBPACKAGE_RANK.items():
        for path in (PACKAGE / layer).iterdir():
            if path.name in ("__init__.py", "__pycache__", "templates"):
                continue
            if not (path.is_dir() and path.name in ranked):
                loose.append(f"{layer}/{path.name}")
    assert loose == []


@pytest.mark.parametrize(
    "path", [p for layer in SUBPACKAGE_RANK for p in sorted((PACKAGE / layer).rglob("*.py"))],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_imports_point_down_the_subpackages(path: Path) -> None:
    relative = path.relative_to(PACKAGE)
    if relative.parent.name == relative.parts[0]:  # the layer's own __init__.py: no subpackage of its own
        return
    assert subpackage_violations(path, "orchestrator." + ".".join(relative.with_suffix("").parts)) == []


def subpackage_violations(path: Path, module_name: str) -> list[str]:
    """The imports of `path` (the module `module_name`) that point up its layer's subpackage order."""
    mine = subpackage_of(module_name)
    assert mine is not None, f"{module_name}: not in a ranked subpackage"
    layer, sub = mine
    order = SUBPACKAGE_RANK[layer]
    wrong = []
    for line, module in imports_of(path):
        target = subpackage_of(module)
        if target and target[0] == layer and order.index(target[1]) > order.index(sub):
            wrong.append(f"{path.name}:{line} ({layer}/{sub}) imports {module} ({layer}/{target[1]})")
    return wrong


def test_no_module_name_repeats_across_layers() -> None:
    """`classify`, `diff`, `audit`... each name one module, and no module bears another package's name: a reader
    never guesses which of two is meant. (A concern's package may stand in two layers, as `product/` does in runner
    and analysis: the path says which.)"""
    seen: dict[str, list[str]] = {}
    for path in modules():
        if path.stem in ("__init__", "__main__"):
            continue
        seen.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    repeated = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert repeated == {}
    packages = {path.parent.name for path in PACKAGE.rglob("__init__.py")}
    bearing = [path for paths in seen.values() for path in paths if Path(path).stem in packages]
    assert [path for path in bearing if Path(path).stem != Path(path).parent.name] == []  # sweep/sweep.py is fine


@pytest.mark.parametrize(
    "source",
    [
        "from orchestrator.runner.sweep.sweep import Sweep\n",
        "from orchestrator.runner.sweep import sweep\n",  # the module named through its package
        "def later():\n    import orchestrator.runner.executors.dispatch\n",  # lazy, inside a function
    ],
)
def test_the_subpackage_checker_sees_an_upward_import(tmp_path: Path, source: str) -> None:
    """A store module importing the sweep is what the subpackage check exists to catch, in every spelling."""
    sample = tmp_path / "sample.py"
    sample.write_text(source)
    assert subpackage_violations(sample, "orchestrator.runner.store.sample") != []
    sample.write_text(source.replace("runner.sweep", "runner.store").replace("runner.executors", "runner.store"))
    assert subpackage_violations(sample, "orchestrator.runner.store.sample") == []


def test_the_readme_layout_lists_the_subpackages_in_their_order() -> None:
    """The README's layout and the order enforced above are one fact: a reorder or a new subpackage shows up in
    both or this fails."""
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    for layer, order in SUBPACKAGE_RANK.items():
        bullet = layout.split(f"- `{layer}/`", 1)[1].split("\n- ", 1)[0]
        named = [name for name in re.findall(r"`([a-z]+)/`", bullet) if name != "templates"]
        assert named == order, f"README layout, {layer}/: {named} (the test's order: {order})"
