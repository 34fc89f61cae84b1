"""Every seed is its own sample: each request carries a sampling seed derived from the run's seed, the seed
id, the sample index and the retry attempt, and the turn record says which."""

from __future__ import annotations

import pytest

from orchestrator.core.sampling import sampling_seed
from orchestrator.core.types import TurnRecord
from orchestrator.runner.turn.agent import run_seed
from tests.fakes.scripted import Reply, chat_reply, scripted_server
from tests.test_agent_integrity import context

PROSE = Reply(200, chat_reply("The pod is fine."))


def sent_seeds(seed_id: str, replies: list[Reply], **overrides: object) -> tuple[list[int], list[TurnRecord]]:
    records: list[TurnRecord] = []
    with scripted_server(replies) as (url, script):
        run_seed(context(url, seed_id=seed_id, **overrides), records.append)
    return [payload["seed"] for _, payload in script.requests], records


def test_seeds_of_one_run_sample_differently_and_reproducibly() -> None:
    seeds = [f"ops-{i:02d}" for i in range(8)]
    derived = [sampling_seed(7, s) for s in seeds]
    assert len(set(derived)) == 8
    assert derived == [sampling_seed(7, s) for s in seeds]
    assert sampling_seed(7, "ops-00") != sampling_seed(8, "ops-00")
    assert sampling_seed(7, "ops-00", sample=1) != sampling_seed(7, "ops-00", sample=0)
    assert sampling_seed(7, "ops-00", attempt=1) != sampling_seed(7, "ops-00", attempt=0)
    assert sampling_seed(None, "ops-00") is None
    assert all(0 <= value < 2**31 for value in derived)


@pytest.mark.server
def test_each_request_carries_its_seeds_sampling_seed_and_records_it() -> None:
    first, records = sent_seeds("ops-00", [PROSE])
    second, _ = sent_seeds("ops-01", [PROSE])
    assert first == [sampling_seed(1, "ops-00")] and second == [sampling_seed(1, "ops-01")]
    assert first != second
    assert records[0].sampling_seed == first[0]


@pytest.mark.server
def test_a_retry_and_a_repeated_sample_get_their_own_seeds() -> None:
    failing = Reply(500, {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}})
    sent, records = sent_seeds("ops-00", [failing, PROSE], max_attempts=2)
    assert sent == [sampling_seed(1, "ops-00", attempt=0), sampling_seed(1, "ops-00", attempt=1)]
    assert [r.sampling_seed for r in records] == sent
    repeated, records = sent_seeds("ops-00", [PROSE], sample=3)
    assert repeated == [sampling_seed(1, "ops-00", sample=3)] and records[0].sample == 3
