"""Provenance read from a real llama-server b11312 (Qwen2.5-Coder-0.5B and SmolLM2-135M GGUF): the canary prompt
the server renders, the harness's own rendering of the model's template (the raw-template mode) compared with
it byte for byte, prompt lengths as the server counts them against what it used, and its sampler defaults."""

from __future__ import annotations

import httpx
import pytest

from orchestrator.core.chattemplate import ChatTemplate, TemplateError, render_chat
from orchestrator.serving.build import server_config
from orchestrator.serving.chatapi import Decoding, build_completion_payload, build_payload, post_chat
from orchestrator.serving.launchers import running_server
from orchestrator.serving.probe import probe
from orchestrator.serving.registry import load_stack
from orchestrator.serving.render import CANARY_MESSAGES, CANARY_TOOLS, count_text_tokens, render_conversation
from orchestrator.serving.templates import model_template

pytestmark = pytest.mark.integration
DECODING = Decoding(temperature=0.0, max_tokens=24, seed=1)


def config(model: str, binary: str, tool_config: str = "jinja"):
    return server_config(
        spec=load_stack("llamacpp"), stack="llamacpp",
        tool_config=tool_config,
        launcher="process",
        model=model,
        binary=binary,
        ready_timeout_s=180,
        progress=lambda _m: None,
    )


@pytest.mark.parametrize("model", ["qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"])
def test_the_harness_renders_the_model_template_as_the_server_does(llama_server_binary: str, model: str) -> None:
    cfg = config(model, llama_server_binary)
    spec = load_stack("llamacpp")
    template = model_template(cfg.model.path)
    assert template.source == "gguf:tokenizer.chat_template" and template.eos_token
    if model.startswith("qwen"):  # the GGUF says its tokenizer adds no BOS (tokenizer.ggml.add_bos_token false)
        assert template.adds_bos is False
    with running_server(cfg, run_id="test-render") as handle, httpx.Client() as client:
        result = probe(handle, cfg)
        canary = result.canary
        # The canary (system, question, a tool call, its result, a follow-up) as the server rendered it.
        assert canary is not None and canary["error"] is None and canary["prompt"] and canary["n_tokens"] > 20
        # The raw-template mode's prompt: the same text, byte for byte, rendered here in the sandbox from the
        # GGUF's template (SmolLM2's template ignores tools; the server's rendering does too).
        harness = render_chat(template, CANARY_MESSAGES, CANARY_TOOLS)
        assert harness == canary["prompt"]
        assert canary["plain"]["prompt"] == render_chat(template, CANARY_MESSAGES[:2], None)
        supports_tools = result.capabilities["/props#chat_template_caps"]["supports_tools"]
        call = '<tool_call>\n{"name": "pod_status", "arguments": {"name": "api-1"}}\n</tool_call>'
        assert (call in harness) is supports_tools
        # What the server says it used equals what it counts for the rendered prompt: no false truncation.
        messages = CANARY_MESSAGES[:2]
        chat = post_chat(
            client, handle.base_url + spec.chat_path, build_payload(spec, cfg.model.name, messages, DECODING), 120
        )
        counted = render_conversation(client, handle.base_url, spec, cfg.model.name, messages, None).n_tokens
        assert chat.http_status == 200 and chat.body["usage"]["prompt_tokens"] == counted
        raw_prompt = render_chat(template, messages, None)
        raw = post_chat(
            client,
            handle.base_url + (spec.completion_path or ""),
            build_completion_payload(spec, cfg.model.name, raw_prompt, DECODING),
            120,
        )
        assert raw.http_status == 200 and raw.body["object"] == "text_completion"
        assert raw.body["usage"]["prompt_tokens"] == count_text_tokens(
            client, handle.base_url, spec, cfg.model.name, raw_prompt
        )
        # Same prompt, same weights: the raw completion used exactly the tokens the chat request used.
        assert raw.body["usage"]["prompt_tokens"] == chat.body["usage"]["prompt_tokens"]
    defaults = result.sampling_defaults
    assert defaults is not None and defaults["source"].startswith("server:/props")
    assert defaults["values"]["top_k"] == 40 and defaults["active_unsent"] == []


