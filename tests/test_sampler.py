"""The same sampler on every stack: every request carries the full sampler in the stack's own names, the
stack's own 'off' values, and nothing the stack's API would refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from orchestrator.serving.chatapi import (
    NEUTRAL_SAMPLER,
    Decoding,
    SamplerNotSupported,
    build_payload,
    sampler_record,
)
from orchestrator.serving.defaults import model_generation_config
from orchestrator.serving.registry import REPO_ROOT, load_stack, stack_names
from orchestrator.serving.serverconfig import ModelRef
from orchestrator.serving.stackspec import SAMPLER_PARAMS, Sampler

MESSAGES = [{"role": "user", "content": "hi"}]
DECODING = Decoding(temperature=1.0, top_p=1.0, max_tokens=64, seed=7)
NEUTRAL = {"top_p": 1.0, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def payload(stack: str, decoding: Decoding = DECODING) -> dict:
    return build_payload(load_stack(stack), "m", MESSAGES, decoding)


def test_decoding_fields_are_the_canonical_sampler_and_default_to_neutral() -> None:
    assert set(SAMPLER_PARAMS) == set(Decoding.model_fields) - {"extra"}
    neutral = Decoding()
    assert {name: getattr(neutral, name) for name in NEUTRAL_SAMPLER} == NEUTRAL_SAMPLER
    assert (neutral.top_k, neutral.min_p, neutral.repetition_penalty) == (0, 0.0, 1.0)
    assert (neutral.presence_penalty, neutral.frequency_penalty) == (0.0, 0.0)


def test_llamacpp_full_sampler_in_its_names_with_cache_prompt() -> None:
    body = payload("llamacpp")
    assert {k: v for k, v in body.items() if k not in ("model", "messages")} == {
        "temperature": 1.0,
        **NEUTRAL,
        "top_k": 0,  # llama.cpp: 0 = off
        "repeat_penalty": 1.0,
        "max_tokens": 64,
        "seed": 7,
        "cache_prompt": True,
    }


def test_vllm_full_sampler_in_its_names() -> None:
    body = payload("vllm")
    assert {k: v for k, v in body.items() if k not in ("model", "messages")} == {
        "temperature": 1.0,
        **NEUTRAL,
        "top_k": 0,  # vLLM 0.32: 0 (or -1) = off
        "repetition_penalty": 1.0,
        "max_tokens": 64,
        "seed": 7,
    }


def test_sglang_full_sampler_with_its_own_top_k_off_value() -> None:
    body = payload("sglang")
    assert {k: v for k, v in body.items() if k not in ("model", "messages")} == {
        "temperature": 1.0,
        **NEUTRAL,
        "top_k": -1,  # SGLang refuses 0; -1 = whole vocabulary
        "repetition_penalty": 1.0,
        "max_tokens": 64,
        "seed": 7,
    }


def test_ollama_full_sampler_inside_options() -> None:
    body = payload("ollama")
    assert body["stream"] is False
    assert body["options"] == {
        "temperature": 1.0,
        **NEUTRAL,
        "top_k": 0,
        "repeat_penalty": 1.0,  # Ollama 0.30.8 defaults to 1.1 when unsent
        "num_predict": 64,
        "seed": 7,
    }
    assert not set(body) & {"temperature", "top_k", "max_tokens", "seed"}


def test_openai_gets_no_parameter_its_api_refuses() -> None:
    body = payload("openai")
    assert {k: v for k, v in body.items() if k not in ("model", "messages")} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 64,
        "seed": 7,
    }
    assert not {"top_k", "min_p", "repetition_penalty", "repeat_penalty"} & set(body)
    record = sampler_record(load_stack("openai"), DECODING)
    assert set(record["not_sent"]) == {"top_k", "min_p", "repetition_penalty"}


def test_a_non_neutral_value_the_stack_cannot_send_is_an_error_not_a_silent_drop() -> None:
    with pytest.raises(SamplerNotSupported, match="top_k"):
        payload("openai", DECODING.model_copy(update={"top_k": 40}))
    body = payload("llamacpp", DECODING.model_copy(update={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1}))
    assert (body["top_k"], body["min_p"], body["repeat_penalty"]) == (40, 0.05, 1.1)
    assert payload("sglang", DECODING.model_copy(update={"top_k": 20}))["top_k"] == 20


def test_no_seed_is_not_sent_and_extra_overrides_request_fields() -> None:
    body = payload("llamacpp", DECODING.model_copy(update={"seed": None, "extra": {"cache_prompt": False}}))
    assert "seed" not in body and body["cache_prompt"] is False


def test_constrained_schema_uses_the_stacks_knob() -> None:
    schema = {"type": "object"}
    ollama = build_payload(load_stack("ollama"), "m", MESSAGES, DECODING, response_schema=schema)
    vllm = build_payload(load_stack("vllm"), "m", MESSAGES, DECODING, response_schema=schema)
    assert ollama["format"] == schema and "response_format" not in ollama
    assert vllm["response_format"]["json_schema"]["schema"] == schema


def test_every_stack_names_or_excludes_every_parameter() -> None:
    for name in stack_names():
        sampler = load_stack(name).sampler
        assert set(sampler.names) | set(sampler.not_sent) == set(SAMPLER_PARAMS), name
    with pytest.raises(ValidationError, match="neither named nor listed"):
        Sampler(names={"temperature": "temperature"})
    full = dict.fromkeys(SAMPLER_PARAMS, "x")
    with pytest.raises(ValidationError, match="top_k_disabled"):
        Sampler(names=full)


def test_model_generation_config_is_read_for_the_record(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.7, "top_k": 20}))
    record = model_generation_config(ModelRef(name="m", path=str(tmp_path)))
    assert record["present"] is True and record["content"] == {"temperature": 0.7, "top_k": 20}
    assert len(record["sha256"]) == 64
    assert model_generation_config(ModelRef(name="m", path=str(tmp_path / "none")))["present"] is None
    missing = tmp_path / "empty"
    missing.mkdir()
    assert model_generation_config(ModelRef(name="m", path=str(missing)))["present"] is False
    hub = model_generation_config(ModelRef(name="m", path="Qwen/Qwen2.5-Coder-0.5B-Instruct", local=False))
    assert hub["present"] is None and hub["content"] is None


def test_matrices_leave_room_for_whole_answers() -> None:
    def max_tokens(name: str) -> int:
        return yaml.safe_load((REPO_ROOT / "matrices" / f"{name}.yaml").read_text())["decoding"]["max_tokens"]

    assert max_tokens("cpu") == 512
    assert max_tokens("smoke") == 192
