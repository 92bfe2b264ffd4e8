"""Estimated start times ("when will my job start?"): the production scheduler run forward.

From one snapshot of the world (the controller's last cycle: pools with their node usage,
teams, the running jobs and each team's queue), :func:`run_forward` plays what the controller
would do if nothing new arrived, on a virtual clock, as the simulator's engine does: running
jobs end (at their runtime limit, or at an estimate from similar past jobs:
:mod:`gpupool.sim.runtimes`); after each end a cycle of the production ``run_cycle`` (through
the controller's ``Parking`` and ``TeamQueue``, as the engine runs it) admits what now fits;
admitted jobs end in turn at their own estimates; preemption victims end at once and go back
to the queue; each cycle's nominations are handed to the next. Virtual time jumps from end to
end, plus the moments a waiting job starts to starve and a protected job may be preempted.
No second scheduler: every decision is ``run_cycle``'s (docs/code-style.md §13).

What it cannot know: jobs submitted later (they may go first: a higher priority, a team with a
smaller share), jobs cancelled or failing early, and how the teams' decayed usage moves (kept
as it was). An estimate is therefore "if nothing else happens". Its range comes from two more
runs, with every estimated runtime at the 25th and at the 75th percentile of its similar jobs
(runtime limits stay as they are: a job ends by its limit at the latest).

Bounded: each cycle is handed only the first ``Limits.window`` jobs of each team's queue (the
team of a job asked about: up to it; a team whose last shown job was admitted: twice as many,
and the cycle is decided again); a run stops when every job asked about has started, after
``Limits.max_cycles`` cycles, past ``Limits.horizon_s`` of virtual time, or when the caller's
``stop`` says its time is up; a job not started by then gets no start.

Invariant: the snapshot and the queues handed in are never changed; the same inputs give the
same forecast (every ordering is the scheduler's or ends in an id).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from gpupool.controller.loop import MIN_TICK_GAP_S
from gpupool.controller.parking import Parking
from gpupool.controller.state import TeamQueue
from gpupool.scheduler import (
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    RunningJob,
    Snapshot,
)
from gpupool.sim.runtimes import Runtime, RuntimeModel

SCENARIOS = ("seconds", "low", "high")  # the expected run, the early one, the late one


@dataclass(frozen=True, slots=True)
class Limits:
    """How far a forward run may go (cycles, virtual seconds after the snapshot) and how much
    of each queue a cycle sees."""

    max_cycles: int = 1000
    horizon_s: float = 7 * 86400.0
    # Each team's first ``window`` queued jobs are handed to each forward cycle (None: whole
    # queues), and for the team of a job asked about every job ahead of it: a cycle's cost
    # grows with the jobs it is handed, and a team starts only a few of its jobs per cycle.
    # The window slides as they start, and doubles for a team whose last shown job started.
    window: int | None = 8


@dataclass(frozen=True, slots=True)
class Start:
    at: float
    pool: str
    gpu_type: str


@dataclass(frozen=True, slots=True)
class End:
    """A job's end in a forward run: when, what its runtime was taken from, and whether it was
    running at the snapshot (``initial``) and where."""

    at: float
    job_id: str
    pool: str
    source: str
    samples: int
    initial: bool


@dataclass(slots=True)
class Run:
    """What one forward run found: when each job started (ids of jobs queued at the snapshot
    or requeued victims), every end in time order, and how far it got."""

    starts: dict[str, Start] = field(default_factory=dict)
    ends: list[End] = field(default_factory=list)
    until: float = 0.0
    cycles: int = 0
    done: bool = False  # every job asked about started, or nothing more could happen
    # Why it stopped before that: "horizon", "cycles" (Limits) or "budget" (the caller's stop).
    cut: str = ""


def run_forward(
    snapshot: Snapshot,
    groups: Mapping[str, tuple[PendingJob, ...]],
    policy: Policy,
    runtimes: RuntimeModel,
    targets: Collection[str] | None = None,
    limits: Limits = Limits(),
    scenario: str = "seconds",
    stop: Callable[[], bool] | None = None,
) -> Run:
    """Run the scheduler forward from ``snapshot`` with ``groups`` (each team's queue in queue
    order; ``snapshot.pending`` is not read) until every job of ``targets`` started (None:
    every queued job), or ``limits`` is reached, or ``stop()`` says so (a caller's budget of
    wall time, asked before each cycle but the first). ``scenario``: which of each estimated
    runtime to use (``seconds``, ``low``, ``high`` of :class:`Runtime`)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: use one of {', '.join(SCENARIOS)}")
    forward = _Forward(snapshot, groups, policy, runtimes, scenario, limits.window, targets)
    return forward.run(targets, limits, stop)


