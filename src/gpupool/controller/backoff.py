"""Per-pool backoff for backends that are unavailable (X1: retry later, with backoff).

While a pool is backed off the controller neither submits to it nor polls it; admitted
attempts stay admitted (they keep their place and their GPUs) and are submitted again, with
the same idempotency key, once the delay has passed. Delays double from ``FIRST_DELAY_S``
up to ``MAX_DELAY_S`` and reset on the first success. Thread-safe: execution threads
report outcomes while the controller thread reads.

A pool's health also says since when it has failed without a success in between
(``down_since``): an admitted attempt that waits on a pool down longer than
``scheduler.requeue_unreachable_after_s`` goes back to the queue (``controller/loop.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0


@dataclass(frozen=True, slots=True)
class PoolHealth:
    available: bool
    message: str = ""
    retry_at: float | None = None  # monotonic seconds
    down_since: float | None = None  # monotonic seconds of the first failure in this run


class Backoff:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # pool -> (until, delay, why, since)
        self._failures: dict[str, tuple[float, float, str, float]] = {}

    def failed(self, pool: str, now: float, message: str) -> None:
        with self._lock:
            _, delay, _, since = self._failures.get(pool, (0.0, FIRST_DELAY_S / 2, "", now))
            delay = min(delay * 2, MAX_DELAY_S)
            self._failures[pool] = (now + delay, delay, message, since)

    def succeeded(self, pool: str) -> None:
        with self._lock:
            self._failures.pop(pool, None)

    def blocked(self, pool: str, now: float) -> bool:
        with self._lock:
            failure = self._failures.get(pool)
        return failure is not None and now < failure[0]

    def health(self, pool: str) -> PoolHealth:
        with self._lock:
            failure = self._failures.get(pool)
        if failure is None:
            return PoolHealth(available=True)
        until, _, message, since = failure
        return PoolHealth(available=False, message=message, retry_at=until, down_since=since)
