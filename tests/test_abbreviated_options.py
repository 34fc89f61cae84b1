"""A flag in extra_args is checked and redacted as the stack's parser reads it (issue 28, defect 5): Python's argparse
(vLLM, SGLang) takes a unique prefix of a long option as that option, so `--hos 0.0.0.0` binds beyond loopback and
`--api-ke sk-...` carries a key unless both are read so. Which parser does what is a fact of the stack file."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from orchestrator.core.argvflags import WIDEST, OptionSyntax, reads_as
from orchestrator.core.redact import REDACTED, redact_argv, redact_matrix
from orchestrator.serving.registry import load_stack
from orchestrator.serving.serverconfig import BIND_FLAGS, LaunchCommand, ModelRef, ServerConfig, launch_command

SECRET = "sk-abbreviated-0123456789"


def launched(stack: str, extra_args: list[str], *, in_container: bool = False) -> LaunchCommand:
    """The launch command of a stack's default tool configuration with `extra_args` (nothing is started)."""
    spec = load_stack(stack)
    config = ServerConfig(
        stack=stack,
        tool_config=spec.default_tool_config,
        launcher="docker" if in_container else "process",
        model=ModelRef(name="m", path="/models/m"),
        extra_args=extra_args,
        spec=spec,
    )
    bind = "0.0.0.0" if in_container else "127.0.0.1"
    return launch_command(spec, config, bind_host=bind, port=8000, in_container=in_container)


@pytest.mark.parametrize("stack", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "extra", [["--hos", "0.0.0.0"], ["--hos=0.0.0.0"], ["--ho", "::"], ["--h", "10.0.0.1"], ["--host=0.0.0.0"]]
)
def test_an_abbreviated_bind_flag_is_refused_on_argparse_stacks(stack: str, extra: list[str]) -> None:
    with pytest.raises(ValueError, match=r"would listen on '[^']+' \(--h\w* in its argv(, read as --host)?\)"):
        launched(stack, extra)


def test_an_option_that_reads_a_file_of_options_is_refused_on_stacks_that_have_one() -> None:
    for extra in (["--config", "serve.yaml"], ["--conf=serve.yaml"], ["--con", "serve.yaml"]):
        with pytest.raises(ValueError, match=r"read as --config, which takes more options from a file"):
            launched("vllm", extra)
        with pytest.raises(ValueError, match=r"read as --config"):
            launched("sglang", extra)


def test_an_exact_parser_is_read_exactly() -> None:
    # llama.cpp looks each argument up whole: `--hos` is no option of it (it refuses to start), not --host.
    assert launched("llamacpp", ["--hos", "0.0.0.0"]).argv[-2:] == ["--hos", "0.0.0.0"]
    with pytest.raises(ValueError, match=r"would listen on '0\.0\.0\.0' \(--host in its argv\)"):
        launched("llamacpp", ["--host", "0.0.0.0"])


def test_a_container_keeps_its_own_bind_address() -> None:
    assert launched("vllm", [], in_container=True).argv.count("0.0.0.0") == 1
    with pytest.raises(ValueError, match=r"would listen on '::'"):
        launched("vllm", ["--hos", "::"], in_container=True)


@pytest.mark.parametrize("stack", ["vllm", "sglang", "llamacpp"])
@pytest.mark.parametrize(
    "extra",
    [["--api-ke", SECRET], [f"--api-ke={SECRET}"], ["--api_ke", SECRET], ["--api", SECRET], ["--api-key", SECRET]],
)
def test_an_abbreviated_secret_flag_is_redacted(stack: str, extra: list[str]) -> None:
    launch = launched(stack, extra)
    assert SECRET in launch.argv[-1]  # the server gets it
    assert SECRET in launch.secrets
    assert SECRET not in " ".join(launch.shown_argv) and SECRET not in launch.reproduce()
    assert REDACTED in launch.shown_argv[-1]


def test_a_stacks_own_secret_option_and_the_manifests_matrix_are_redacted() -> None:
    launch = launched("sglang", ["--admin-api-k", SECRET])
    assert launch.shown_argv[-2:] == ["--admin-api-k", REDACTED]
    manifest = redact_matrix({"stacks": [{"stack": "vllm", "extra_args": ["--api-ke", SECRET, "--hf-tok=" + SECRET]}]})
    assert manifest["stacks"][0]["extra_args"] == ["--api-ke", REDACTED, "--hf-tok=" + REDACTED]


def test_names_that_are_no_secret_option_stay_as_written() -> None:
    argv = ["--api-key-file", "/run/key", "--api-server-count", "2", "--port", "8000", "--tool-call-parser", "hermes"]
    assert redact_argv(argv) == argv


def test_the_stack_files_say_which_parser_takes_prefixes() -> None:
    options = {name: load_stack(name).launch.options for name in ("vllm", "sglang", "llamacpp", "ollama")}  # type: ignore[union-attr]
    assert {name: (o.prefixes, o.underscores) for name, o in options.items()} == {
        "vllm": (True, True),
        "sglang": (True, False),
        "llamacpp": (False, True),
        "ollama": (False, False),
    }
    assert OptionSyntax() == WIDEST and WIDEST.prefixes and WIDEST.underscores  # unsaid: the widest reading


def argparse_reads(parser: argparse.ArgumentParser, arg: str) -> str | None:
    """The option a real argparse parser takes `arg` (with a value) for, or None where it refuses it."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        namespace = parser.parse_args([arg, "v"] if "=" not in arg else [arg])
        return next((f"--{key.replace('_', '-')}" for key, value in vars(namespace).items() if value == "v"), None)
    return None


def test_the_reading_agrees_with_pythons_argparse_wherever_argparse_takes_the_flag() -> None:
    options = ["--host", "--hostname", "--port", "--api-key", "--api-server-count", "--hf-token", "--config"]
    parser = argparse.ArgumentParser()
    for option in options:
        parser.add_argument(option)
    syntax = OptionSyntax(prefixes=True, underscores=False)
    checked = 0
    for option in options:
        for end in range(3, len(option) + 1):
            for arg in (option[:end], option[:end] + "=v"):
                read = argparse_reads(parser, arg)
                if read in (*BIND_FLAGS, "--api-key", "--hf-token", "--config"):
                    checked += 1
                    assert reads_as(arg, [read], syntax) == read, arg  # never read as less than argparse reads it
    assert checked > 40
