"""What the controller tells an observer (metrics) about its work, and the no-op default.

The controller calls an :class:`Observer` at the few points where something worth counting
happens: a step ended, a cycle decided, a backend call failed. It never waits on one and never
depends on what it does; the default :class:`NullObserver` does nothing, so a controller
without metrics (tests, the simulator) pays nothing. ``gpupool.server.metrics`` implements it
with Prometheus instruments.

Invariant: every call is made on the controller's own threads (the loop, or an execution
thread for a finished backend call), and a :class:`CycleSeen` handed out is never changed
afterwards, so an observer may keep the last one and read it from another thread (a scrape).
Its two lookups (``reasons``, ``started``) are single dictionary reads of the controller's live
memory: safe from another thread, and at most one cycle newer than the rest of the view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpupool.backends.errors import BackendMisconfigured, BackendRejected, BackendUnavailable
from gpupool.data.grants.base import GrantError
from gpupool.scheduler import CycleResult, PendingJob, PendingReason, Snapshot


@dataclass(frozen=True)
class CycleSeen:
    """One cycle as the controller ran it: its inputs, its result and how long it took."""

    at: float  # wall-clock seconds (the snapshot's now)
    seconds: float  # how long the cycle itself took
    snapshot: Snapshot  # pools with their node usage, teams' quotas, the active jobs
    queued: Mapping[str, tuple[PendingJob, ...]]  # each team's queue as the cycle read it
    result: CycleResult
    # The reasons a queued job waits for, as last decided (parked teams' jobs included).
    reasons: Callable[[str], tuple[PendingReason, ...] | None]
    # Whether an active job's attempt has started (False: admitted, not running yet).
    started: Callable[[str], bool]
    # A queued job by id (read while the cycle's admissions are recorded).
    job: Callable[[str], PendingJob | None]
    # Teams the cycle left out (parked): their jobs keep the reasons an earlier cycle gave.
    parked: frozenset[str] = frozenset()


class Observer(Protocol):
    def step(self, seconds: float) -> None:
        """A controller step (sync, cancel, schedule, dispatch) of the leader ended."""

    def cycle(self, seen: CycleSeen) -> None:
        """A scheduling cycle ran and its decisions were written."""

    def backend_error(self, pool: str, operation: str, error: BaseException) -> None:
        """A backend call failed: ``operation`` is dispatch, poll, cancel or capacity."""

    def evicted(self, pool: str) -> None:
        """An attempt on ``pool`` ended because the provider took its node back (R5)."""


class NullObserver:
    """Observes nothing."""

    def step(self, seconds: float) -> None:
        pass

    def cycle(self, seen: CycleSeen) -> None:
        pass

    def backend_error(self, pool: str, operation: str, error: BaseException) -> None:
        pass

    def evicted(self, pool: str) -> None:
        pass


def error_class(error: BaseException) -> str:
    """A bounded name for a failure, by what the caller should do about it (not the adapter's
    own class, so a new adapter adds no label values)."""
    if isinstance(error, BackendUnavailable):
        return "unavailable"
    if isinstance(error, BackendRejected):
        return "rejected"
    if isinstance(error, BackendMisconfigured):
        return "misconfigured"
    if isinstance(error, GrantError):
        return "grant"
    return "other"
