"""Read trajectories written by other harnesses, and the tools they offered (for `orchestrate audit`).

Inputs: a LOCA-bench run directory (`tasks/<task>/state<N>/trajectory.json`, one seed per state), a `.json`
file (a message list, or an object with `messages` and optionally `tools`: one seed) or a `.jsonl` file
(one message per line: one seed; or one trajectory per line: one seed per line). Every offered tool is checked
up front (a function name; `parameters`, when present, a valid JSON Schema whose patterns RE2 runs:
core/toolschemas.py): the classifier would otherwise
skip a malformed tool, or fail its schema, and count every call to it as hallucinated. Bad input raises
`InputError` naming the file (and line, or tool index) and what is wrong. Pure apart from reading the files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.jsonl import InputError, text_lines
from orchestrator.core.toolschemas import schema_problem

LOCA_GLOB = "*/state*/trajectory.json"  # under `tasks/`: one state = one seed (LOCA-bench README, Output Structure)
TRAJECTORY_FORM = "trajectory"
MESSAGE_FORM = "message"


@dataclass(frozen=True)
class Trajectory:
    """One seed as read from disk. `tools` is None when the file itself lists none."""

    seed: str
    source: str  # file, or file:line for JSONL
    messages: list[dict[str, Any]]
    tools: list[Any] | None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _parse_json(text: str, where: str) -> Any:
    """JSON or one InputError; a text that stops before its value ends is reported as truncated."""
    if not text.strip():
        raise InputError(f"{where}: empty (no JSON)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Cut mid-value, or mid-string (strict JSON strings hold no raw newline: only the end stops one early).
        ends_early = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "truncated JSON (the text ends early)" if ends_early else "bad JSON"
        raise InputError(f"{where}: {kind}: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where}: bad JSON: {exc}") from exc


# ---------------------------------------------------------------- tools


def _check_tool(tool: Any, where: str) -> None:
    """One OpenAI tool object (`{"type": "function", "function": {...}}`, or the function object itself)."""
    function = tool.get("function", tool) if isinstance(tool, Mapping) else None
    if not isinstance(function, Mapping):
        got = type(function if isinstance(tool, Mapping) else tool).__name__
        raise InputError(f"{where}: not a tool object with a function (got {got})")
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        got = repr(name) if isinstance(name, str) else type(name).__name__
        raise InputError(f"{where}: the function name is not a non-empty string (got {got})")
    if "parameters" in function:
        problem = schema_problem(function["parameters"])
        if problem is not None:
            raise InputError(f"{where} ({name!r}): 'parameters' {problem}")


def check_tools(tools: Any, where: str, field: str = "'tools'") -> list[Any]:
    """A list of valid OpenAI tool objects, or an InputError naming `where` and the tool's index: the
    classifier would silently skip a malformed entry, or fail a malformed schema, and count every call to
    that tool as hallucinated."""
    if not isinstance(tools, list):
        raise InputError(f"{where}: {field} is not a list (got {type(tools).__name__})")
    for index, tool in enumerate(tools):
        _check_tool(tool, f"{where}: tools[{index}]")
    return tools


def load_tools_file(path: Path) -> list[Any]:
    """`--tools FILE`: a JSON list of OpenAI tool objects, or an object `{"tools": [...]}`."""
    data = _parse_json(_read_text(path), str(path))
    if isinstance(data, Mapping):
        if "tools" not in data:
            raise InputError(f"{path}: expected a JSON list of tools or an object with a 'tools' list")
        data = data["tools"]
    tools = check_tools(data, str(path), "the tools")
    if not tools:
        raise InputError(f"{path}: lists no tools")
    return tools


# ---------------------------------------------------------------- trajectories


def _check_message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise InputError(f"{where}: not a message object (got {type(message).__name__})")
    if not isinstance(message.get("role"), str):
        raise InputError(f"{where}: message has no 'role'")
    return message


def _trajectory(data: Any, seed: str, where: str) -> Trajectory:
    """A message list, or an object with `messages` (and optionally `tools`), as one seed."""
    if isinstance(data, list):
        messages, tools = data, None
    elif isinstance(data, dict):
        if "messages" not in data:
            # LOCA-bench writes {"error": ..., "total_steps": N} in place of a run that crashed.
            crashed = f" (it records a crashed run: error={data['error']!r})" if "error" in data else ""
            raise InputError(f"{where}: no 'messages' list{crashed}")
        messages, tools = data["messages"], data.get("tools")
        if not isinstance(messages, list):
            raise InputError(f"{where}: 'messages' is not a list (got {type(messages).__name__})")
        if tools is not None:
            tools = check_tools(tools, where)
    else:
        raise InputError(f"{where}: expected a message list or an object with 'messages' (got {type(data).__name__})")
    checked = [_check_message(m, f"{where}: messages[{i}]") for i, m in enumerate(messages)]
    return Trajectory(seed=seed, source=where, messages=checked, tools=tools or None)


def _loca_files(root: Path) -> list[Path]:
    """`root/tasks/*/state*/trajectory.json`, or the same under `root` when it is the `tasks` folder itself."""
    tasks = root / "tasks" if (root / "tasks").is_dir() else root
    return sorted(p for p in tasks.glob(LOCA_GLOB) if p.is_file())


def _load_loca(root: Path) -> list[Trajectory]:
    files = _loca_files(root)
    if not files:
        raise InputError(f"{root}: no trajectory files (expected tasks/<task>/state<N>/trajectory.json)")
    loaded = []
    for path in files:
        seed = f"{path.parent.parent.name}/{path.parent.name}"  # <task>/<state>
        loaded.append(_trajectory(_parse_json(_read_text(path), str(path)), seed, str(path)))
    return loaded


def _line_form(data: Any) -> str | None:
    """Which JSONL form a line is: one message, one trajectory, or neither."""
    if isinstance(data, list) or (isinstance(data, dict) and "messages" in data):
        return TRAJECTORY_FORM
    if isinstance(data, dict) and "role" in data:
        return MESSAGE_FORM
    return None


def _load_jsonl(path: Path) -> list[Trajectory]:
    """The first non-empty line decides the form; a line of the other form is an error, never a guess."""
    lines = list(text_lines(_read_text(path)))
    if not lines:
        raise InputError(f"{path}: empty (no JSON lines)")
    form: str | None = None
    first = lines[0][0]
    trajectories: list[Trajectory] = []
    messages: list[dict[str, Any]] = []
    for number, line in lines:
        where = f"{path}:{number}"
        data = _parse_json(line, where)
        this = _line_form(data)
        if this is None:
            raise InputError(f"{where}: neither a message (an object with 'role') nor a trajectory")
        form = form or this
        if this != form:
            raise InputError(f"{where}: mixes forms: line {first} holds one {form}, this line holds a {this}")
        if form == MESSAGE_FORM:
            messages.append(_check_message(data, where))
        else:
            trajectories.append(_trajectory(data, f"{path.name}:{number}", where))
    if form == MESSAGE_FORM:
        return [Trajectory(seed=path.name, source=str(path), messages=messages, tools=None)]
    return trajectories


def load_trajectories(path: Path) -> list[Trajectory]:
    """Every seed under PATH: a LOCA-bench run directory, a `.jsonl` file, or a `.json` file."""
    if path.is_dir():
        return _load_loca(path)
    if path.suffix.lower() == ".jsonl":
        return _load_jsonl(path)
    return [_trajectory(_parse_json(_read_text(path), str(path)), path.name, str(path))]
