"""How a server reads its command line, so a flag is checked and redacted as the server will read it. Pure.

Python's argparse (vLLM, SGLang) takes a unique prefix of a long option as that option (`allow_abbrev`, on by
default): `--hos 0.0.0.0` is `--host 0.0.0.0`, `--api-ke sk-...` is `--api-key sk-...`; vLLM's parser and llama.cpp's
also read `_` as `-` in a long option's name. A stack file says which of these its parser does (`launch.options`);
a stack that says nothing is read the widest way (prefixes and underscores both), never the narrowest.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field


class OptionSyntax(BaseModel):
    """What a server's argument parser accepts as a long option (the facts, per stack, in `stacks/*.yaml`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefixes: bool = Field(
        True, description="A prefix of a long option is that option (Python argparse's allow_abbrev, its default)."
    )
    underscores: bool = Field(True, description="`_` in a long option's name reads as `-` (`--api_key`: `--api-key`).")
    secret_options: list[str] = Field(
        default_factory=list, description="The parser's options whose value is a secret, in full (e.g. --api-key)."
    )
    config_options: list[str] = Field(
        default_factory=list,
        description="Options that read more options from a file (e.g. --config): their settings cannot be checked.",
    )


WIDEST = OptionSyntax()  # an undeclared parser: every reading a server might make


def option_name(arg: str) -> str | None:
    """The option an argv element names, before any `=value` (None: a value, not an option)."""
    if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit():
        return None
    return arg.split("=", 1)[0]


def reads_as(arg: str, options: Iterable[str], syntax: OptionSyntax = WIDEST) -> str | None:
    """Which of `options` (full long names) the server reads `arg` as, or None. A prefix that several options
    share is taken as each (argparse refuses it as ambiguous; read here, it is never less than it could be)."""
    name = option_name(arg)
    if name is None:
        return None
    if syntax.underscores and name.startswith("--"):
        name = name.replace("_", "-")
    wanted = list(options)
    if name in wanted:
        return name
    if syntax.prefixes and name.startswith("--") and len(name) > 2:
        return next((option for option in wanted if option.startswith(name)), None)
    return None
