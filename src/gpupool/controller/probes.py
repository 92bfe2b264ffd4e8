"""Pool probes: the controller asks each pool's backend one cheap question at start and then
every ``PROBE_EVERY_S`` (X1, and what ``gpupool doctor`` asks on demand).

The question is the cheapest one the adapter has: its pool's capacity where it reports it
(Slurm's ``sinfo``), else a listing of a job that was never submitted (nothing starts or
stops), else only building the adapter (its options parsed, its SDK imported), for backends
with nothing to ask (local, fake).

What the controller does with the answer (:class:`Probes`):

* an answer: the capacity it reports, if any, is what the scheduler plans with, and a pool
  backed off by failed probes is available again;
* a failure: the pool is backed off with the failure as its message (``/v1/pools`` shows it,
  ``available: false``), and it is planned with no usable node, so nothing is admitted there
  until a probe answers again. A backed-off pool is probed again as soon as its backoff ends.
  A pool with jobs running keeps them: the sync loop goes on polling them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from gpupool.backends.base import Capability, CapacityReporter, JobHandle, PoolCapacity
from gpupool.backends.errors import BackendError, BackendMisconfigured
from gpupool.controller.backoff import Backoff

log = logging.getLogger(__name__)

PROBE_EVERY_S = 30.0
NO_NODE = PoolCapacity(nodes=0, gpus_per_node=0)
PROBE_KEY = "gpupool-probe.0"  # the key of a job that is never submitted


def ask(backend: object, pool: str, name: str) -> PoolCapacity | None:
    """One cheap question to ``backend`` (a pool's adapter): its capacity, or None when it
    does not report one. Raises the adapter's classified error when it does not answer."""
    capabilities = getattr(backend, "capabilities", frozenset())
    if Capability.CAPACITY in capabilities and isinstance(backend, CapacityReporter):
        return backend.pool_capacity()
    if name in ("local", "fake"):
        return None  # nothing to ask: the adapter was built, its options parsed
    poll = getattr(backend, "poll", None)
    if callable(poll):
        poll([JobHandle(name, pool, provider_id="gpupool-probe", key=PROBE_KEY)])
    return None


Start = Callable[[str], "Future[PoolCapacity | None]"]


class Probes:
    """The pools' last answers. Driven from the controller's tick; thread-safe only through
    the futures it starts (their callbacks only wake the loop)."""

    def __init__(self, backoff: Backoff, start: Start, on_done: Callable[[], None]) -> None:
        self._backoff = backoff
        self._start = start
        self._on_done = on_done
        self._calls: dict[str, Future[PoolCapacity | None]] = {}
        self._asked_at = float("-inf")
        self._failed: set[str] = set()
        self.capacity: dict[str, PoolCapacity] = {}

    def refresh(self, pools: Iterable[str], now: float) -> bool:
        """Collect finished probes and start due ones; True when what the scheduler plans
        with changed."""
        changed = self._collect(now)
        names = list(pools)
        for gone in set(self.capacity) - set(names):
            del self.capacity[gone]
        due = now - self._asked_at >= PROBE_EVERY_S
        if due:
            self._asked_at = now
        for pool in names:
            if pool in self._calls or self._backoff.blocked(pool, now):
                continue
            if due or pool in self._failed:
                future = self._start(pool)
                self._calls[pool] = future
                future.add_done_callback(lambda _: self._on_done())
        return changed

    def _collect(self, now: float) -> bool:
        changed = False
        for pool, future in list(self._calls.items()):
            if not future.done():
                continue
            del self._calls[pool]
            try:
                seen = future.result()
            except BackendError as exc:
                what = "misconfigured" if isinstance(exc, BackendMisconfigured) else "unreachable"
                if pool not in self._failed:
                    log.warning("pool %s is %s: %s", pool, what, exc)
                self._failed.add(pool)
                self._backoff.failed(pool, now, f"{what}: {exc}")
                seen = NO_NODE
            else:
                if pool in self._failed:
                    log.info("pool %s answers again", pool)
                    self._failed.discard(pool)
                    self._backoff.succeeded(pool)
            if seen is None:
                changed |= self.capacity.pop(pool, None) is not None
            elif self.capacity.get(pool) != seen:
                self.capacity[pool] = seen
                changed = True
        return changed
