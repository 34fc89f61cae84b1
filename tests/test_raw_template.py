"""The raw-template mode and provenance, without a server: where a template is read from, how the harness
renders and continues the conversation, how a raw completion is classified, what a request carries, and how
the server's sampler defaults and prompt counts are read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.chattemplate import ChatTemplate, render_chat
from orchestrator.core.classify import classify
from orchestrator.core.replyfacts import prompt_truncated
from orchestrator.core.types import Classification, Outcome, ParsedCall, ToolsMode
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.suites.tasks import ToolResult
from orchestrator.runner.turn.prompts import build_request, continue_messages, raw_prompt
from orchestrator.serving.chatapi import Decoding, build_completion_payload
from orchestrator.serving.registry import load_stack
from orchestrator.serving.render import sampling_defaults
from orchestrator.serving.templates import NoTemplate, model_template

# A hermes-style template in the shape of Qwen2.5's: tools in the system turn, calls in <tool_call> tags,
# results as <tool_response> in a user turn.
HERMES = (
    "{% for m in messages %}<|im_start|>{{ 'user' if m.role == 'tool' else m.role }}\n"
    "{% if m.role == 'tool' %}<tool_response>{{ m.content }}</tool_response>{% else %}{{ m.content }}{% endif %}"
    "{% if m.role == 'system' and tools %}\n<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>"
    "{% endif %}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = load_suite("ops").tools
NAME = TOOLS[0]["function"]["name"]


def test_hf_directory_templates_in_transformers_order(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from-config", "eos_token": "<e>"}))
    assert (model_template(str(tmp_path)).text, model_template(str(tmp_path)).eos_token) == ("from-config", "<e>")
    (tmp_path / "chat_template.jinja").write_text("from-jinja-file")
    assert model_template(str(tmp_path)).text == "from-jinja-file"  # the file wins (transformers >= 4.43)
    override = tmp_path / "mine.jinja"
    override.write_text("from-argv")
    flags = load_stack("vllm").template_flags
    for argv in (["serve", "--chat-template", str(override)], [f"--chat-template={override}"]):
        found = model_template(str(tmp_path), argv, flags)
        assert (found.text, found.source) == ("from-argv", f"argv:{override}")
    # A template set by name (llama.cpp --chat-template chatml) or inline: the harness cannot know its text.
    with pytest.raises(NoTemplate, match="--chat-template 'chatml'"):
        model_template(str(tmp_path), ["--chat-template", "chatml"], load_stack("llamacpp").template_flags)
    assert model_template(str(tmp_path), ["--chat-template", "chatml"], []).text == "from-jinja-file"


def test_named_templates_and_missing_ones(tmp_path: Path) -> None:
    named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": named, "bos_token": {"content": "<s>"}})
    )
    found = model_template(str(tmp_path))
    assert (found.text, found.bos_token) == ("plain", "<s>")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({}))
    with pytest.raises(NoTemplate, match=str(tmp_path)):
        model_template(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text("{broken")
    with pytest.raises(NoTemplate, match="not JSON"):
        model_template(str(tmp_path))
    with pytest.raises(NoTemplate, match="no such model"):
        model_template(str(tmp_path / "absent"))


def test_raw_template_request_is_the_rendered_prompt_and_nothing_else() -> None:
    template = ChatTemplate(text=HERMES, source="test")
    messages = [{"role": "system", "content": "ops"}, {"role": "user", "content": "status?"}]
    request = build_request(ToolsMode.RAW_TEMPLATE, messages, TOOLS, template)
    assert request.tools is None and request.response_schema is None
    # trim_blocks (as transformers renders) eats the newline after `{% if ... %}`: the tools follow "ops" directly.
    assert request.prompt == (
        "<|im_start|>system\nops<tools>pod_status;submit;</tools><|im_end|>\n"
        "<|im_start|>user\nstatus?<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match="needs the model's chat template"):
        build_request(ToolsMode.RAW_TEMPLATE, messages, TOOLS, None)
    spec = load_stack("llamacpp")
    body = build_completion_payload(spec, "m", request.prompt, Decoding(top_k=0, repetition_penalty=1.1, seed=5))
    assert body["prompt"] == request.prompt and "messages" not in body and "tools" not in body
    assert (body["top_k"], body["repeat_penalty"], body["seed"], body["cache_prompt"]) == (0, 1.1, 5, True)


def completion(text: str, finish: str = "stop") -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def judge(body: object, status: int = 200) -> Classification:
    return classify(refusals=[], mode=ToolsMode.RAW_TEMPLATE, tools=TOOLS, http_status=status, body=body)


def test_a_raw_completion_is_classified_by_the_reference_recognisers() -> None:
    call = json.dumps({"name": NAME, "arguments": {"name": "web-0"}})
    tagged = judge(completion(f"<tool_call>\n{call}\n</tool_call>"))
    assert tagged.outcome is Outcome.VALID_CALL and tagged.parse_path == "harness"
    assert tagged.calls == [ParsedCall(name=NAME, arguments={"name": "web-0"})]
    assert judge(completion(call)).outcome is Outcome.VALID_CALL  # bare JSON, as Qwen writes it
    assert judge(completion("The pod is fine.")).outcome is Outcome.NO_CALL_PROSE
    empty = judge(completion(""))
    assert (empty.outcome, empty.detail) == (Outcome.NON_RESPONSE, "empty:no_content")
    cut = judge(completion('<tool_call>{"name": "', "length"))
    assert cut.outcome is Outcome.UNPARSEABLE_TEXT and "truncated:max_tokens" in cut.flags
    refused = judge({"error": {"message": "bad"}}, 400)
    assert refused.outcome is Outcome.REJECTED_REQUEST


def test_the_conversation_continues_with_the_models_own_text_and_tool_results() -> None:
    template = ChatTemplate(text=HERMES, source="test")
    text = json.dumps({"name": NAME, "arguments": {"name": "web-0"}})
    verdict = judge(completion(text))
    result = ToolResult(call=verdict.calls[0], result={"status": "Running"}, error=False)
    added = continue_messages("openai", verdict, [result], 0, mode=ToolsMode.RAW_TEMPLATE)
    assert added[0] == {"role": "assistant", "content": text}
    assert added[1]["role"] == "tool" and json.loads(added[1]["content"]) == {"status": "Running"}
    prompt = render_chat(template, [{"role": "user", "content": "q"}, *added], TOOLS)
    assert f"<|im_start|>assistant\n{text}<|im_end|>" in prompt  # exactly what the model wrote, once
    assert '<tool_response>{"status": "Running"}</tool_response>' in prompt


def test_sampler_defaults_in_canonical_names_and_stages_left_on() -> None:
    llama = load_stack("llamacpp")
    params = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0}
    off = {"typical_p": 1.0, "xtc_probability": 0.0, "dry_multiplier": 0.0, "mirostat": 0, "top_n_sigma": -1.0}
    caps = {"/props#default_generation_settings": {"params": {**params, **off, "dynatemp_range": 0.0}}}
    read = sampling_defaults(llama, caps)
    assert read["values"]["repetition_penalty"] == 1.0 and read["values"]["top_k"] == 40
    assert read["active_unsent"] == [] and read["source"].startswith("server:/props")
    caps["/props#default_generation_settings"]["params"]["dry_multiplier"] = 0.8
    assert sampling_defaults(llama, caps)["active_unsent"] == ["dry_multiplier"]
    vllm = sampling_defaults(load_stack("vllm"), {"/v1/models#data": []})
    assert vllm["values"]["temperature"] == 1.0 and vllm["source"].startswith("stack file")
    assert sampling_defaults(load_stack("sglang"), {})["values"] is None  # nothing documented, nothing reported


def test_truncation_needs_both_counts_and_a_shortfall() -> None:
    assert prompt_truncated(100, 150) and not prompt_truncated(150, 150) and not prompt_truncated(160, 150)
    assert not prompt_truncated(None, 150) and not prompt_truncated(100, None)


def test_ollama_parameters_lines_override_its_documented_defaults() -> None:
    ollama = load_stack("ollama")
    lines = 'temperature                    0.7\nstop                           "<|im_end|>"\nrepeat_penalty 1.05'
    read = sampling_defaults(ollama, {"/api/show#parameters": lines})
    assert read["values"]["temperature"] == 0.7 and read["values"]["repetition_penalty"] == 1.05
    assert read["values"]["top_k"] == 40  # not in the Modelfile: api/types.go DefaultOptions
    assert read["source"].startswith("server:/api/show#parameters over stack file")
    assert sampling_defaults(ollama, {})["values"]["temperature"] == 0.8


def test_the_template_a_server_reports_is_the_effective_one(tmp_path: Path) -> None:
    from orchestrator.runner.config.cellconfig import effective_template
    from orchestrator.serving.probe import ProbeResult
    from orchestrator.serving.serverconfig import ModelRef

    (tmp_path / "chat_template.jinja").write_text("on disk")
    model = ModelRef(name="m", path=str(tmp_path))
    probe_result = ProbeResult.model_construct(capabilities={"/api/show#template": "{{ .Prompt }}"})
    sha, source = effective_template(load_stack("ollama"), probe_result, model, None)
    assert source == "server:/api/show#template" and sha == ChatTemplate("{{ .Prompt }}", "x").sha256
    # vLLM says nothing about its template: the model directory's file is what it loads.
    sha, source = effective_template(load_stack("vllm"), probe_result, model, None)
    assert source == str(tmp_path / "chat_template.jinja") and sha == ChatTemplate("on disk", "x").sha256


def test_a_bos_the_tokenizer_adds_itself_is_not_sent_twice() -> None:
    text = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    messages = [{"role": "user", "content": "hi"}]
    adds = ChatTemplate(text=text, source="t", bos_token="<s>", adds_bos=True)
    assert raw_prompt(adds, messages, []) == "[user]hi"  # the completion endpoint adds <s> itself
    for adds_bos in (False, None):  # the tokenizer adds none (or nobody knows): the template's BOS stays
        keeps = ChatTemplate(text=text, source="t", bos_token="<s>", adds_bos=adds_bos)
        assert raw_prompt(keeps, messages, []) == "<s>[user]hi"


def test_where_the_tokenizer_adds_bos_is_read_from_the_model_files(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}x")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|begin_of_text|>"}))
    assert model_template(str(tmp_path)).adds_bos is None  # nothing says
    llama3 = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>"}}, {"Sequence": {"id": "A"}}],
    }
    (tmp_path / "tokenizer.json").write_text(
        json.dumps({"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"}, llama3]}})
    )
    assert model_template(str(tmp_path)).adds_bos is True
    qwen = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}]}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"post_processor": qwen}))
    assert model_template(str(tmp_path)).adds_bos is False
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True}))
    assert model_template(str(tmp_path)).adds_bos is True  # the config's own flag wins
