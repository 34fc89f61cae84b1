"""Running a cell's seeds, one at a time or on a thread pool (the matrix's `concurrency`), stoppable at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar

Seed = TypeVar("Seed")
Result = TypeVar("Result")


def map_seeds(
    one: Callable[[Seed], Result], seeds: list[Seed], concurrency: int, cancelled: threading.Event
) -> list[Result]:
    """Run `one` over the seeds; on Ctrl-C (or any error) `cancelled` is set, queued seeds are cancelled at once
    and running ones stop before their next request, writing nothing more (resume reruns them)."""
    if concurrency == 1:
        try:
            return [one(seed) for seed in seeds]
        except BaseException:
            cancelled.set()
            raise
    pool = ThreadPoolExecutor(concurrency)
    try:
        futures = [pool.submit(one, seed) for seed in seeds]
        results = [future.result() for future in as_completed(futures)]
    except BaseException:
        cancelled.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results
