"""The pinned `bfcl-eval` package: where it is installed, its data files, and its own code, used unmodified.

The package is installed beside the project's environment, without its dependency set (`install_argv`:
`pip install --no-deps --target .venv/bfcl-eval bfcl-eval==… mpmath==…`, run by scripts/setup.sh), so its ~35
pinned dependencies (torch, vendor SDKs: ~3.3 GB) never touch the project's own. Two parts of its code are used,
neither edited:
- the AST checker (`eval_checker/ast_eval/ast_checker.py`), imported as a module. Its import chain reaches
  `constants/model_config.py`, which imports every vendor SDK; a stand-in module with the one thing the checker
  reads from it (`MODEL_CONFIG_MAPPING[...].underscore_to_dot`) is put in `sys.modules` first. The checker is
  always called with names mapped back to BFCL's own, under a stand-in model whose `underscore_to_dot` is off.
- the FC tool conversion and the Python function-doc hint (`model_handler/utils.py` `convert_to_tool`,
  `_cast_to_openai_type`; `utils.py` `_func_doc_language_specific_pre_processing`): those modules import
  `tenacity`, `filelock` and create result folders on import, so the named functions are compiled from the
  package's own source file with the globals they use, and nothing else of the module is run.
Nothing here ever hands model output to the package's executor or decoder (they `eval` text).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import types
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
MPMATH_VERSION = "1.3.0"  # the one dependency BFCL's checkers import (its multi-turn math backend)
BFCL_DATA_PREFIX = "BFCL_v4_"
# The stand-in model the checker is called under: its name holds no `_` (the checker reads `_` as `/`).
CHECKER_MODEL = "toolcall-matrix"
BFCL_HOME_ENV = "TOOLCALL_MATRIX_BFCL"
CHECKER_MODULE = "bfcl_eval.eval_checker.ast_eval.ast_checker"  # its `ast_checker` judges every AST case
_IMPORT_LOCK = threading.Lock()


class BfclUnavailable(RuntimeError):
    """The pinned bfcl-eval install is missing or is another version: one error with the fix."""


def bfcl_home() -> Path:
    """Where the package is installed: $TOOLCALL_MATRIX_BFCL, else `<environment>/bfcl-eval`."""
    return Path(os.environ.get(BFCL_HOME_ENV) or Path(sys.prefix) / "bfcl-eval")


def install_argv() -> list[str]:
    """The one install command (scripts/setup.sh runs `ensure_installed`): no dependencies, beside the venv."""
    packages = [f"bfcl-eval=={BFCL_VERSION}", f"mpmath=={MPMATH_VERSION}"]
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(bfcl_home()), *packages]


def _fix() -> str:
    return f"install it with: {' '.join(install_argv())} (scripts/setup.sh does)"


def ensure_installed() -> Path:
    """Install the pinned package where `package_dir` looks for it, unless it is there already."""
    try:
        return package_dir()
    except BfclUnavailable:
        subprocess.run(install_argv(), check=True)
        package_dir.cache_clear()
        return package_dir()


@cache
def package_dir() -> Path:
    """The installed `bfcl_eval` package, checked to be the pinned version."""
    home = bfcl_home()
    metadata = home / f"bfcl_eval-{BFCL_VERSION}.dist-info" / "METADATA"
    if not metadata.is_file():
        found = sorted(path.name for path in home.glob("bfcl_eval-*.dist-info")) if home.is_dir() else []
        what = f"found {found}" if found else f"no install at {home}"
        raise BfclUnavailable(f"bfcl-eval {BFCL_VERSION} is needed ({what}): {_fix()}")
    return home / "bfcl_eval"


def data_file(category: str) -> Path:
    return package_dir() / "data" / f"{BFCL_DATA_PREFIX}{category}.json"


def answer_file(category: str) -> Path:
    return package_dir() / "data" / "possible_answer" / f"{BFCL_DATA_PREFIX}{category}.json"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stand_in_model_config() -> types.ModuleType:
    """What `ast_checker` reads from `constants/model_config.py`: one model, names compared as they are."""
    module = types.ModuleType("bfcl_eval.constants.model_config")
    module.__doc__ = "toolcall-matrix stand-in: the checker's only need of BFCL's model registry"
    module.MODEL_CONFIG_MAPPING = {CHECKER_MODEL: types.SimpleNamespace(underscore_to_dot=False)}  # type: ignore[attr-defined]
    return module


@cache
def checker_module() -> types.ModuleType:
    """BFCL's `ast_checker` module, unmodified (see the module docstring for the one stand-in)."""
    home = str(package_dir().parent)
    with _IMPORT_LOCK:
        if home not in sys.path:
            sys.path.append(home)  # last: nothing of the project's own environment is shadowed
        stand_in = sys.modules.setdefault("bfcl_eval.constants.model_config", _stand_in_model_config())
        import importlib

        module = importlib.import_module(CHECKER_MODULE)
    # The checker must be the pinned install's, reading the stand-in (not a bfcl_eval found elsewhere first).
    if CHECKER_MODEL not in getattr(stand_in, "MODEL_CONFIG_MAPPING", {}) or not Path(
        str(module.__file__)
    ).is_relative_to(package_dir()):
        raise BfclUnavailable(f"bfcl_eval was imported from {module.__file__}, not from {package_dir()}: {_fix()}")
    return module


def python_language() -> Any:
    """BFCL's `Language.PYTHON` (the checker compares it by identity)."""
    checker_module()
    from importlib import import_module

    return import_module("bfcl_eval.constants.enums").Language.PYTHON


def source_functions(relative: str, names: tuple[str, ...], namespace: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """The named top-level functions of one of the package's source files, compiled from that file as they are
    written, with `namespace` as their globals (their module's imports are not run)."""
    path = package_dir() / relative
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wanted = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    missing = sorted(set(names) - {node.name for node in wanted})
    if missing:
        raise BfclUnavailable(f"{path}: has no function {missing} (is it bfcl-eval {BFCL_VERSION}?)")
    code = compile(ast.Module(body=list(wanted), type_ignores=[]), str(path), "exec")
    exec(code, namespace)
    return {name: namespace[name] for name in names}


@cache
def _fc_conversion() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """BFCL's Python function-doc pre-processing and its `convert_to_tool` for the OpenAI chat style."""
    checker_module()
    from importlib import import_module

    enums = import_module("bfcl_eval.constants.enums")
    mappings = import_module("bfcl_eval.constants.type_mappings")
    hints = source_functions(
        "utils.py",
        ("is_java", "is_js", "_get_language_specific_hint", "_func_doc_language_specific_pre_processing"),
        {"json": json},
    )
    convert = source_functions(
        "model_handler/utils.py",
        ("_cast_to_openai_type", "convert_to_tool"),
        {
            "copy": copy,
            "json": json,
            "re": re,
            "ModelStyle": enums.ModelStyle,
            "GORILLA_TO_OPENAPI": mappings.GORILLA_TO_OPENAPI,
        },
    )
    style = enums.ModelStyle.OPENAI_COMPLETIONS
    return (
        hints["_func_doc_language_specific_pre_processing"],
        lambda functions: convert["convert_to_tool"](functions, mappings.GORILLA_TO_OPENAPI, style),
    )


def fc_tools(functions: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    """A case's functions as BFCL's chat `tools=` handler sends them: the Python-syntax note added to each
    description, BFCL's type mapping (dict -> object, float -> number, tuple -> array), `.` in names -> `_`."""
    pre_process, convert = _fc_conversion()
    return list(convert(pre_process(copy.deepcopy(functions), category)))
