"""The controller's side of the usage ledger (C1, ``state.usage``).

* An attempt's row is opened in the transaction that first records it running, and closed
  (accrued to its end, with its outcome) in the transaction that records its end
  (``transitions.apply_status``): the ledger moves with the status, never apart from it.
  An attempt that ended between two polls, never seen running, gets a row of no time when
  it succeeded or failed (it ran, for less than a poll), and none when it was cancelled,
  preempted or lost before anyone saw it start.
* :class:`Accrual` adds running attempts' time and the pools' capacity to the hourly
  rollups every ``accounting.accrual_interval_s``, on the leading controller only, in one
  transaction fenced like its other decisions, so a deposed leader accrues nothing. It runs
  at once in a new term, which is when a late takeover's gap is recorded and when running
  attempts without a row (started before the ledger was kept) get one from their start.

The gap threshold is ``accounting.gap_after_s``, by default three accrual intervals and
30 s: a leader that merely skipped an accrual (a slow tick, a short store outage) catches
up; one that was gone longer leaves a gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from gpupool.accounting.pricing import node_type_of
from gpupool.controller.clock import Clock
from gpupool.controller.leader import Leadership
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import ClusterConfig
from gpupool.state import usage
from gpupool.state.db import Session, SessionFactory
from gpupool.state.models import AttemptRow, JobRow

log = logging.getLogger(__name__)

GAP_SLACK_S = 30.0
# Ends that prove the attempt ran even if no poll saw it running (it exited between two).
_RAN = frozenset({JobStatus.SUCCEEDED.value, JobStatus.FAILED.value})


def gap_after(config: ClusterConfig) -> timedelta:
    """How old the capacity mark may be before the span since counts as a gap."""
    settings = config.accounting
    if settings.gap_after_s is not None:
        return timedelta(seconds=settings.gap_after_s)
    return timedelta(seconds=3 * settings.accrual_interval_s + GAP_SLACK_S)


def pool_gpus(
    config: ClusterConfig, sized: Mapping[str, int] | None = None
) -> list[usage.PoolGpus]:
    """Every pool's GPUs as the configuration has them now (nodes x GPUs per node); a pool the
    autoscaler sizes counts the nodes it has now (``sized``: up, coming up or draining, which
    are all paid for)."""
    sized = sized or {}
    return [
        usage.PoolGpus(
            pool=pool.name,
            gpu_type=pool.gpu_type,
            node_type=node_type_of(config, pool.name),
            gpus=sized.get(pool.name, pool.nodes) * pool.node.gpus,
        )
        for pool in config.pools
    ]


def attempt_started(
    session: Session, config: ClusterConfig | None, job: JobRow, attempt: AttemptRow, at: datetime
) -> None:
    """Open the attempt's ledger row at ``at`` (``config``: for its pool's node type)."""
    backend = (attempt.handle or {}).get("backend") or job.backend
    usage.open_attempt(
        session,
        attempt_id=attempt.id,
        job_id=job.id,
        job_name=job.name,
        team=job.team,
        user=job.user,
        gpu_type=attempt.gpu_type,
        pool=attempt.pool,
        backend=str(backend),
        priority_class=job.priority_class,
        node_type="dedicated" if config is None else node_type_of(config, attempt.pool),
        gpus=job.gpus * job.nodes,
        borrowed=attempt.borrowed,
        at=at,
    )


def attempt_ended(
    session: Session,
    config: ClusterConfig | None,
    job: JobRow,
    attempt: AttemptRow,
    at: datetime,
    was: str,
) -> None:
    """Close the attempt's row at ``at`` with its (final) status as outcome; ``was``: its
    status before, to tell an attempt that ran unseen from one that never started."""
    if was == JobStatus.ADMITTED.value and attempt.status not in _RAN:
        return
    if usage.close_attempt(session, attempt.id, at, attempt.status):
        return
    # No open row: it ran between two polls (nothing seen of it but its end), or it was
    # running before the ledger was kept (counted from its start, as it held its GPUs).
    began = at if was == JobStatus.ADMITTED.value else (attempt.started_at or at)
    attempt_started(session, config, job, attempt, began)
    usage.close_attempt(session, attempt.id, at, attempt.status)


class Accrual:
    """Accrues the ledger every ``accrual_interval_s`` of the controller's clock."""

    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        clock: Clock,
        leader: Leadership,
        sized: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self._sessions = sessions
        self._config = config
        # Nodes per autoscaled pool now (the autoscaler's): the capacity accrued for the
        # interval just ended is the pool's size at its end, as a fixed pool's is its nodes.
        self._sized = sized
        self._clock = clock
        self._leader = leader
        self._last = float("-inf")  # monotonic time of the last accrual
        self._checked = False  # whether this term looked for running attempts without a row

    def forget(self) -> None:
        """A new term: accrue at the next chance (records a late takeover's gap at once)."""
        self._last = float("-inf")
        self._checked = False

    def due(self) -> bool:
        interval = self._config().accounting.accrual_interval_s
        return self._clock.monotonic() - self._last >= interval

    def maybe_run(self) -> bool:
        """Accrue if an interval has passed since the last time; True if it did."""
        if not self.due():
            return False
        self.run()
        return True

    def run(self) -> usage.Gap | None:
        """Accrue now, in one transaction fenced by the lease; the gap recorded, if any. The
        first accrual of a term also opens rows for running attempts that have none (they
        started before the ledger was kept), from their start."""
        config = self._config()
        now = self._clock.now()
        with self._sessions.begin() as session:
            self._leader.fence(session)
            if not self._checked:
                for job, attempt in usage.running_without_row(session):
                    attempt_started(session, config, job, attempt, attempt.started_at or now)
            usage.accrue(session, now)
            gap = usage.accrue_capacity(
                session,
                now,
                pool_gpus(config, self._sized() if self._sized else None),
                gap_after(config),
            )
        self._last = self._clock.monotonic()
        self._checked = True
        if gap is not None:
            log.warning(
                "usage ledger: no controller accrued from %s to %s; reports show it as missing",
                gap.start.isoformat(timespec="seconds"),
                gap.end.isoformat(timespec="seconds"),
            )
        return gap
