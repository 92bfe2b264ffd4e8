"""Per-pool backoff for backends that are unavailable (X1: retry later, with backoff).

While a pool is backed off the controller neither submits to it nor polls it; admitted
attempts stay admitted (they keep their place and their GPUs) and are submitted again, with
the same idempotency key, once the delay has passed. Delays double from ``FIRST_DELAY_S``
up to ``MAX_DELAY_S`` and reset on the first success. Thread-safe: execution threads
report outcomes while the controller thread reads.
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


class Backoff:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[float, float, str]] = {}  # pool -> (until, delay, why)

    def failed(self, pool: str, now: float, message: str) -> None:
        with self._lock:
            _, delay, _ = self._failures.get(pool, (0.0, FIRST_DELAY_S / 2, ""))
            delay = min(delay * 2, MAX_DELAY_S)
            self._failures[pool] = (now + delay, delay, message)

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
        return PoolHealth(available=False, message=failure[2], retry_at=failure[0])
