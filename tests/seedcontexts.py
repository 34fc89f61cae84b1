"""Build a SeedContext from flat keyword arguments, as the tests write them: each field goes to the part of
the context that declares it (runner/turn/agent.py), so a test names a field without knowing which part holds it."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.runner.turn.agent import ProductSetup, RequestPolicy, SeedContext, SeedTask, ServedBy

PARTS: dict[str, type] = {"task": SeedTask, "server": ServedBy, "policy": RequestPolicy, "product": ProductSetup}


def seed_context(**values: Any) -> SeedContext:
    """Unknown names fail here (TypeError), as they would on the flat constructor."""
    parts: dict[str, dict[str, Any]] = {name: {} for name in PARTS}
    owner = {f.name: name for name, part in PARTS.items() for f in dataclasses.fields(part)}
    top: dict[str, Any] = {}
    for key, value in values.items():
        if key in owner:
            parts[owner[key]][key] = value
        else:
            top[key] = value
    return SeedContext(**top, **{name: PARTS[name](**fields) for name, fields in parts.items()})
