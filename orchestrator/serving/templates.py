"""Where a served model's chat template comes from, read from its files (no server needed).

- a GGUF file: the metadata key `tokenizer.chat_template` (what llama.cpp renders with unless told otherwise),
  and the BOS/EOS token texts from its vocabulary;
- an HF directory: `chat_template.jinja` (transformers >= 4.43 writes it), else `tokenizer_config.json`
  `chat_template` (a string, or a list of named templates: the one named "default");
- a template flag in the launch argv (the stack file's `template_flags`: vLLM/SGLang `--chat-template`,
  llama.cpp `--chat-template-file` / `--chat-template`) overrides both; when its value is not a readable file
  (a built-in template name, an inline template) the harness cannot know the text and says so.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.core.chattemplate import ChatTemplate

GGUF_TEMPLATE_KEY = "tokenizer.chat_template"


class NoTemplate(ValueError):
    """The model's files hold no chat template the harness can render (named, with where it looked)."""


def template_from_argv(argv: list[str] | None, flags: tuple[str, ...] | list[str]) -> ChatTemplate | None:
    """The template a flag in the argv sets (`FLAG FILE` or `FLAG=FILE`), read; None when no such flag.
    NoTemplate when the flag's value is not a file (a built-in name, an inline template)."""
    argv = argv or []
    for index, arg in enumerate(argv):
        value = None
        if arg in flags and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(tuple(f"{flag}=" for flag in flags)):
            value = arg.split("=", 1)[1]
        if value is None:
            continue
        if not Path(value).is_file():
            raise NoTemplate(f"the server's template is set by {arg.split('=')[0]} {value[:60]!r}, not a readable file")
        return ChatTemplate(text=Path(value).read_text(), source=f"argv:{value}")
    return None


def model_template(
    model_path: str | None, argv: list[str] | None = None, flags: tuple[str, ...] | list[str] = ()
) -> ChatTemplate:
    """The chat template the argv (its template `flags`) or the model's files say; NoTemplate when none."""
    override = template_from_argv(argv, flags)
    if override is not None:
        return override
    if not model_path:
        raise NoTemplate("no local model file or directory to read a chat template from")
    path = Path(model_path)
    if path.is_file():
        return _gguf_template(str(path), path.stat().st_mtime_ns)
    if path.is_dir():
        return _hf_template(path)
    raise NoTemplate(f"{model_path}: no such model file or directory")


@lru_cache(maxsize=8)
def _gguf_template(path: str, _mtime_ns: int) -> ChatTemplate:
    """Read once per file version: opening a GGUF parses its whole vocabulary (~10 s for 150k tokens)."""
    import gguf  # heavy import, only when a GGUF template is needed

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise NoTemplate(f"{path}: not a readable GGUF file: {exc}") from exc
    field = reader.fields.get(GGUF_TEMPLATE_KEY)
    if field is None:
        raise NoTemplate(f"{path}: the GGUF metadata has no {GGUF_TEMPLATE_KEY}")
    return ChatTemplate(
        text=str(field.contents()),
        source=f"gguf:{GGUF_TEMPLATE_KEY}",
        bos_token=_gguf_token(reader, "tokenizer.ggml.bos_token_id"),
        eos_token=_gguf_token(reader, "tokenizer.ggml.eos_token_id"),
        adds_bos=_gguf_flag(reader, "tokenizer.ggml.add_bos_token"),
    )


def _gguf_flag(reader: Any, key: str) -> bool | None:
    field = reader.fields.get(key)
    return None if field is None else bool(field.contents())


def _gguf_token(reader: Any, key: str) -> str:
    field, tokens = reader.fields.get(key), reader.fields.get("tokenizer.ggml.tokens")
    if field is None or tokens is None:
        return ""
    try:
        return str(tokens.contents(int(field.contents())))
    except (IndexError, TypeError, ValueError):
        return ""


def _hf_template(directory: Path) -> ChatTemplate:
    config: dict[str, Any] = {}
    config_path = directory / "tokenizer_config.json"
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except ValueError as exc:
            raise NoTemplate(f"{config_path}: not JSON: {exc}") from exc
    tokens: dict[str, Any] = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
    adds_bos = config.get("add_bos_token")
    tokens["adds_bos"] = adds_bos if isinstance(adds_bos, bool) else _post_processor_adds_bos(directory)
    jinja_path = directory / "chat_template.jinja"
    if jinja_path.is_file():
        return ChatTemplate(text=jinja_path.read_text(), source=str(jinja_path), **tokens)
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: transformers uses "default" unless told otherwise
        template = next(
            (t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None
        )
    if isinstance(template, str):
        return ChatTemplate(text=template, source=f"{config_path}#chat_template", **tokens)
    raise NoTemplate(f"{directory}: neither chat_template.jinja nor a chat_template in tokenizer_config.json")


def _post_processor_adds_bos(directory: Path) -> bool | None:
    """Whether the fast tokenizer's post-processor puts a special token before the text (Llama-3 adds its BOS
    there, not through tokenizer_config.json's add_bos_token); None when there is no tokenizer.json to read."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        processor = json.loads(path.read_text()).get("post_processor") or {}
    except ValueError:
        return None
    steps = processor.get("processors", [processor]) if processor.get("type") == "Sequence" else [processor]
    for step in steps:
        if isinstance(step, dict) and step.get("type") == "TemplateProcessing":
            single = step.get("single") or []
            return bool(single) and isinstance(single[0], dict) and "SpecialToken" in single[0]
    return False


def _token_text(value: Any) -> str:
    if isinstance(value, dict):  # AddedToken serialised as {"content": ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""
