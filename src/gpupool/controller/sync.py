"""Backend sync: poll active attempts and deliver cancellations, never blocking the loop.

Every backend call runs on the execution service's threads. A tick collects the results that
have arrived since the last tick, applies them, and starts the calls that are due: at most one
poll per pool and one cancel per attempt in flight at a time. A pool whose backend is
unreachable is backed off (``Backoff``): its jobs keep their last known status until it
answers again, and nothing is requeued or resubmitted because of the outage.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from gpupool.backends.base import FINAL_STATES, BackendStatus, JobHandle, RunState
from gpupool.backends.errors import BackendError
from gpupool.controller.backoff import Backoff
from gpupool.controller.clock import Clock
from gpupool.controller.execution import ExecutionService
from gpupool.controller.observer import NullObserver, Observer
from gpupool.controller.transitions import apply_status
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import ClusterConfig
from gpupool.state import jobs, queue
from gpupool.state.db import SessionFactory

log = logging.getLogger(__name__)


class BackendSync:
    def __init__(
        self,
        sessions: SessionFactory,
        execution: ExecutionService,
        clock: Clock,
        backoff: Backoff,
        wake: Callable[[], None],
        config: Callable[[], ClusterConfig] | None = None,
    ) -> None:
        self._sessions = sessions
        self._config = config  # the pools' node types, for the usage ledger
        self._execution = execution
        self._clock = clock
        self._backoff = backoff
        self._wake = wake
        # pool -> (poll in flight, stored attempt status per key when it started)
        self._polls: dict[str, tuple[Future[Mapping[str, BackendStatus]], dict[str, str]]] = {}
        self._cancels: dict[int, Future[Any]] = {}  # attempt id -> cancel or stop in flight
        self.observer: Observer = NullObserver()
        # (pool, node names) of the attempts found evicted since the controller last took
        # them: the provider took those nodes back (the autoscaler forgets them).
        self.evictions: list[tuple[str, tuple[str, ...]]] = []

    # -- polling ----------------------------------------------------------------------------

    def sync(self) -> bool:
        """Apply arrived poll results and start due polls; True if capacity was freed."""
        freed = self._collect_polls()
        with self._sessions() as session:
            rows = queue.handles_to_poll(session)
        by_pool: dict[str, list[JobHandle]] = defaultdict(list)
        stored: dict[str, dict[str, str]] = defaultdict(dict)
        for pool, raw, status in rows:
            handle = JobHandle.from_dict(raw)
            by_pool[pool].append(handle)
            stored[pool][handle.key] = status
        now = self._clock.monotonic()
        for pool, handles in sorted(by_pool.items()):
            if pool in self._polls or self._backoff.blocked(pool, now):
                continue
            future = self._execution.poll_async(pool, handles)
            self._polls[pool] = (future, stored[pool])
            future.add_done_callback(lambda _: self._wake())
        return freed

    def _collect_polls(self) -> bool:
        freed = False
        for pool, (future, stored) in list(self._polls.items()):
            if not future.done():
                continue
            del self._polls[pool]
            try:
                statuses = future.result()
            except BackendError as exc:
                log.warning("cannot poll pool %s: %s", pool, exc)
                self.observer.backend_error(pool, "poll", exc)
                if exc.retryable:
                    self._backoff.failed(pool, self._clock.monotonic(), str(exc))
                continue
            self._backoff.succeeded(pool)
            # Only news is written: a first RUNNING, or an end.
            news = {
                key: status
                for key, status in statuses.items()
                if status.state in FINAL_STATES
                or (status.state is RunState.RUNNING and stored.get(key) == JobStatus.ADMITTED)
            }
            if news:
                self._apply(news)
            for key, status in news.items():
                if status.state is RunState.LOST:
                    self._reap(pool, key)
            freed = freed or any(s.state in FINAL_STATES for s in news.values())
        return freed

    def _apply(self, statuses: Mapping[str, BackendStatus]) -> None:
        now = self._clock.now()
        config = None if self._config is None else self._config()
        evicted: list[tuple[str, tuple[str, ...]]] = []
        keys = {}
        for key in statuses:
            job_id, _, number = key.rpartition(".")
            keys[key] = (job_id, int(number))
        with self._sessions.begin() as session:
            active = jobs.active_attempts(session, list(keys.values()))
            for key, status in statuses.items():
                found = active.get(keys[key])
                if found is not None:
                    attempt = found[1]
                    apply_status(session, found[0], attempt, status, now, config)
                    if attempt.status == JobStatus.EVICTED:
                        nodes = tuple(str(p["node"]) for p in attempt.placements if "node" in p)
                        evicted.append((attempt.pool, nodes))
        for pool, nodes in evicted:  # committed: counted once
            log.warning("pool %s: the provider took back node(s) %s", pool, ", ".join(nodes))
            self.observer.evicted(pool)
        self.evictions.extend(evicted)

    def _reap(self, pool: str, key: str) -> None:
        """A lost attempt may have left its job running (its supervisor died): stop it, so
        the GPUs the scheduler hands out again are really free. Best effort."""
        job_id, _, number = key.rpartition(".")
        with self._sessions() as session:
            raw = queue.handle_of(session, job_id, int(number))
        if raw is not None:
            future = self._execution.cancel_async(JobHandle.from_dict(raw), 0.0)
            future.add_done_callback(lambda f: _log_failure(f, f"stopping lost attempt {key}"))

    # -- cancelling ---------------------------------------------------------------------------

    def send_cancels(self, grace_s: float) -> None:
        """Signal attempts whose job was cancelled or that were chosen as victims."""
        self._collect_cancels()
        with self._sessions() as session:
            targets = queue.cancels_due(session)
        now = self._clock.monotonic()
        for attempt_id, raw, pool in targets:
            if attempt_id in self._cancels or self._backoff.blocked(pool, now):
                continue
            future = self._execution.cancel_async(JobHandle.from_dict(raw), grace_s)
            self._cancels[attempt_id] = future
            future.add_done_callback(self._report_failure(pool, "cancel"))
            future.add_done_callback(lambda _: self._wake())
        self._stop_abandoned(now)

    def _stop_abandoned(self, now: float) -> None:
        """Look for, and stop, what runs under attempts given up on while their pool could
        not be reached (``Controller.dispatch``), once the pool answers again."""
        with self._sessions() as session:
            abandoned = queue.abandoned_to_stop(session)
        for attempt_id, job_id, number, pool in abandoned:
            if attempt_id in self._cancels or self._backoff.blocked(pool, now):
                continue
            if not self._backoff.health(pool).available:
                continue
            key = f"{job_id}.{number}"
            future = self._execution.stop_key_async(pool, key)
            self._cancels[attempt_id] = future
            future.add_done_callback(self._report_failure(pool, "cancel"))
            future.add_done_callback(lambda f, key=key: _log_stopped(f, key))

    def _report_failure(self, pool: str, operation: str) -> Callable[[Future[Any]], None]:
        """A done-callback telling the observer of a failed call (on the call's thread)."""

        def report(future: Future[Any]) -> None:
            error = None if future.cancelled() else future.exception()
            if error is not None:
                self.observer.backend_error(pool, operation, error)

        return report

    def _collect_cancels(self) -> None:
        for attempt_id, future in list(self._cancels.items()):
            if not future.done():
                continue
            del self._cancels[attempt_id]
            if _log_failure(future, f"cancel of attempt {attempt_id} (will retry)"):
                continue
            with self._sessions.begin() as session:
                queue.mark_cancel_sent(session, attempt_id)

    def wait_idle(self, timeout: float) -> None:
        """Block until the calls in flight are done (tests and shutdown)."""
        for future in [f for f, _ in self._polls.values()] + list(self._cancels.values()):
            try:
                future.exception(timeout=timeout)
            except TimeoutError:
                return


def _log_stopped(future: Future[Any], key: str) -> None:
    if not future.cancelled() and future.exception() is None and future.result():
        log.warning("stopped attempt %s, which ran although it had been given up on", key)


def _log_failure(future: Future[Any], what: str) -> bool:
    """Log a failed call; True when it failed."""
    exc = future.exception()
    if exc is None:
        return False
    log.warning("%s failed: %s", what, exc)
    return True
