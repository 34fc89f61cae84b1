"""Secrets never reach a run directory or the console. Pure.

A secret is the value of an environment variable whose name says so (`*_KEY`, `*_TOKEN`, `*SECRET*`,
`*PASSWORD*`, `*CREDENTIAL*`), the value after a command-line flag whose name says so (`--api-key X`,
`--hf-token=X`; `--api-key-file PATH` names a file, not a secret), or after a flag a server's parser may read as
a secret option (`SECRET_OPTIONS` and the stack's own `launch.options.secret_options`): argparse reads `--api-ke`
as `--api-key`, so a prefix of one is a secret flag too, whatever the stack (a value hidden that the server would
not have read as a secret costs nothing; one shown could be a key). What is recorded (argv, env, reproduce
commands, the manifest's matrix, server logs) carries REDACTED in their place. Request headers are never
recorded: a hosted stack's `Authorization` header is built from its key variable (`api_key_env`) when sent.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from orchestrator.core.argvflags import WIDEST, option_name, reads_as

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"(KEY|TOKEN|KEYS|TOKENS)$|SECRET|PASSW(OR)?D|CREDENTIAL", re.IGNORECASE)
MIN_SECRET_LEN = 6  # shorter values ("1", "true") are not scrubbed out of free text: they would hit everything
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SECRET_OPTIONS = ("--api-key", "--hf-token", "--admin-api-key")  # the known stacks' (vLLM, SGLang, llama.cpp)


def secret_name(name: str) -> bool:
    """True for an environment variable or flag name that holds a secret (`--api-key` reads as API_KEY)."""
    return bool(SECRET_NAME.search(name.lstrip("-").replace("-", "_")))


def redact_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    return {key: REDACTED if secret_name(key) and value else value for key, value in env.items()}


def _secret_flag(arg: str, options: Iterable[str] = ()) -> bool:
    """A flag whose value is a secret: its name says so, or a parser may read it as a secret option (a prefix)."""
    name = option_name(arg)
    return name is not None and (secret_name(name) or reads_as(name, [*SECRET_OPTIONS, *options], WIDEST) is not None)


def redact_argv(argv: list[str] | None, secret_options: Iterable[str] = ()) -> list[str] | None:
    """The argv with the value of every secret flag replaced (`--api-key X`, `--api-key=X`, `--api-ke X`);
    `secret_options`: the stack's own secret options beside `SECRET_OPTIONS`."""
    if argv is None:
        return None
    options = list(secret_options)
    out: list[str] = []
    for index, arg in enumerate(argv):
        if ENV_REFERENCE.fullmatch(arg.split("=", 1)[-1]):
            out.append(arg)  # `${NAME}`: where the secret comes from, not the secret
        elif index and _takes_next(argv[index - 1], options) and not arg.startswith("-"):
            out.append(REDACTED)
        elif _secret_flag(arg, options) and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(arg)
    return out


def _takes_next(arg: str, options: list[str]) -> bool:
    return "=" not in arg and _secret_flag(arg, options)


def argv_secrets(argv: Iterable[str] | None, secret_options: Iterable[str] = ()) -> set[str]:
    """The values of secret flags in an argv."""
    args, options = list(argv or []), list(secret_options)
    found: set[str] = set()
    for index, arg in enumerate(args):
        if _secret_flag(arg, options) and "=" in arg:
            found.add(arg.split("=", 1)[1])
        elif index and _takes_next(args[index - 1], options) and not arg.startswith("-"):
            found.add(arg)
    return found


def env_secrets(env: Mapping[str, str] | None) -> set[str]:
    return {value for key, value in (env or {}).items() if secret_name(key) and value}


def known_secrets(
    argv: Iterable[str] | None = None,
    env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    secret_options: Iterable[str] = (),
) -> set[str]:
    """Every secret value in play: the process environment's, and those in a server's argv and env."""
    environment = env_secrets(os.environ if environ is None else environ)
    values = environment | env_secrets(env) | argv_secrets(argv, secret_options)
    return {value for value in values if len(value) >= MIN_SECRET_LEN and value != REDACTED}


def encodings(secret: str) -> set[str]:
    """The forms a secret may be written in: as is, URL-encoded, base64 (as a Basic credential would be)."""
    raw = secret.encode()
    return {secret, quote(secret, safe=""), base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Free text (a log, an error) with every secret value, in any of its encodings, replaced."""
    for secret in sorted(secrets, key=len, reverse=True):
        for form in encodings(secret):
            if form:
                text = text.replace(form, REDACTED)
    return text


def scrub_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    for secret in sorted(secrets, key=len, reverse=True):
        for form in encodings(secret):
            if form:
                data = data.replace(form.encode(), REDACTED.encode())
    return data


def redact_matrix(data: dict[str, Any]) -> dict[str, Any]:
    """A matrix (as dumped for the manifest) with secret flag values of its stacks' extra_args replaced.
    A `${NAME}` reference is kept: it names where the secret comes from, not the secret."""
    stacks = [
        {**stack, "extra_args": redact_argv(stack.get("extra_args"))} if stack.get("extra_args") else stack
        for stack in data.get("stacks", [])
    ]
    return {**data, "stacks": stacks}


def has_redacted(value: Any) -> bool:
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, list):
        return any(has_redacted(v) for v in value)
    if isinstance(value, dict):
        return any(has_redacted(v) for v in value.values())
    return False


class MissingEnvReference(KeyError):
    pass


def expand_env(arg: str, environ: Mapping[str, str] | None = None) -> str:
    """`${NAME}` in a matrix's extra_args is read from the environment at launch (a secret stays out of the
    matrix and the manifest); an unset variable is an error."""
    environ = os.environ if environ is None else environ

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise MissingEnvReference(f"extra_args {arg!r}: environment variable {name} is not set")
        return environ[name]

    return ENV_REFERENCE.sub(sub, arg)
