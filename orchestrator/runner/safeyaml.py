"""The bounded YAML loader, kept under its old name: it lives in `serving/yamlfiles.py` so that the stack
registry (serving/) reads stack files with the same bounds as matrix and suite files."""

from orchestrator.serving.yamlfiles import (
    MAX_ALIASES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_EXPANDED,
    MAX_INT_CHARS,
    MAX_NODES,
    YamlInputError,
    expanded_size,
    load_yaml,
    read_text_bounded,
)

__all__ = [
    "MAX_ALIASES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_EXPANDED",
    "MAX_INT_CHARS",
    "MAX_NODES",
    "YamlInputError",
    "expanded_size",
    "load_yaml",
    "read_text_bounded",
]
