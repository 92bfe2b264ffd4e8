"""The controller: one thread that schedules, dispatches, syncs and cancels.

Each tick (on a timer, or at once when :meth:`Controller.wake` is called):

1. sync      apply poll results that arrived; start polls of active attempts (``sync.py``)
2. cancel    deliver cancellations of cancelled jobs and preemption victims (``sync.py``);
             probe the pools that are due (``probes.py``) and step the autoscaled pools'
             nodes towards their targets (``autoscaler.py``: nodes that came up are planned
             with from this cycle on, draining ones no longer)
3. schedule  bring the queue state up to date from the jobs changed since its last read
             (``state.py``), build a snapshot, run the cycle on the teams whose inputs
             changed (``parking.py``), persist admissions, preemptions and changed reasons in
             one transaction (only when something changed, or every ``FULL_CYCLE_S``)
4. dispatch  submit every admitted attempt without a handle that is not already in flight
5. ledger    every ``accounting.accrual_interval_s``, add running attempts' time and the
             pools' capacity to the usage ledger (``accounting.py``)

The loop itself never waits on a backend: every backend call runs on the execution
service's threads and wakes the loop when it completes. A backend that is unreachable is
backed off per pool (``backoff.py``).

Crash safety (X3): an admission is persisted (attempt row, status ``admitted``) before it is
submitted, and backends are idempotent on the attempt key, so after a crash step 4 simply
submits again whatever has no handle: a run that had started is found, not duplicated.

Several controllers may run against one PostgreSQL store; only the one holding the lease
(``leader.py``) ticks, and the transactions that write its admissions and read what to
dispatch are fenced by the lease's epoch, so a deposed leader's late decisions are refused.

A store that cannot be reached (``state.db.store_outage``) pauses the loop: one warning,
then a tick every ``STORE_RETRY_FIRST_S`` doubling to ``STORE_RETRY_MAX_S`` until one goes
through, and one line when it resumes. Nothing is lost by the pause: every decision is a
transaction that either committed or did not, and a submission whose outcome could not be
written is submitted again (same key) once the store is back.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpupool.auth.posix import PosixId
from gpupool.backends.base import (
    ContainerSpec,
    JobHandle,
    JobSpec,
    Mount,
    PoolCapacity,
    PosixIdentity,
)
from gpupool.backends.errors import BackendUnavailable
from gpupool.controller.accounting import Accrual
from gpupool.controller.autoscaler import Autoscaler, managed
from gpupool.controller.backoff import Backoff
from gpupool.controller.budgets import BudgetWatch
from gpupool.controller.clock import Clock
from gpupool.controller.execution import ExecutionService, SubmitResult
from gpupool.controller.fairshare import HORIZON_HALF_LIVES, UsageInterval, decayed_usage
from gpupool.controller.leader import Leadership, LeaseLost, SoleLeader
from gpupool.controller.observer import CycleSeen, NullObserver, Observer
from gpupool.controller.parking import Parking
from gpupool.controller.probes import Probes
from gpupool.controller.snapshot import build_snapshot, policy_for
from gpupool.controller.state import QueueState
from gpupool.controller.sync import BackendSync
from gpupool.controller.transitions import abandon, finish_job
from gpupool.core.jobs import JobStatus
from gpupool.data.grants.base import GrantError
from gpupool.data.grants.issuer import GrantIssuer
from gpupool.scheduler import (
    Admission,
    CycleResult,
    Nomination,
    PendingJob,
    PendingReason,
    Preemption,
)
from gpupool.spec.models import ClusterConfig
from gpupool.state import changes, identities, jobs, queue
from gpupool.state.db import Session, SessionFactory, store_outage, write_conflict
from gpupool.state.group_commit import GroupCommit
from gpupool.state.models import AttemptRow, JobRow

log = logging.getLogger(__name__)

MIN_TICK_GAP_S = 0.05
MIN_URGENT_GAP_S = 0.01
STORM_WAKES = 2  # more wakes than this during a tick and its rest: the API is busy
FULL_CYCLE_S = 10.0
STORE_RETRY_FIRST_S = 0.5
STORE_RETRY_MAX_S = 5.0


@dataclass
class TickStats:
    admitted: int = 0
    pending: int = 0
    cycle_ms: float = 0.0


class Controller:
    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        execution: ExecutionService,
        clock: Clock,
        grants: GrantIssuer | None = None,
        leader: Leadership | None = None,
    ) -> None:
        self._sessions = sessions
        self._grants = grants
        # Decides only while it leads; every decision is written under its fence (leader.py).
        self.leader: Leadership = leader or SoleLeader()
        self._epoch: int | None = None  # the term this controller's memory belongs to
        self._config = config
        self._execution = execution
        self._clock = clock
        self._inflight: set[int] = set()  # attempt ids whose submit is running
        self._recorded: set[int] = set()  # ... whose submit ended and was written to the store
        self._lock = threading.Lock()
        self._records = GroupCommit(sessions)  # what backends answered to submissions
        self._wake = threading.Event()
        self._urgent = threading.Event()  # a backend answered: end the rest between ticks
        self._wakes = 0  # other wakes since the last tick (submits, cancels)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last = TickStats()
        # Per queued job, the reasons last written: as the scheduler gave them, and as stored.
        self._reasons: dict[str, tuple[tuple[PendingReason, ...], list[dict[str, str]]]] = {}
        # The queue and the running jobs, read incrementally; teams whose inputs did not
        # change are not handed to the cycle.
        self.queue = QueueState()
        self._parking = Parking()
        # Preemptions still to take effect: the room their victims free is owed to their
        # preemptors (the last cycle's, handed to the next one; lost on a restart, which costs
        # a waiting preemptor at most one more preemption).
        self._nominations: tuple[Nomination, ...] = ()
        # The last cycle as it ran (never changed once made; None: none this term).
        self.last_cycle: CycleSeen | None = None
        self._dirty = True
        self._last_full = float("-inf")
        self._last_prune = float("-inf")
        self._history: tuple[float, dict[str, float]] | None = None
        self.backoff = Backoff()
        self.store_lost_at: float | None = None  # monotonic; set while the store is away
        self._store_retry_s = STORE_RETRY_FIRST_S
        # Each pool's backend asked at start and every PROBE_EVERY_S (probes.py).
        self.probes = Probes(self.backoff, self._start_probe, lambda: self.wake(reschedule=False))
        self._sync = BackendSync(
            sessions,
            execution,
            clock,
            self.backoff,
            lambda: self.wake(reschedule=False, urgent=True),
            config,
        )
        # The nodes of the pools the controller sizes itself (autoscaler.py).
        self.autoscaler = Autoscaler()
        self.accrual = Accrual(
            sessions, config, clock, self.leader, lambda: self.autoscaler.node_counts(config())
        )
        # Used-up budgets the cycle enforces, evaluated every few seconds (budgets.py).
        self.budgets = BudgetWatch(sessions, clock, lambda session: self.leader.fence(session))
        self.observe(NullObserver())

    def observe(self, observer: Observer) -> None:
        """Tell ``observer`` of steps, cycles and backend failures from now on (metrics)."""
        self.observer = self._sync.observer = observer

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.leader.start(self.wake)
        self._thread = threading.Thread(target=self._run, name="gpupool-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._urgent.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.leader.stop()

    def wake(self, reschedule: bool = True, urgent: bool = False) -> None:
        """Run a tick soon; ``reschedule``: something changed that the scheduler must see
        (a submit, a cancel, freed capacity). Without it the tick only syncs and dispatches.
        ``urgent``: a backend answered (a poll that may have freed GPUs, a submission to
        record): the tick runs after ``MIN_URGENT_GAP_S`` instead of the rest after a long
        tick, so freed GPUs are given out again at once."""
        if reschedule:
            self._dirty = True
        if urgent:
            self._urgent.set()
        else:
            self._wakes += 1  # not locked: a lost count only shortens one rest
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock.monotonic()
            try:
                self.tick()
            except LeaseLost as exc:  # deposed: stop deciding, stand by for the lease
                self.leader.deposed(str(exc))
            except Exception as exc:  # keep serving: one bad tick must not stop scheduling
                if write_conflict(exc) or write_conflict(exc.__cause__ or exc):
                    # A deadlock with a concurrent write: the database undid this tick's
                    # transaction, nothing else. The next tick decides again from the store.
                    log.info("a controller tick met a concurrent write and runs again")
                    self._forget_cycles()
                    self._stop.wait(MIN_TICK_GAP_S)
                    continue
                outage = store_outage(exc)
                if outage is None:
                    log.exception("controller tick failed")
                else:
                    self._forget_cycles()
                    self._stop.wait(self._store_lost(outage.message))
                    continue
            else:
                self._store_back()
            # Wakes (one per submit) are coalesced: under a burst the loop waits at least
            # MIN_TICK_GAP_S, and at least twice as long as its last tick took, so it never
            # takes more than about a third of the process (and its GIL) from the API. The
            # time spent idle waiting for a wake counts towards that gap. A backend's answer
            # cuts the rest short: it is what turns freed GPUs into started jobs.
            took = self._clock.monotonic() - started
            self._wake.wait(self._config().scheduler.cycle_interval_s)
            self._wake.clear()
            # One submit (or cancel) alone is no storm: it is scheduled after the short gap.
            storm, self._wakes = self._wakes > STORM_WAKES, 0
            rest = max(MIN_TICK_GAP_S, 3 * took if storm else 0) - (
                self._clock.monotonic() - started
            )
            if rest > 0 and not self._urgent.wait(rest):
                continue
            rest = MIN_URGENT_GAP_S - (self._clock.monotonic() - started)
            if rest > 0:
                self._stop.wait(rest)
            self._urgent.clear()

    def _store_lost(self, why: str) -> float:
        """Pause: say so once per outage; how long to wait before the next try."""
        now = self._clock.monotonic()
        if self.store_lost_at is None:
            self.store_lost_at = now
            self._store_retry_s = STORE_RETRY_FIRST_S
            log.warning(
                "controller paused: %s; retrying every %g s up to %g s",
                why,
                STORE_RETRY_FIRST_S,
                STORE_RETRY_MAX_S,
            )
        wait = self._store_retry_s
        self._store_retry_s = min(2 * self._store_retry_s, STORE_RETRY_MAX_S)
        return wait

    def _store_back(self) -> None:
        """A tick went through: if the loop was paused, resume. A standby's tick touches no
        store, so it does not count (the lease elector reports the store itself)."""
        if self.store_lost_at is None or self._epoch is None:
            return
        paused = self._clock.monotonic() - self.store_lost_at
        self.store_lost_at = None
        self._dirty = True  # submits and cancels may have come in meanwhile
        log.info("controller resumed: the store answers again after %.1f s", paused)

    # -- the tick -------------------------------------------------------------------------

    def tick(self) -> TickStats:
        """One pass. Scheduling is skipped while nothing changed, except for a full cycle
        every ``FULL_CYCLE_S`` (so ``why`` stays fresh): an idle queue costs nothing."""
        if not self._leading():
            return self.last  # a standby: the leader syncs, schedules and dispatches
        began = self._clock.monotonic()
        self.sync()
        self.send_cancels()
        self.refresh_capacity()
        self.autoscale()
        if self.budgets.refresh(self._config()):
            self._dirty = True  # a team's budget began or stopped holding it back
        now = self._clock.monotonic()
        if self._dirty or now - self._last_full >= FULL_CYCLE_S or self._store_changed():
            self._dirty = False  # before the cycle: a wake during it schedules again
            self._last_full = now
            self.last = self.schedule()
        self.dispatch()
        self.accrual.maybe_run()
        self.observer.step(self._clock.monotonic() - began)
        return self.last

    def _leading(self) -> bool:
        """Whether this controller leads now; at the start of each term, forget what was kept
        between cycles (the last leader may have decided since): the store is re-read."""
        self.leader.poll()
        epoch = self.leader.epoch if self.leader.is_leader() else None
        if epoch != self._epoch:
            self._epoch = epoch
            self._forget_cycles()  # the store is read whole at the term's first cycle
            self.last_cycle = None
            self._history = None
            self.budgets.forget()
            self.accrual.forget()
            self.autoscaler.forget()
            with self._lock:
                self._recorded.clear()
        return epoch is not None

    def _forget_cycles(self) -> None:
        """Drop what was kept between cycles (the queue state, parked teams, the pending
        reasons written): the next cycle reads the store whole. After a tick whose
        transaction did not commit, what it kept may claim decisions the store never took."""
        self._reasons = {}
        self.queue.forget()
        self._parking = Parking()
        self._nominations = ()
        self._dirty = True

    def _store_changed(self) -> bool:
        """Whether jobs changed in the store since the queue state's last read (a submit
        through an API replica in another process, which cannot wake this one)."""
        if not self.queue.loaded:
            return True
        with self._sessions() as session:
            return changes.current(session) != self.queue.seq

    def sync(self) -> None:
        if self._sync.sync():
            self._dirty = True  # capacity was freed or a job went back to the queue

    def send_cancels(self) -> None:
        self._sync.send_cancels(self._config().scheduler.grace_period_s)

    @property
    def capacity(self) -> dict[str, PoolCapacity]:
        """What the pools' probes last said of their capacity (pools that report it, and
        pools that do not answer: no usable node)."""
        return dict(self.probes.capacity)

    def refresh_capacity(self) -> None:
        """Probe the pools that are due (``probes.py``); a change makes the scheduler look
        again."""
        config = self._config()
        if self.probes.refresh((p.name for p in config.pools), self._clock.monotonic()):
            self._dirty = True

    def autoscale(self) -> None:
        """Step the autoscaled pools' nodes towards their targets (``autoscaler.py``), from the
        active attempts and the queued jobs' last reasons; new nodes that came up, or nodes
        drained, make the scheduler look again. Nodes whose attempts were evicted are gone."""
        evictions = list(self._sync.evictions)
        self._sync.evictions.clear()
        for pool, nodes in evictions:
            self.autoscaler.evicted(pool, nodes)
        config = self._config()
        if not self.queue.loaded or not any(managed(p) for p in config.pools):
            return
        if evictions:  # the evicted attempts must not hold their nodes in what is read below
            with self._sessions() as session:
                self.queue.refresh(session)

        def waiting() -> list[tuple[PendingJob, tuple[PendingReason, ...]]]:
            return [
                (job, reasons)
                for jobs_of_team in self.queue.groups().values()
                for job in jobs_of_team
                if (reasons := self._reasons_of(job.id))
            ]

        now = self._clock.monotonic()
        if self.autoscaler.step(config, self.queue.running(), waiting, now):
            self._dirty = True

    def _start_probe(self, pool: str) -> Future[PoolCapacity | None]:
        found = next((p for p in self._config().pools if p.name == pool), None)
        return self._execution.probe_async(pool, found.backend if found else "")

    def wait_backend_calls(self, timeout: float = 10.0) -> None:
        """Let polls and cancels in flight finish (for tests that step the loop by hand)."""
        self._sync.wait_idle(timeout)

    def schedule(self) -> TickStats:
        config = self._config()
        now = self._clock.now()
        with self._sessions() as session:
            self.queue.refresh(session)
        snapshot = build_snapshot(
            config,
            now.timestamp(),
            (),
            self.queue.running(),
            self._usage_history(config, now),
            self.probes.capacity,
            self.autoscaler.ready_nodes(config),
        )
        if self._nominations:
            snapshot = dataclasses.replace(snapshot, nominations=self._nominations)
        if self.budgets.blocks:
            snapshot = dataclasses.replace(snapshot, budgets=self.budgets.blocks)
        started = self._clock.monotonic()
        groups = self.queue.groups()
        result = self._parking.cycle(snapshot, policy_for(config), groups)
        self._nominations = result.nominations
        cycle_ms = (self._clock.monotonic() - started) * 1000
        self._persist(result, now)
        seen = CycleSeen(
            snapshot.now,
            cycle_ms / 1000,
            snapshot,
            groups,
            result,
            self._reasons_of,
            self.queue.started,
            self.queue.pending_view,
            frozenset(self._parking.teams),
        )
        self.last_cycle = seen  # what start forecasts begin from (server.services.forecasts)
        self.observer.cycle(seen)
        log.debug(
            "cycle: %d queued (%d teams parked), %d active, %d admitted in %.1f ms",
            len(self.queue),
            len(self._parking.teams),
            len(snapshot.running),
            len(result.admissions),
            cycle_ms,
        )
        waiting = len(result.pending) + sum(len(t.jobs) for t in self._parking.teams.values())
        return TickStats(len(result.admissions), waiting, cycle_ms)

    def _persist(self, result: CycleResult, now: datetime) -> None:
        """Admissions and changed pending reasons, in one transaction.

        ``self._reasons`` remembers what was last written per queued job, so a job that
        keeps waiting for the same reasons costs no write per cycle; jobs of parked teams are
        not in ``result.pending`` (their reasons did not change) and cost nothing at all.
        """
        written = self._reasons
        # Per reasons tuple of this cycle (jobs waiting alike share one): its stored form and
        # the jobs to write it on, so that a long queue's reasons are a few statements.
        stored: dict[int, tuple[tuple[PendingReason, ...], list[dict[str, str]], list[str]]] = {}
        with self._sessions.begin() as session:
            self.leader.fence(session)  # a deposed leader's decisions are refused
            for admission in result.admissions:
                self._admit(session, admission, now)
            for preemption in result.preemptions:
                self._mark_victim(session, preemption, now)
            for job_id, reasons in result.pending.items():
                known = written.get(job_id)
                if known is not None and known[0] == reasons:
                    continue
                entry = stored.get(id(reasons))
                if entry is None:
                    new = [
                        {"gpu_type": r.gpu_type, "code": r.code.value, "message": r.message}
                        for r in reasons
                    ]
                    entry = stored[id(reasons)] = (reasons, new, [])
                written[job_id] = (reasons, entry[1])
                if known is None or known[1] != entry[1]:
                    entry[2].append(job_id)
            queue.write_reasons(session, [(new, ids) for _, new, ids in stored.values()], now)
            queue.record_cycle(session, now)
            if self.queue.seq and self._clock.monotonic() - self._last_prune >= FULL_CYCLE_S:
                changes.prune(session, self.queue.seq)  # read: not needed again
                self._last_prune = self._clock.monotonic()
        for admission in result.admissions:
            written.pop(admission.job_id, None)
        if len(written) > 2 * len(self.queue) + 1000:  # jobs that left the queue meanwhile
            queued = self.queue.queued_ids()
            self._reasons = {k: v for k, v in written.items() if k in queued}

    def _reasons_of(self, job_id: str) -> tuple[PendingReason, ...] | None:
        written = self._reasons.get(job_id)
        return None if written is None else written[0]

    def _mark_victim(self, session: Session, preemption: Preemption, now: datetime) -> None:
        """Record the decision; ``send_cancels`` signals the victim, and when it has ended
        the job is requeued as a new attempt that keeps its submit time."""
        queue.mark_victim(
            session, preemption.job_id, preemption.preemptor_id, preemption.reason, now
        )

    def _usage_history(self, config: ClusterConfig, now: datetime) -> dict[str, float]:
        """Decayed GPU-seconds per team, refreshed at most every ``FULL_CYCLE_S``."""
        stamp = self._clock.monotonic()
        if self._history is not None and stamp - self._history[0] < FULL_CYCLE_S:
            return self._history[1]
        half_life = config.scheduler.fair_share_half_life_s
        horizon = now - timedelta(seconds=half_life * HORIZON_HALF_LIVES)
        with self._sessions() as session:
            rows = queue.usage_since(session, horizon)
        intervals = [
            UsageInterval(
                team=team,
                gpus=gpus * nodes,
                start=started.timestamp(),
                end=None if finished is None else finished.timestamp(),
            )
            for team, gpus, nodes, started, finished in rows
        ]
        usage = decayed_usage(intervals, now.timestamp(), half_life)
        self._history = (stamp, usage)
        return usage

    def _admit(self, session: Session, admission: Admission, now: datetime) -> None:
        # Conditional on the row being unchanged since the snapshot: a cancel that raced
        # with this cycle wins and the admission is dropped.
        attempt = self.queue.attempt_of(admission.job_id)
        if attempt is None:
            return
        queue.admit(
            session,
            admission.job_id,
            attempt,
            pool=admission.pool,
            gpu_type=admission.gpu_type,
            placements=[{"node": p.node, "devices": list(p.devices)} for p in admission.placements],
            borrowed=admission.borrowed,
            now=now,
        )

    # -- dispatch -------------------------------------------------------------------------

    def dispatch(self) -> None:
        config = self._config()
        with self._sessions() as session:
            rows = queue.to_dispatch(session)
            if rows:  # only the leader submits; a tick with nothing to submit asks nothing more
                self.leader.fence(session)  # a takeover since the read makes it fail
            # Users not under users: run as the identity they submitted with (auth.posix).
            stored = {
                job.user: identities.lookup(session, job.user)
                for job, _ in rows
                if job.user not in config.users
            }
        now = self._clock.monotonic()
        with self._lock:
            # A submission recorded after the rows above were read still shows as without a
            # handle: remember it until the store stops listing it, or it is submitted twice.
            self._recorded &= {attempt.id for _, attempt in rows}
        rows = self._abandon_unreachable(rows, config, now)
        for job, attempt in rows:
            if self.backoff.blocked(attempt.pool, now):
                continue
            with self._lock:
                if attempt.id in self._inflight or attempt.id in self._recorded:
                    continue
                self._inflight.add(attempt.id)
            try:
                spec = self._with_grant(
                    job_spec(job, attempt, config, stored.get(job.user)), config
                )
            except GrantError as exc:
                # Like an unreachable backend: the attempt stays admitted and is tried again
                # after the pool's backoff. The message names the cause, never a secret.
                log.warning("cannot mint the data grant of %s.%d: %s", job.id, attempt.number, exc)
                self.backoff.failed(attempt.pool, now, f"data grant: {exc}")
                self.observer.backend_error(attempt.pool, "dispatch", exc)
                with self._lock:
                    self._inflight.discard(attempt.id)
                continue
            self._execution.submit(spec, lambda s, r, aid=attempt.id: self._submitted(aid, s, r))

    def _abandon_unreachable(
        self, rows: list[tuple[JobRow, AttemptRow]], config: ClusterConfig, now: float
    ) -> list[tuple[JobRow, AttemptRow]]:
        """Send back to the queue the admitted attempts whose pool has not answered for
        ``scheduler.requeue_unreachable_after_s``, freeing their quota; the rest, to submit."""
        after = config.scheduler.requeue_unreachable_after_s
        if after is None:
            return rows
        wall = self._clock.now()
        stale: dict[int, str] = {}
        for _, attempt in rows:
            health = self.backoff.health(attempt.pool)
            if health.available or health.down_since is None or now - health.down_since < after:
                continue
            if (wall - attempt.admitted_at).total_seconds() < after:
                continue
            with self._lock:
                if attempt.id in self._inflight or attempt.id in self._recorded:
                    continue
            stale[attempt.id] = (
                f"abandoned: the backend of pool {attempt.pool} has not answered for "
                f"{now - health.down_since:.0f} s ({health.message or 'no reason given'})"
            )
        if not stale:
            return rows
        with self._sessions.begin() as session:
            self.leader.fence(session)  # a deposed leader's decisions are refused
            for job_id, attempt_id in [(j.id, a.id) for j, a in rows if a.id in stale]:
                attempt = jobs.attempt(session, attempt_id)
                job = jobs.get(session, job_id)
                if attempt is None or job is None or attempt.status != JobStatus.ADMITTED.value:
                    continue
                if attempt.handle is not None:
                    continue
                log.warning(
                    "%s.%d %s; it goes back to the queue", job.id, attempt.number, stale[attempt_id]
                )
                abandon(session, job, attempt, wall, stale[attempt_id], config)
        self.wake(reschedule=True)
        return [(job, attempt) for job, attempt in rows if attempt.id not in stale]

    def _with_grant(self, spec: JobSpec, config: ClusterConfig) -> JobSpec:
        """Mint the attempt's data grant when its pool uses grants (docs/architecture.md §8)."""
        pool = next((p for p in config.pools if p.name == spec.pool), None)
        if pool is None or pool.data_access != "grant" or self._grants is None:
            return spec
        grant = self._grants.issue(
            config,
            team=spec.team,
            user=spec.user,
            job_id=spec.job_id,
            attempt=spec.attempt,
            inputs=spec.inputs,
            outputs=spec.outputs,
            max_runtime_s=spec.max_runtime_s,
        )
        return dataclasses.replace(spec, grant=grant)

    def _submitted(self, attempt_id: int, spec: JobSpec, result: SubmitResult) -> None:
        recorded = False
        if not isinstance(result, JobHandle):
            self.observer.backend_error(spec.pool, "dispatch", result)
        try:
            self._record_submission(attempt_id, spec, result)
            # An unavailable backend leaves the attempt to be submitted again after backoff.
            recorded = not isinstance(result, BackendUnavailable)
        except Exception as exc:
            if store_outage(exc) is None:
                log.exception("recording the submission of %s failed", spec.key)
            else:  # not recorded: dispatched again (same key, found not duplicated) later
                log.warning("cannot record the submission of %s now: the store is away", spec.key)
        finally:
            with self._lock:
                if recorded:
                    self._recorded.add(attempt_id)
                self._inflight.discard(attempt_id)
            # Sync soon to see it running; a failed submit requeued the job: reschedule.
            self.wake(reschedule=not isinstance(result, JobHandle), urgent=True)

    def _record_submission(self, attempt_id: int, spec: JobSpec, result: SubmitResult) -> None:
        """Write what the backend answered. Submissions that end together (a burst, a drain)
        are written in one transaction (``GroupCommit``), not one each."""
        now = self._clock.now()

        def write(session: Session) -> None:
            attempt = jobs.attempt(session, attempt_id)
            job = jobs.get(session, spec.job_id)
            if attempt is None or job is None or attempt.status != JobStatus.ADMITTED.value:
                return
            if isinstance(result, JobHandle):
                attempt.handle = result.to_dict()
                if spec.grant is not None:  # its scope and expiry only, never the URLs
                    attempt.handle = {**attempt.handle, "grant": spec.grant.summary()}
                jobs.add_event(
                    session, job.id, now, "dispatched", f"{result.backend} {result.provider_id}"
                )
                return
            if isinstance(result, BackendUnavailable):
                # Keep the attempt admitted: it is submitted again, with the same key, when
                # the pool's backoff has passed. Nothing is lost and nothing runs twice.
                message = f"backend unavailable, will retry: {result}"
                if attempt.message != message:
                    attempt.message = message
                    jobs.add_event(session, job.id, now, "dispatch_retry", message)
                return
            attempt.finished_at = now
            attempt.message = str(result)
            attempt.status = JobStatus.FAILED.value
            finish_job(session, job, JobStatus.FAILED, now, None, f"rejected by backend: {result}")

        if isinstance(result, JobHandle):
            self.backoff.succeeded(spec.pool)
        elif isinstance(result, BackendUnavailable):
            self.backoff.failed(spec.pool, self._clock.monotonic(), str(result))
        self._records.run(write)


