"""One policy over one trace: the production scheduler and the simulated backend on a virtual
clock (P5, docs/code-style.md §13).

The loop is the controller's tick with the clock and the store taken out:

1. jobs of the trace arrive at their submit times (a submit makes the scheduler look again);
2. attempts end when the simulated backend says so (``fake`` runs end at start + duration);
3. a cycle runs when something changed, as the controller's loop does (it is woken by every
   submit and every end, and leaves at least ``MIN_TICK_GAP_S`` between ticks): the snapshot
   is built as the controller builds it (node views kept current by ``PoolState``, teams by
   ``team_views``, decayed usage by ``UsageMeter``), each team's queue is kept in the
   controller's ``TeamQueue``, and the decisions come from the controller's ``Parking`` (which
   hands ``run_cycle`` only the teams whose inputs changed) with ``policy_for`` of the
   policy's configuration;
4. admissions are submitted to the simulated backend; preemption victims are cancelled
   through it, end at once, and go back to the queue as a new attempt that keeps its submit
   time. As in the real system the new attempt runs the job's command again from the start:
   the work the victim did is lost, unless the job declared ``checkpoint_interval_s``, in
   which case it resumes from its last checkpoint (:func:`checkpointed`). Each cycle's
   nominations are handed to the next, as the controller does, so the next cycle decides
   each preemptor first, on the room its victims freed;
5. autoscaled pools (``autoscale.mode: autoscale``) are sized by the controller's
   ``Autoscaler`` around each cycle, from the running attempts and the waiting jobs' last
   reasons: a node asked for comes up ``provision_delay_s`` later (a moment of its own), an
   idle one goes after ``idle_timeout_s`` (another), and each pool's node count over time is
   kept for the bill (node-hours x GPUs per node x the pool's dedicated or spot price);
6. spot nodes are taken back at random moments (``sim/spot.py``, off unless a rate is given):
   the attempts on them go back to the queue as evicted, losing the work since their last
   checkpoint, and the node is replaced (``autoscaler``) or renewed (a fixed pool).

The one thing the controller has that the simulator does not is the database: the
controller's SQL reads and writes would make a replay of months of a cluster take hours, and
they hold no decision (what the controller's ``QueueState`` reads from the store, the
simulator feeds to the same queues directly). Virtual time jumps from event to event, and
two moments that no event marks get a cycle of their own, as the controller's periodic cycle
would see them: a waiting job crossing ``starvation_after_s`` (Q8: it may now hold room), and a
running job that a preemption search left out for its minimum run time reaching it
(``CycleResult.protected_until``: the preemptor it kept waiting may now take it).
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpupool.accounting.pricing import price_per_gpu_hour
from gpupool.backends.base import AdapterContext, JobHandle, JobSpec, RunState
from gpupool.backends.fake import DURATION_ENV, FakeBackend, FakeCluster
from gpupool.controller.autoscaler import Autoscaler
from gpupool.controller.fairshare import UsageMeter
from gpupool.controller.loop import MIN_TICK_GAP_S
from gpupool.controller.parking import Parking
from gpupool.controller.snapshot import PoolState, node_name, policy_for, team_views
from gpupool.controller.state import TeamQueue
from gpupool.scheduler import (
    Nomination,
    PendingJob,
    PendingReason,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.sim.budgets import DEFAULT_ORIGIN, BudgetRun, SimBudgets, Use
from gpupool.sim.cluster import PolicySetup, Shape, job_shape, largest_node, never_runs
from gpupool.sim.spot import SpotModel
from gpupool.sim.trace import TraceJob
from gpupool.spec.models import Pool

Progress = Callable[[int], None]  # called with the number of jobs that reached an end


@dataclass(slots=True)
class JobRecord:
    """One trace job under one policy: what happened to it."""

    trace: TraceJob
    team: str  # the team it was scheduled as
    shape: Shape
    priority: int
    pending: PendingJob | None = None
    saved_s: float = 0.0  # work kept by the last checkpoint of an attempt (0: start over)
    lost_gpu_s: float = 0.0  # GPU-seconds preempted or evicted attempts ran beyond checkpoints
    attempts: int = 0
    first_start: float | None = None
    end: float | None = None
    pool: str = ""
    unschedulable: str = ""
    preempted: int = 0
    evicted: int = 0  # attempts ended by the provider taking their spot node back
    # the current attempt
    handle: JobHandle | None = None
    running: RunningJob | None = None
    started: float = 0.0
    borrowed: int = 0


@dataclass(slots=True)
class Outcome:
    policy: str
    jobs: list[JobRecord]
    total_gpus: int
    nominal: dict[str, int]  # per trace team, of the configuration as written
    busy: list[tuple[float, int]] = field(default_factory=list)  # (time, GPUs held) changes
    preemptions: int = 0
    evictions: int = 0
    borrowed_gpu_s: float = 0.0
    quota_violation_s: dict[str, float] = field(default_factory=dict)
    cycles: int = 0
    events: int = 0
    wall_s: float = 0.0
    # Accounting, as the ledger keeps it: GPU-seconds per trace team within its nominal and
    # borrowed, GPU-seconds used per pool, and each pool's GPUs and price per GPU-hour.
    team_gpu_s: dict[str, list[float]] = field(default_factory=dict)  # team -> [within, borrowed]
    team_cost: dict[str, float] = field(default_factory=dict)
    pool_used_gpu_s: dict[str, float] = field(default_factory=dict)
    pool_gpus: dict[str, int] = field(default_factory=dict)
    pool_price: dict[str, float] = field(default_factory=dict)
    currency: str = "USD"
    budgets: list[BudgetRun] = field(default_factory=list)  # the configuration's, enforced
    forecast: dict[str, Any] | None = None  # with --forecast-sample: sim.accuracy's block
    forecast_rows: list[dict[str, Any]] = field(default_factory=list)  # ... and its jobs
    # Autoscaled pools: (time, nodes paid for) at each change. Every pool: its GPUs per node
    # and its configured nodes (a fixed pool's size, an autoscaled pool's most).
    pool_nodes: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    node_gpus: dict[str, int] = field(default_factory=dict)
    pool_size: dict[str, int] = field(default_factory=dict)


class Simulation:
    def __init__(
        self,
        setup: PolicySetup,
        trace: list[TraceJob],
        nominal: dict[str, int],
        origin: datetime = DEFAULT_ORIGIN,
        spot_evictions_per_node_day: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.setup = setup
        self.config = config = setup.config
        self.policy = policy_for(config)
        self.interval = config.scheduler.cycle_interval_s
        self.now = 0.0
        self.cluster = FakeCluster(lambda: self.now)
        self.backends = {
            pool.name: FakeBackend(
                AdapterContext(pool.name, pool.gpu_type, nodes=pool.nodes),
                cluster=self.cluster,
            )
            for pool in config.pools
        }
        self.meter = UsageMeter(config.scheduler.fair_share_half_life_s)
        self.nominations: tuple[Nomination, ...] = ()  # handed from cycle to cycle, as there
        self.pools = PoolState(config, gang=lambda _: True)  # the fake backend runs gangs
        # The teams' views without usage: the configuration does not change during a run, so
        # only the decayed usage is put in at each cycle (team_views is the controller's).
        self._teams = team_views(config, {})
        self.parking = Parking()
        self.queues: dict[str, TeamQueue] = {}  # the waiting jobs, team by team
        self._running: tuple[RunningJob, ...] | None = ()  # None: changed since last built
        # (team, gpu type) -> [GPUs, attempts] of the running attempts, kept as they start and
        # end: the snapshot is handed the usage (what ``held_gpus`` would sum over them) and
        # the cycle makes no pass over every running job for it.
        self._held: dict[tuple[str, str], list[int]] = {}
        # When each waiting job started to wait, sorted: the next to starve is found by bisect.
        self._waits: list[tuple[float, str]] = []
        # When the first job a cycle's preemption search left out as too young may be preempted.
        self._protected_until = math.inf
        self.outcome = Outcome(
            setup.name,
            [],
            sum(p.nodes * p.node.gpus for p in config.pools),
            nominal,
        )
        # Autoscaled pools start with no node: the first cycle asks for their floor.
        self.autoscaler = Autoscaler(sizes=_autoscaled, gang=lambda _: True)
        self._scaled = [pool.name for pool in config.pools if _autoscaled(pool)]
        self._reasons: dict[str, tuple[PendingReason, ...]] = {}  # of waiting jobs, last cycle
        self._stepped: tuple[RunningJob, ...] | None = None  # the running attempts last stepped
        self._last_step = -math.inf
        for name in self._scaled:
            self.pools.set_nodes(name, ())
            self.outcome.pool_nodes[name] = []
        # Spot nodes' evictions: a fixed pool's nodes live from the start.
        self.spot = SpotModel(spot_evictions_per_node_day, seed)
        self._spot_pools = {p.name for p in config.pools if p.autoscale.node_type == "spot"}
        for pool in config.pools:
            if pool.name in self._spot_pools and pool.name not in self._scaled:
                self.spot.track(pool.name, [node_name(pool.name, i) for i in range(pool.nodes)], 0)
        for pool in config.pools:
            self.outcome.node_gpus[pool.name] = pool.node.gpus
            self.outcome.pool_size[pool.name] = pool.nodes
            self.outcome.pool_gpus[pool.name] = pool.nodes * pool.node.gpus
            price = price_per_gpu_hour(
                config,
                gpu_type=pool.gpu_type,
                pool=pool.name,
                node_type=pool.autoscale.node_type,
            )
            self.outcome.pool_price[pool.name] = price or 0.0
        self.outcome.currency = config.accounting.currency
        # Budgets are enforced as the controller enforces them (sim/budgets.py).
        self.budgets = SimBudgets(config, origin)
        self._node_type = {pool.name: pool.autoscale.node_type for pool in config.pools}
        self.records = [self._record(job) for job in trace]
        self.outcome.jobs = self.records
        self.by_id = {r.trace.job_id: r for r in self.records}
        self.pending: dict[str, JobRecord] = {}
        self.running: dict[str, JobRecord] = {}
        self.ends: list[tuple[float, int, str, int]] = []  # (time, seq, job id, attempt)
        self._seq = 0
        # Finished attempts as (team, gpu type, GPUs, seconds run): the past jobs a forecast
        # made during the run estimates runtimes from (sim/accuracy.py).
        self.finished: list[tuple[str, str, int, float]] = []
        # Called with each job as it arrives, before the cycle that may start it (forecasts).
        self.on_arrival: Callable[[JobRecord], None] | None = None
        self.held = 0  # GPUs held by running attempts
        # quota-guarantee bookkeeping, per trace team
        self.team_held: dict[str, int] = dict.fromkeys(nominal, 0)
        self.team_waiting: dict[str, dict[int, int]] = {t: {} for t in nominal}
        self.violated_since: dict[str, float] = {}

    def _record(self, job: TraceJob) -> JobRecord:
        config = self.config
        types = (job.gpu_type,) if job.gpu_type else ()
        shape = job_shape(job.gpus, job.nodes, largest_node(config, types))
        team = self.setup.team_of(job.team)
        cls = job.priority_class or config.default_priority_class(team)
        priority = config.priority_classes[cls].value if cls in config.priority_classes else 0
        record = JobRecord(job, team, shape, priority)
        record.unschedulable = never_runs(config, team, shape, types)
        if not record.unschedulable:
            record.pending = PendingJob(
                id=job.job_id,
                team=team,
                priority=priority,
                submitted_at=job.submit_s,
                gpus=shape.gpus,
                nodes=shape.nodes,
                gpu_types=types,
            )
        return record

    # -- the loop --------------------------------------------------------------------------

    def run(self, progress: Progress | None = None) -> Outcome:
        started = time.perf_counter()
        arrivals = sorted(
            (r for r in self.records if not r.unschedulable),
            key=lambda r: (r.trace.submit_s, r.trace.job_id),
        )
        next_arrival = 0
        last_cycle = -math.inf
        dirty = False
        wake = math.inf  # when a waiting job starts to starve
        done = len(self.records) - len(arrivals)
        events = 0
        while next_arrival < len(arrivals) or self.ends or self.pending:
            t_arrival = (
                arrivals[next_arrival].trace.submit_s if next_arrival < len(arrivals) else math.inf
            )
            t_end = self.ends[0][0] if self.ends else math.inf
            t_cycle = max(last_cycle + MIN_TICK_GAP_S, 0.0) if dirty else wake
            now = min(t_arrival, t_end, t_cycle)
            if now == math.inf:
                break  # waiting jobs that nothing will ever free room for (reported below)
            self.now = now
            while next_arrival < len(arrivals) and arrivals[next_arrival].trace.submit_s <= now:
                self._arrive(arrivals[next_arrival])
                if self.on_arrival is not None:
                    self.on_arrival(arrivals[next_arrival])
                next_arrival += 1
                events += 1
                dirty = True
            while self.ends and self.ends[0][0] <= now:
                _, _, job_id, attempt = heapq.heappop(self.ends)
                if self._end(self.by_id[job_id], attempt):
                    done += 1
                    events += 1
                    dirty = True
            if (dirty and now >= last_cycle + MIN_TICK_GAP_S) or now >= wake:
                dirty = self._cycle()
                last_cycle = now
                wake = min(
                    self._next_starvation(),
                    self._protected_until,
                    self.budgets.next_change(),
                    self.autoscaler.next_change(self.config, now) if self._scaled else math.inf,
                    self.spot.next_eviction(),
                )
                events += 1
            self._check_guarantees()
            if progress is not None:
                progress(done)
        self._close()
        self.outcome.events = events
        self.outcome.wall_s = time.perf_counter() - started
        return self.outcome

    def _arrive(self, record: JobRecord) -> None:
        assert record.pending is not None
        self.pending[record.trace.job_id] = record
        self._waiting(record, +1)

    def _waiting(self, record: JobRecord, delta: int) -> None:
        assert record.pending is not None
        entry = (record.pending.waiting_since, record.trace.job_id)
        queue = self.queues.get(record.team)
        if queue is None:
            queue = self.queues[record.team] = TeamQueue()
        if delta > 0:
            bisect.insort(self._waits, entry)
            queue.put(record.pending)
        else:
            del self._waits[bisect.bisect_left(self._waits, entry)]
            queue.remove(record.trace.job_id)
        sizes = self.team_waiting.get(record.trace.team)
        if sizes is None:
            return
        need = record.shape.total
        count = sizes.get(need, 0) + delta
        if count:
            sizes[need] = count
        else:
            del sizes[need]

    def _cycle(self) -> bool:
        """One scheduling cycle; True when it preempted (victims' room is seen next cycle)."""
        now = self.now
        self._take_back()  # before the running attempts are read: it ends some
        if self._running is None:
            self._running = tuple(r.running for r in self.running.values() if r.running is not None)
        if self.budgets.enabled:
            self.budgets.evaluate(now, (self._use(r) for r in self.running.values()))
        self._scale(demand=False)  # nodes that came up are planned with; drained ones not
        snapshot = Snapshot(
            now=now,
            pools=self.pools.pools(),
            teams=self._team_views(now),
            running=self._running,
            pending=(),
            usage=self._usage(),
            nominations=self.nominations,
            budgets=self.budgets.blocks,
        )
        groups = {team: queue.jobs() for team, queue in sorted(self.queues.items()) if len(queue)}
        result = self.parking.cycle(snapshot, self.policy, groups)
        self.nominations = result.nominations
        if self._protected_until <= now:
            self._protected_until = math.inf
        if result.protected_until is not None and result.protected_until > now:
            self._protected_until = min(self._protected_until, result.protected_until)
        self.outcome.cycles += 1
        for preemption in result.preemptions:
            self._preempt(self.by_id[preemption.job_id])
        for admission in result.admissions:
            record = self.by_id[admission.job_id]
            self._start(record, admission.pool, admission.gpu_type, admission.placements)
            record.borrowed = admission.borrowed
        if not self._scaled:
            return bool(result.preemptions)
        self._reasons.update(result.pending)
        for admission in result.admissions:
            self._reasons.pop(admission.job_id, None)
        # On this cycle's reasons: a node asked for with no delay is planned with next cycle.
        return self._scale() or bool(result.preemptions)

    def _scale(self, demand: bool = True) -> bool:
        """Step the autoscaled pools; True when the nodes the scheduler may use changed.
        Before a cycle (``demand`` False: the waiting jobs' reasons are those the last step
        saw) a step changes something only when attempts ended or started since, or a node
        comes up or idles out now; otherwise it is skipped."""
        if not self._scaled:
            return False
        if self._running is None:
            self._running = tuple(r.running for r in self.running.values() if r.running is not None)
        due = self.autoscaler.next_change(self.config, self._last_step) <= self.now
        if not demand and self._running is self._stepped and not due:
            return False
        self._stepped, self._last_step = self._running, self.now

        def waiting() -> list[tuple[PendingJob, tuple[PendingReason, ...]]]:
            return [
                (record.pending, reasons)
                for job_id, record in self.pending.items()
                if record.pending is not None and (reasons := self._reasons.get(job_id))
            ]

        changed = self.autoscaler.step(self.config, self._running, waiting, self.now)
        if changed:
            for pool, names in self.autoscaler.ready_nodes(self.config).items():
                self.pools.set_nodes(pool, names)
        for pool, count in self.autoscaler.node_counts(self.config).items():
            seen = self.outcome.pool_nodes[pool]
            if not seen or seen[-1][1] != count:
                seen.append((self.now, count))
            if pool in self._spot_pools:
                self.spot.track(pool, self.autoscaler.node_names(pool), self.now)
        return changed

    def _take_back(self) -> None:
        """The provider takes back the spot nodes due: their attempts are evicted; an
        autoscaled pool loses the node, a fixed pool gets it replaced at once."""
        for pool, node in self.spot.due(self.now):
            on_node = [
                r
                for r in self.running.values()
                if r.running is not None and any(p.node == node for p in r.running.placements)
            ]
            for record in sorted(on_node, key=lambda r: r.trace.job_id):
                self._requeue(record)
                record.evicted += 1
                self.outcome.evictions += 1
            if pool in self._scaled:
                self.autoscaler.evicted(pool, [node])
                self.pools.set_nodes(pool, self.autoscaler.ready_nodes(self.config)[pool])
            else:
                self.spot.renew(pool, node, self.now)

    def snapshot_now(self) -> tuple[Snapshot, dict[str, tuple[PendingJob, ...]]]:
        """The world as the next cycle would see it, and each team's queue: what a forecast
        made now starts from (the running jobs carry no end: the trace's durations are what
        the scheduler cannot know)."""
        if self._running is None:
            self._running = tuple(r.running for r in self.running.values() if r.running is not None)
        snapshot = Snapshot(
            now=self.now,
            pools=self.pools.pools(),
            teams=self._team_views(self.now),
            running=self._running,
            nominations=self.nominations,
            budgets=self.budgets.blocks,
        )
        groups = {team: queue.jobs() for team, queue in sorted(self.queues.items()) if len(queue)}
        return snapshot, groups

    def _usage(self) -> dict[str, dict[str, int]]:
        """GPUs held per team and gpu type by the running attempts: ``held_gpus`` of them,
        with the same entries (a team's GPU-less attempts give it an entry of 0)."""
        usage: dict[str, dict[str, int]] = {}
        for (team, gpu_type), (gpus, _) in self._held.items():
            usage.setdefault(team, {})[gpu_type] = gpus
        return usage

    def _count_held(self, running: RunningJob, sign: int) -> None:
        key = (running.team, running.gpu_type)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = [0, 0]
        held[0] += sign * running.gpus
        held[1] += sign
        if not held[1]:
            del self._held[key]

    def _team_views(self, now: float) -> dict[str, TeamView]:
        usage = self.meter.usage(now)
        # Every field named (dataclasses.replace, a dozen teams every cycle, costs more).
        return {
            name: view
            if name not in usage
            else TeamView(view.name, view.cohort, view.weight, view.quota, usage[name])
            for name, view in self._teams.items()
        }

    def _start(self, record: JobRecord, pool: str, gpu_type: str, placements: tuple) -> None:  # type: ignore[type-arg]
        now = self.now
        del self.pending[record.trace.job_id]
        self._waiting(record, -1)
        record.attempts += 1
        spec = JobSpec(
            job_id=record.trace.job_id,
            attempt=record.attempts,
            team=record.team,
            user="sim",
            command=("simulated",),
            pool=pool,
            gpu_type=gpu_type,
            gpus_per_node=record.shape.gpus,
            nodes=record.shape.nodes,
            cpus=0.0,
            memory_gb=0.0,
            env={DURATION_ENV: repr(record.trace.duration_s - record.saved_s)},
            devices=tuple(p.devices for p in placements),
            checkpoint_interval_s=record.trace.checkpoint_interval_s,
        )
        record.handle = self.backends[pool].submit(spec)
        run = self.cluster.run(spec.key)
        assert run is not None
        self._push_end(run.starts_at + run.duration_s, record)
        record.running = RunningJob(
            id=record.trace.job_id,
            team=record.team,
            priority=record.priority,
            gpu_type=gpu_type,
            pool=pool,
            placements=placements,
            started_at=now,
            preemptions=record.preempted,
        )
        record.started = now
        record.pool = pool
        if record.first_start is None:
            record.first_start = now
        self.running[record.trace.job_id] = record
        self._running = None
        self._count_held(record.running, +1)
        self.pools.take(placements)
        gpus = record.running.gpus
        self.meter.start(record.team, gpus, now)
        self._hold(record, gpus)

    def _push_end(self, at: float, record: JobRecord) -> None:
        self._seq += 1
        heapq.heappush(self.ends, (at, self._seq, record.trace.job_id, record.attempts))

    def _hold(self, record: JobRecord, gpus: int) -> None:
        self.held += gpus
        self.outcome.busy.append((self.now, self.held))
        team = record.trace.team
        if team in self.team_held:
            self.team_held[team] += gpus

    def _release(self, record: JobRecord) -> int:
        """Free the attempt's GPUs; how many it held."""
        running = record.running
        assert running is not None
        gpus = running.gpus
        ran = self.now - record.started
        self.meter.end(record.team, gpus, record.started, self.now)
        self.outcome.borrowed_gpu_s += record.borrowed * ran
        self._account(record, gpus, ran)
        if self.budgets.enabled:
            self.budgets.ended(self._use(record), self.now)
        self._hold(record, -gpus)
        self.pools.free(running.placements)
        del self.running[record.trace.job_id]
        self._running = None
        self._count_held(running, -1)
        record.running = None
        record.handle = None
        return gpus

    def _account(self, record: JobRecord, gpus: int, ran: float) -> None:
        """What the ledger would record for the attempt that ran ``ran`` seconds on ``gpus``."""
        outcome, team = self.outcome, record.trace.team
        split = outcome.team_gpu_s.setdefault(team, [0.0, 0.0])
        split[0] += (gpus - record.borrowed) * ran
        split[1] += record.borrowed * ran
        outcome.pool_used_gpu_s[record.pool] = outcome.pool_used_gpu_s.get(record.pool, 0.0) + (
            gpus * ran
        )
        price = outcome.pool_price.get(record.pool, 0.0)
        outcome.team_cost[team] = outcome.team_cost.get(team, 0.0) + gpus * ran / 3600 * price

    def _use(self, record: JobRecord) -> Use:
        """The running attempt of ``record`` as the ledger keys it."""
        running = record.running
        assert running is not None
        key = (record.team, running.gpu_type, record.pool, self._node_type[record.pool])
        return Use(key, running.gpus, record.started)

    def _end(self, record: JobRecord, attempt: int) -> bool:
        """The backend says the attempt ended; False for a stale event (a preempted attempt)."""
        if record.attempts != attempt or record.handle is None:
            return False
        status = self.backends[record.pool].poll([record.handle])[record.handle.key]
        if status.state is RunState.RUNNING or status.state is RunState.PENDING:
            raise AssertionError(f"{record.trace.job_id} has not ended at {self.now}: {status}")
        running = record.running
        assert running is not None
        self.finished.append(
            (record.team, running.gpu_type, running.gpus, self.now - record.started)
        )
        self._release(record)
        record.end = self.now
        return True

    def _preempt(self, record: JobRecord) -> None:
        self._requeue(record)
        record.preempted += 1
        self.outcome.preemptions += 1

    def _requeue(self, record: JobRecord) -> None:
        """Stop the running attempt and queue the job again as a new attempt that keeps its
        submit time; the work since its last checkpoint is lost."""
        assert record.handle is not None
        self.backends[record.pool].cancel(record.handle, self.config.scheduler.grace_period_s)
        done = record.saved_s + (self.now - record.started)
        gpus = self._release(record)
        record.saved_s = checkpointed(done, record.trace.checkpoint_interval_s)
        record.lost_gpu_s += gpus * (done - record.saved_s)
        assert record.pending is not None
        record.pending = replace(record.pending, queued_at=self.now)
        self.pending[record.trace.job_id] = record
        self._waiting(record, +1)

    def _next_starvation(self) -> float:
        bound = self.policy.starvation_after_s
        if bound is None:
            return math.inf
        # The first job that is not starving yet: waiting since after now - bound.
        at = bisect.bisect_right(self._waits, (self.now - bound, "\uffff"))
        if at == len(self._waits):
            return math.inf
        # In floats, since + bound may round to now although now - bound < since: then the
        # job starves at the very next representable moment, not at now again (forever).
        return max(self._waits[at][0] + bound, math.nextafter(self.now, math.inf))

    # -- quota guarantees ------------------------------------------------------------------

    def _check_guarantees(self) -> None:
        """A team is short while some waiting job of it would fit within its nominal quota
        next to what it holds; time short beyond one cycle interval counts as a violation."""
        now = self.now
        for team, nominal in self.outcome.nominal.items():
            sizes = self.team_waiting[team]
            short = bool(sizes) and min(sizes) <= nominal - self.team_held[team]
            since = self.violated_since.get(team)
            if short and since is None:
                self.violated_since[team] = now
            elif not short and since is not None:
                self._count_violation(team, now - since)
                del self.violated_since[team]

    def _count_violation(self, team: str, span: float) -> None:
        over = span - self.interval
        if over > 0:
            totals = self.outcome.quota_violation_s
            totals[team] = totals.get(team, 0.0) + over

    def _close(self) -> None:
        self.outcome.budgets = self.budgets.close(self.now)
        for team, since in self.violated_since.items():
            self._count_violation(team, self.now - since)
        self.violated_since.clear()
        for record in self.pending.values():
            record.unschedulable = record.unschedulable or "still waiting when the trace ended"


def _autoscaled(pool: Pool) -> bool:
    """The simulator sizes every autoscaled pool itself: all run on its simulated backend."""
    return pool.autoscale.mode == "autoscale"


def checkpointed(done_s: float, interval_s: int | None) -> float:
    """The work a stopped attempt keeps of ``done_s`` seconds: what its last checkpoint saved
    (a whole number of intervals), or nothing for a job that does not checkpoint."""
    if interval_s is None:
        return 0.0
    # The tolerance keeps float noise in virtual times (a preemption exactly at a checkpoint
    # lands at 599.999...) from costing a whole interval.
    return math.floor(done_s / interval_s + 1e-9) * float(interval_s)


def simulate(
    setup: PolicySetup,
    trace: list[TraceJob],
    nominal: dict[str, int],
    progress: Progress | None = None,
    origin: datetime = DEFAULT_ORIGIN,
    spot_evictions_per_node_day: float = 0.0,
    seed: int = 0,
) -> Outcome:
    return Simulation(setup, trace, nominal, origin, spot_evictions_per_node_day, seed).run(
        progress
    )
