"""When the simulated provider takes spot nodes back (R5 in the simulator).

Each spot node lives an exponentially distributed time (a Poisson process of evictions per
node, at ``per_node_day`` evictions per node-day) drawn from a seeded generator when the node
appears, so two runs with the same seed evict the same nodes at the same moments. The engine
asks which nodes are due, requeues the attempts on them as evicted (the work since their last
checkpoint is lost, as for a preemption) and then: an autoscaled pool forgets the node and asks
for another if it still needs one (coming up after ``provision_delay_s``); a fixed pool's
provider replaces it at once (the replacement's own life is drawn again).

Invariant: a node is tracked from the moment it is paid for until it is evicted or released;
``next_eviction`` is the earliest moment of a tracked node (``inf`` with none, or rate 0).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable

DAY_S = 86400.0


class SpotModel:
    def __init__(self, per_node_day: float, seed: int = 0) -> None:
        if per_node_day < 0:
            raise ValueError(f"spot evictions per node-day must be >= 0, got {per_node_day}")
        self._rate = per_node_day / DAY_S  # per node-second
        self._rng = random.Random(seed)
        self._at: dict[tuple[str, str], float] = {}  # (pool, node) -> when it is taken back
        self._heap: list[tuple[float, str, str]] = []  # the same, by time (with stale entries)

    @property
    def enabled(self) -> bool:
        return self._rate > 0

    def track(self, pool: str, nodes: Iterable[str], now: float) -> None:
        """``pool``'s spot nodes now: a new one gets its moment; one gone is forgotten."""
        if not self.enabled:
            return
        names = set(nodes)
        for key in [k for k in self._at if k[0] == pool and k[1] not in names]:
            del self._at[key]
        for name in sorted(names):
            if (pool, name) not in self._at:
                self.renew(pool, name, now)

    def renew(self, pool: str, node: str, now: float) -> None:
        """A new life for ``node`` from ``now`` (a replacement under the same name)."""
        at = now + self._rng.expovariate(self._rate)
        self._at[(pool, node)] = at
        heapq.heappush(self._heap, (at, pool, node))

    def due(self, now: float) -> list[tuple[str, str]]:
        """The (pool, node) taken back by ``now``, in time order; they are forgotten."""
        found = []
        while self._heap and self._heap[0][0] <= now:
            at, pool, node = heapq.heappop(self._heap)
            if self._at.get((pool, node)) == at:
                del self._at[(pool, node)]
                found.append((pool, node))
        return found

    def next_eviction(self) -> float:
        while self._heap and self._at.get((self._heap[0][1], self._heap[0][2])) != self._heap[0][0]:
            heapq.heappop(self._heap)  # stale: the node was released or renewed since
        return self._heap[0][0] if self._heap else math.inf