def test_template_errors_are_named_not_raised_raw() -> None:
    broken = ChatTemplate(text="{% for m in messages %}{{ m.content ", source="test")
    with pytest.raises(TemplateError, match="does not compile"):
        render_chat(broken, [{"role": "user", "content": "hi"}], None)
    raising = ChatTemplate(text="{{ raise_exception('roles must alternate') }}", source="test")
    with pytest.raises(TemplateError, match="roles must alternate"):
        render_chat(raising, [{"role": "user", "content": "hi"}], None)
    # The sandbox: template code cannot reach Python internals.
    escape = ChatTemplate(text="{{ messages.__class__.__mro__ }}", source="test")
    with pytest.raises(TemplateError, match="SecurityError"):
        render_chat(escape, [], None)


def test_a_template_that_fails_mid_seed_ends_that_seed_recorded(llama_server_binary: str) -> None:
    """Gemma-style templates raise on roles they do not know: the raw-template seed ends as `template_error`
    with the turn recorded (no request sent, out of the denominator), and the run goes on."""
    from orchestrator.core.types import SeedEnd, ToolsMode, TurnRecord
    from orchestrator.runner.config.resolve import load_suite
    from orchestrator.runner.turn.agent import run_seed
    from orchestrator.serving.render import prompt_counter
    from tests.seedcontexts import seed_context

    cfg = config("qwen2.5-coder-0.5b-instruct", llama_server_binary)
    spec = load_stack("llamacpp")
    real = model_template(cfg.model.path)
    guard = (
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tool role unsupported') }}"
        "{% endif %}{% endfor %}"
    )
    strict = ChatTemplate(text=guard + real.text, source="test", eos_token=real.eos_token)
    records: list[TurnRecord] = []
    with running_server(cfg, run_id="test-render") as handle:
        ctx = seed_context(
            run_id="r", cell_id="c", stack_label="llamacpp-jinja", spec=spec, parser=None, stack_version=None,
            base_url=handle.base_url, model=cfg.model.name, mode=ToolsMode.RAW_TEMPLATE, suite=load_suite("ops"),
            seed_id="ops-00", decoding=DECODING.model_copy(update={"max_tokens": 96}), turn_cap=4, loop_repeats=3,
            request_timeout_s=120, max_attempts=1, backoff_s=0.0, headers={}, template=strict,
            count_prompt=prompt_counter(spec, handle.base_url, cfg.model.name),
        )  # fmt: skip
        final = run_seed(ctx, records.append)
    first, last = records[0], records[-1]
    # Turn 0 rendered (no tool message yet) and the model called a tool; turn 1 could not be rendered.
    assert first.outcome.value == "valid_call" and first.raw_body["object"] == "text_completion"
    assert first.prompt_tokens_rendered == first.tokens.prompt
    assert (last.turn, last.outcome.value, last.detail, last.http_status) == (
        1,
        "non_response",
        "template:render_failed",
        None,
    )
    assert last.error is not None and "tool role unsupported" in str(last.error.body)
    assert final.end is SeedEnd.TEMPLATE_ERROR and len(records) == 2


def test_without_jinja_the_tools_canary_is_refused_and_the_plain_one_rendered(llama_server_binary: str) -> None:
    cfg = config("qwen2.5-coder-0.5b-instruct", llama_server_binary, "no-jinja")
    with running_server(cfg, run_id="test-render") as handle:
        canary = probe(handle, cfg).canary
    assert canary is not None and canary["prompt"] is None and "requires --jinja" in canary["error"]
    plain = canary["plain"]
    assert plain["error"] is None and plain["n_tokens"] > 10
    assert "What is the status of pod api-1?" in plain["prompt"] and "pod_status" not in plain["prompt"]