def _window(
    jobs: tuple[PendingJob, ...], window: int | None, asked: frozenset[str]
) -> tuple[PendingJob, ...]:
    """A team's first ``window`` jobs and, after them in queue order, those asked about."""
    if window is None or len(jobs) <= window:
        return jobs
    head = jobs[:window]
    if not asked:
        return head
    return head + tuple(job for job in jobs[window:] if job.id in asked)


@dataclass(slots=True)
class _Used:
    """What is in use on one node during a forward run."""

    devices: set[int]
    cpus: float
    memory_gb: float


class _Forward:
    """The forward run's world, changed as it goes (the snapshot is copied into it)."""

    def __init__(
        self,
        snapshot: Snapshot,
        groups: Mapping[str, tuple[PendingJob, ...]],
        policy: Policy,
        runtimes: RuntimeModel,
        scenario: str,
        window: int | None = None,
        targets: Collection[str] | None = None,
    ) -> None:
        self.start = self.now = snapshot.now
        self.snapshot = snapshot
        self.policy = policy
        self.runtimes = runtimes
        self.scenario = scenario
        self.nominations = snapshot.nominations
        self.parking = Parking()
        self.pools = list(snapshot.pools)
        self._node_at: dict[str, tuple[int, int]] = {}
        self._dirty: set[str] = set()
        for p, pool in enumerate(self.pools):
            for n, node in enumerate(pool.nodes):
                self._node_at[node.name] = (p, n)
        self._nodes: dict[str, _Used] = {}  # what is in use on the nodes a job took or freed
        self.running: dict[str, RunningJob] = {}
        self.initial = {job.id for job in snapshot.running}
        self.shape: dict[str, PendingJob] = {}  # what a requeued job asks again
        self.ends: list[tuple[float, int, str, int]] = []  # (at, seq, job id, generation)
        self._gen: dict[str, int] = {}
        self._end_info: dict[str, tuple[str, int]] = {}  # job id -> (source, samples)
        self._seq = 0
        self.queues: dict[str, TeamQueue] = {}
        self.pending: dict[str, PendingJob] = {}
        self._waits: list[tuple[float, str]] = []
        self.result = Run(until=self.now)
        for job in snapshot.running:
            self.running[job.id] = job
            if job.terminating:  # signalled: it ends within its grace period
                self._push_end(job.id, self.now, Runtime(0.0, 0.0, 0.0, "limit"))
                continue
            gpus = job.gpus
            if job.ends_by is not None:
                left = max(0.0, job.ends_by - self.now)
                estimate = Runtime(left, left, left, "limit")
            else:
                estimate = runtimes.remaining(
                    job.team, job.gpu_type, gpus, self.now - job.started_at
                )
            self._push_end(job.id, self.now + self._pick(estimate), estimate)
        # Queues are loaded lazily: each team's first ``window`` jobs (its *prefix*, in the
        # queue order ``groups`` lists them in), topped up as they start, and the jobs asked
        # about. Every job not loaded comes after every prefix job, so the first ``window``
        # jobs of a loaded queue are those of the whole queue, at a cost that does not grow
        # with the queues. All asked (``targets`` None) or no window: every job is loaded.
        # A team's window reaches at least to the jobs of it asked about: they never pass the
        # team's earlier jobs by being shown without them. It doubles when a cycle admitted
        # the last job it showed (see _cycle).
        self._windows: dict[str, int | None] = {}
        self._rest: dict[str, tuple[PendingJob, ...]] = {}
        self._cursor: dict[str, int] = {}
        self._prefix: set[str] = set()
        self._in_prefix: dict[str, int] = {}
        wanted = set() if targets is None else set(targets)
        for team, jobs in groups.items():
            if team not in snapshot.teams:
                continue
            self.queues[team] = TeamQueue()
            self._rest[team], self._cursor[team], self._in_prefix[team] = jobs, 0, 0
            reach = window
            if targets is None:
                reach = None
            elif window is not None and wanted:
                last = max((i for i, job in enumerate(jobs) if job.id in wanted), default=-1)
                reach = max(window, last + 1)
            self._windows[team] = reach
            self._top_up(team, bulk=True)
        self._waits.sort()

    def _top_up(self, team: str, bulk: bool = False) -> None:
        """Load the team's next jobs until its prefix holds ``window`` queued jobs."""
        rest, window = self._rest[team], self._windows[team]
        at = self._cursor[team]
        while at < len(rest) and (window is None or self._in_prefix[team] < window):
            job = rest[at]
            at += 1
            if job.id in self.running or job.id in self.shape:
                continue  # asked about, loaded early and started since
            if job.id not in self.pending:
                self._load(job, bulk)
            self._prefix.add(job.id)
            self._in_prefix[team] += 1
        self._cursor[team] = at

    def _load(self, job: PendingJob, bulk: bool) -> None:
        self.pending[job.id] = job
        self.queues[job.team].put(job)
        entry = (job.waiting_since, job.id)
        if bulk:
            self._waits.append(entry)  # sorted once the constructor has loaded them all
        else:
            bisect.insort(self._waits, entry)

    # -- the loop --------------------------------------------------------------------------

    def run(
        self, targets: Collection[str] | None, limits: Limits, stop: Callable[[], bool] | None
    ) -> Run:
        wanted = set(self.pending if targets is None else targets) & set(self.pending)
        result = self.result
        horizon = self.start + limits.horizon_s
        protected_until = math.inf
        # The jobs asked about, by team, for the windows (all of them: every job is in one).
        asked: dict[str, frozenset[str]] = {}
        if targets is not None:
            by_team: dict[str, set[str]] = {}
            for job_id in wanted:
                by_team.setdefault(self.pending[job_id].team, set()).add(job_id)
            asked = {team: frozenset(ids) for team, ids in by_team.items()}
        result.cut = "cycles"
        while wanted and result.cycles < limits.max_cycles:
            if stop is not None and result.cycles and stop():
                result.cut = "budget"
                break
            preempted, protected = self._cycle(asked)
            wanted.difference_update(result.starts)
            if not wanted or not self.pending:
                break
            if protected is not None and protected > self.now:
                protected_until = min(protected_until, protected)
            if protected_until <= self.now:
                protected_until = math.inf
            nxt = self.now + MIN_TICK_GAP_S if preempted else math.inf
            nxt = min(nxt, self.ends[0][0] if self.ends else math.inf)
            nxt = min(nxt, self._next_starvation(), protected_until)
            if nxt == math.inf or nxt > horizon:
                result.until = horizon if nxt != math.inf else self.now
                result.done = nxt == math.inf
                result.cut = "" if result.done else "horizon"
                return result
            self.now = max(self.now, nxt)
            self._end_due()
        result.until = self.now
        result.done = not wanted
        if result.done:
            result.cut = ""
        return result

    def _cycle(self, asked: Mapping[str, frozenset[str]]) -> tuple[bool, float | None]:
        snapshot = Snapshot(
            now=self.now,
            pools=self._views(),
            teams=self.snapshot.teams,
            running=tuple(self.running.values()),
            nominations=self.nominations,
            budgets=self.snapshot.budgets,
        )
        while True:
            groups = {
                team: _window(q.jobs(), self._windows[team], asked.get(team, frozenset()))
                for team, q in sorted(self.queues.items())
                if len(q)
            }
            outcome = self.parking.cycle(snapshot, self.policy, groups)
            # A team whose last shown job was admitted might have started more: show it twice
            # as many and decide the cycle again (nothing of this attempt was applied).
            admitted = {a.job_id for a in outcome.admissions}
            widened = [team for team in groups if self._binding(team, admitted)]
            if not widened:
                break
            for team in widened:
                shown = self._windows[team]
                assert shown is not None
                self._windows[team] = 2 * shown
                self._top_up(team)
        self.result.cycles += 1
        self.nominations = outcome.nominations
        for preemption in outcome.preemptions:
            self._requeue(preemption.job_id)
        topped: set[str] = set()
        for admission in outcome.admissions:
            job = self.pending.pop(admission.job_id)
            self._unqueue(job)
            self.shape[job.id] = job
            if job.id in self._prefix:
                self._prefix.discard(job.id)
                self._in_prefix[job.team] -= 1
                topped.add(job.team)
            running = RunningJob(
                id=job.id,
                team=job.team,
                priority=job.priority,
                gpu_type=admission.gpu_type,
                pool=admission.pool,
                placements=admission.placements,
                cpus=job.cpus,
                memory_gb=job.memory_gb,
                started_at=self.now,
                ends_by=None if job.max_runtime_s is None else self.now + job.max_runtime_s,
            )
            self.running[job.id] = running
            self._take(running)
            self.result.starts.setdefault(
                job.id, Start(self.now, admission.pool, admission.gpu_type)
            )
            estimate = self.runtimes.estimate(
                job.team, admission.gpu_type, job.total_gpus, job.max_runtime_s
            )
            self._push_end(job.id, self.now + self._pick(estimate), estimate)
        for team in sorted(topped):
            self._top_up(team)
        return bool(outcome.preemptions), outcome.protected_until

    def _binding(self, team: str, admitted: set[str]) -> bool:
        window = self._windows[team]
        if window is None:
            return False
        jobs = self.queues[team].jobs()
        hidden = len(jobs) > window or self._cursor[team] < len(self._rest[team])
        return hidden and len(jobs) >= window and jobs[window - 1].id in admitted

    def _end_due(self) -> None:
        while self.ends and self.ends[0][0] <= self.now:
            at, _, job_id, gen = heapq.heappop(self.ends)
            if self._gen.get(job_id) != gen or job_id not in self.running:
                continue  # a preempted attempt's end
            job = self.running.pop(job_id)
            self._free(job)
            source, samples = self._end_info[job_id]
            self.result.ends.append(
                End(at, job_id, job.pool, source, samples, job_id in self.initial)
            )

    def _requeue(self, job_id: str) -> None:
        """A victim ends at once and waits again, asking what it asked (its whole runtime)."""
        job = self.running.pop(job_id, None)
        if job is None:
            return
        self._free(job)
        self._gen[job_id] = self._gen.get(job_id, 0) + 1  # its pending end no longer counts
        asked = self.shape.get(job_id)
        if asked is None:  # running at the snapshot: its request, from what it holds
            per_node = len(job.placements[0].devices) if job.placements else 0
            asked = PendingJob(
                id=job.id,
                team=job.team,
                priority=job.priority,
                submitted_at=job.started_at,
                gpus=per_node,
                nodes=max(1, len(job.placements)),
                cpus=job.cpus,
                memory_gb=job.memory_gb,
                gpu_types=(job.gpu_type,),
            )
        asked = dataclasses.replace(asked, queued_at=self.now)
        self.pending[job_id] = asked
        queue = self.queues.setdefault(job.team, TeamQueue())
        queue.put(asked)
        bisect.insort(self._waits, (asked.waiting_since, job_id))

    def _unqueue(self, job: PendingJob) -> None:
        self.queues[job.team].remove(job.id)
        entry = (job.waiting_since, job.id)
        at = bisect.bisect_left(self._waits, entry)
        if at < len(self._waits) and self._waits[at] == entry:
            del self._waits[at]

    def _next_starvation(self) -> float:
        bound = self.policy.starvation_after_s
        if bound is None:
            return math.inf
        at = bisect.bisect_right(self._waits, (self.now - bound, "\uffff"))
        return self._waits[at][0] + bound if at < len(self._waits) else math.inf

    def _pick(self, estimate: Runtime) -> float:
        return max(0.0, float(getattr(estimate, self.scenario)))

    def _push_end(self, job_id: str, at: float, estimate: Runtime) -> None:
        self._seq += 1
        gen = self._gen[job_id] = self._gen.get(job_id, 0) + 1
        self._end_info[job_id] = (estimate.source, estimate.samples)
        heapq.heappush(self.ends, (at, self._seq, job_id, gen))

    # -- room ------------------------------------------------------------------------------

    def _node(self, name: str) -> _Used:
        state = self._nodes.get(name)
        if state is None:
            p, n = self._node_at[name]
            view = self.pools[p].nodes[n]
            state = self._nodes[name] = _Used(
                set(view.used_devices), view.used_cpus, view.used_memory_gb
            )
        return state

    def _take(self, job: RunningJob) -> None:
        self._change(job.placements, job, +1)

    def _free(self, job: RunningJob) -> None:
        self._change(job.placements, job, -1)

    def _change(self, placements: tuple[Placement, ...], job: RunningJob, sign: int) -> None:
        for placement in placements:
            if placement.node not in self._node_at:
                continue  # a node the pools no longer list (removed or not reported)
            state = self._node(placement.node)
            if sign > 0:
                state.devices.update(placement.devices)
            else:
                state.devices.difference_update(placement.devices)
            state.cpus = max(0.0, state.cpus + sign * job.cpus)
            state.memory_gb = max(0.0, state.memory_gb + sign * job.memory_gb)
            self._dirty.add(placement.node)

    def _views(self) -> tuple[PoolView, ...]:
        """The pools with their node usage as it is now; unchanged pools keep their object."""
        if self._dirty:
            by_pool: dict[int, list[NodeView]] = {}
            for name in self._dirty:
                p, n = self._node_at[name]
                nodes = by_pool.get(p)
                if nodes is None:
                    nodes = by_pool[p] = list(self.pools[p].nodes)
                used = self._nodes[name]
                nodes[n] = dataclasses.replace(
                    nodes[n],
                    used_devices=frozenset(used.devices),
                    used_cpus=used.cpus,
                    used_memory_gb=used.memory_gb,
                )
            for p, nodes in by_pool.items():
                self.pools[p] = dataclasses.replace(self.pools[p], nodes=tuple(nodes))
            self._dirty.clear()
        return tuple(self.pools)