def posix_identity(
    config: ClusterConfig, user_name: str, team_name: str, stored: PosixId | None = None
) -> PosixIdentity | None:
    """The user's uid, gid and groups, plus the gid of the team the job runs for (so that the
    job can use the team's ``shared/``; not the gids of the user's other teams). ``users:``
    of the configuration first, else ``stored``: the identity the user last submitted with,
    from the directory file or their token (``auth.posix``)."""
    user = config.users.get(user_name)
    if user is not None:
        uid, gid, groups = user.uid, user.gid, list(dict.fromkeys(user.groups))
    elif stored is not None:
        uid, gid, groups = stored.uid, stored.gid, list(stored.groups)
    else:
        return None
    team = config.teams.get(team_name)
    if team is not None and team.gid is not None and team.gid not in groups:
        groups.append(team.gid)
    return PosixIdentity(uid, gid, tuple(groups))


def job_spec(
    job: JobRow, attempt: AttemptRow, config: ClusterConfig, stored: PosixId | None = None
) -> JobSpec:
    return JobSpec(
        job_id=job.id,
        attempt=attempt.number,
        team=job.team,
        user=job.user,
        command=tuple(job.command),
        pool=attempt.pool,
        gpu_type=attempt.gpu_type,
        gpus_per_node=job.gpus,
        nodes=job.nodes,
        cpus=job.cpus,
        memory_gb=job.memory_gb,
        env=dict(job.env),
        max_runtime_s=job.max_runtime_s,
        posix=posix_identity(config, job.user, job.team, stored),
        devices=tuple(tuple(int(d) for d in p["devices"]) for p in attempt.placements),
        inputs=tuple(job.inputs),
        outputs=tuple(job.outputs),
        array_id=job.array_id,
        array_index=job.array_index,
        checkpoint_interval_s=job.checkpoint_interval_s,
        image=job.container["image"] if job.container else None,
        container=container_spec(job.container),
        node_names=tuple(str(p["node"]) for p in attempt.placements if "node" in p),
    )


def container_spec(record: dict[str, Any] | None) -> ContainerSpec | None:
    """The backend's view of a job's stored container record (``JobRow.container``)."""
    if not record:
        return None
    return ContainerSpec(
        pull_secret=record.get("pull_secret"),
        mounts=tuple(
            Mount(str(m["source"]), str(m["target"]), bool(m.get("read_only")))
            for m in record.get("mounts") or ()
        ),
        shm_size_gb=record.get("shm_size_gb"),
        read_only_root=bool(record.get("read_only_root")),
    )
