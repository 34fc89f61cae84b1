"""The agent loop over real HTTP: the Ollama replay (tests/replay/ollama) and a closed port."""

from __future__ import annotations

import pytest

from orchestrator.core.types import ToolsMode, TurnRecord
from orchestrator.runner.config.resolve import load_suite
from orchestrator.runner.turn.agent import SeedContext, run_seed
from orchestrator.serving.build import server_config
from orchestrator.serving.chatapi import Decoding
from orchestrator.serving.handle import free_port
from orchestrator.serving.launchers import running_server
from orchestrator.serving.registry import load_stack
from tests.conftest import REPLAY_DIR
from tests.seedcontexts import seed_context

pytestmark = pytest.mark.server


def context(base_url: str, model: str, mode: ToolsMode, **overrides: object) -> SeedContext:
    values = dict(
        run_id="r",
        cell_id="c",
        stack_label="ollama-default",
        spec=load_stack("ollama"),
        parser=None,
        stack_version="0.30.8",
        base_url=base_url,
        model=model,
        mode=mode,
        suite=load_suite("ops"),
        seed_id="ops-00",
        decoding=Decoding(temperature=0, max_tokens=32),
        turn_cap=4,
        loop_repeats=3,
        request_timeout_s=10,
        max_attempts=3,
        backoff_s=0.0,
        headers={},
    )
    values.update(overrides)
    return seed_context(**values)


@pytest.fixture(scope="module")
def ollama_url():
    config = server_config(
        spec=load_stack("ollama"), stack="ollama",
        tool_config=None,
        launcher="process",
        model="x",
        binary=str(REPLAY_DIR / "ollama"),
        ready_timeout_s=30,
    )
    with running_server(config, run_id="test-agent") as handle:
        yield handle.base_url


def test_refused_request_ends_the_seed_and_is_recorded(ollama_url: str) -> None:
    records: list[TurnRecord] = []
    run_seed(context(ollama_url, "phi3", ToolsMode.NATIVE), records.append)
    assert [(r.turn, r.outcome.value, r.http_status, r.end) for r in records] == [
        (0, "rejected_request", 400, "rejected")
    ]
    assert records[0].error.type == "http_400" and "does not support tools" in records[0].error.body["error"]


def test_native_calls_are_executed_until_the_turn_cap(ollama_url: str) -> None:
    records: list[TurnRecord] = []
    run_seed(context(ollama_url, "llama3.2", ToolsMode.NATIVE), records.append)
    # The replay model always calls pod_status: valid calls, never a submit, so the cap ends the seed.
    assert [r.turn for r in records] == [0, 1, 2, 3]
    assert all(r.outcome.value == "valid_call" and r.parse_path == "server" for r in records)
    assert [r.end for r in records] == [None, None, None, "turn_cap"]


def test_text_call_in_native_mode_ends_as_unparseable(ollama_url: str) -> None:
    records: list[TurnRecord] = []
    run_seed(context(ollama_url, "qwen2.5-coder:0.5b", ToolsMode.NATIVE), records.append)
    assert [(r.outcome.value, r.text_call_recoverable, r.end) for r in records] == [
        ("unparseable_text", True, "unparseable")
    ]


def test_non_responses_are_retried_within_a_bound_and_each_attempt_recorded() -> None:
    records: list[TurnRecord] = []
    closed = f"http://127.0.0.1:{free_port()}"
    run_seed(context(closed, "m", ToolsMode.TEXT_TOOLS, max_attempts=3), records.append)
    assert [(r.turn, r.attempt, r.outcome.value, r.detail) for r in records] == [
        (0, a, "non_response", "transport:connection") for a in range(3)
    ]
    assert [r.end for r in records] == [None, None, "retries_exhausted"]
    assert all(r.raw_content is None and r.error.type == "connection" for r in records)
