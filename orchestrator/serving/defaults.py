"""The server's own sampler defaults, recorded beside the sampler every request sends.

llama.cpp reports its defaults itself (capability probe `/props#default_generation_settings`); vLLM and SGLang
would fill unset request fields from the model directory's generation_config.json, which is read here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from orchestrator.serving.serverconfig import ModelRef

GENERATION_CONFIG = "generation_config.json"


def model_generation_config(model: ModelRef) -> dict[str, Any]:
    """What the model directory's generation_config.json says, for the record; never raises.

    Returns {"path", "present", "content", "sha256"} and "note" or "error" where there is something to say:
    present is None when there is no local directory to look in (a GGUF file, a hub id, an Ollama tag)."""
    if not model.local or not model.path:
        return {"path": None, "present": None, "content": None, "note": "no local model directory (hub id or tag)"}
    directory = Path(model.path)
    if not directory.is_dir():
        return {"path": None, "present": None, "content": None, "note": "the model is a file, not a directory"}
    path = directory / GENERATION_CONFIG
    record: dict[str, Any] = {"path": str(path), "present": path.is_file(), "content": None}
    if not record["present"]:
        return record
    try:
        raw = path.read_bytes()
        record["sha256"] = hashlib.sha256(raw).hexdigest()
        record["content"] = json.loads(raw)
    except (OSError, ValueError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    return record
