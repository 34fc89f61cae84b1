"""Per-request sampling seeds. Pure.

A seed (task instance) is a sample: every request carries its own sampling seed, derived reproducibly
from the run's sampling seed, the seed id, the sample index (repeated samples of one case must differ)
and the retry attempt. The same run seed reproduces every trajectory; two seeds never share one.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 31  # every stack takes a non-negative 32-bit signed integer (llama.cpp, vLLM, Ollama, SGLang)


def sampling_seed(run_seed: int | None, seed_id: str, sample: int = 0, attempt: int = 0) -> int | None:
    """The request's sampling seed; None when the run sets none (the stacks then sample at random)."""
    if run_seed is None:
        return None
    material = f"{run_seed}\0{seed_id}\0{sample}\0{attempt}".encode()
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big") % (1 << SEED_BITS)
