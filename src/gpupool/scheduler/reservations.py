"""Starvation protection (Q8): reservations for jobs that waited too long, and backfill.

A pending job is *starving* when ``policy.starvation_after_s`` is set and it has waited that
long since it last entered the queue (``PendingJob.waiting_since``: a preempted job keeps its
submit time, and so its place, but its wait starts again). Starving jobs go first
(:mod:`queues`); one that still fits neither outright nor by preemption gets a
:class:`Reservation`:

* **Where.** Over its gpu types, the usable pools of those types on which its quota (and, for a
  GPU-less job, its team's cap on GPU-less work) fits now,
  the pool where ``nodes`` nodes will have room earliest. A node's time is when enough of the
  jobs on it have ended: running jobs end by ``RunningJob.ends_by``, this cycle's admissions by
  ``now + max_runtime_s``; an unknown end is never. Pools where it can never fit are skipped.
  Ties: gpu type order, then pool name; nodes: earliest, then packing order.
* **What.** On each chosen node, the free devices (lowest first, up to the job's GPUs per node)
  and free cpus and memory up to its needs are *held*: taken out of the workspace, so no ordinary
  decision of the cycle uses them. Room, not quota, is held.
* **Backfill.** A job with ``max_runtime_s`` may use the held room of reservations due no earlier
  than ``now + max_runtime_s``: it ends before the starving job could start. A job that fits
  within its team's nominal quota of a type may use the room held there for a starving job that
  borrows (``Reservation.guaranteed`` false): a reservation never blocks a team's guarantee.
  Other jobs that would fit only in held room wait with a RESERVED reason naming the node, the
  job and the due time.
* **Bounds.** At most one reservation per team per cycle (its first starving job, in queue order,
  that needs one). Nothing is kept between cycles: reservations are recomputed from each
  snapshot, so one lasts exactly as long as the job starves and does not fit.
* **Cost.** The running jobs' ends are collected once per cycle (admissions are appended); the
  what-if release of held room for backfill and RESERVED is skipped when no held node would
  gain room for the job; a starving job that could hold nothing (its team holds a reservation,
  or an identical request found no pool at this epoch) is decided like a non-starving one.
  While no job in the workspace has a known end (a trace without ``max_runtime_s``), a node
  without room now never gets any, so only pools with ``nodes`` nodes with room now are looked
  at, and the ends are never collected.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from gpupool.core.quota import check_quota
from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import (
    Assignment,
    FitMode,
    assign,
    gpuless_fits,
    job_shape,
    usable_pools,
)
from gpupool.scheduler.capacity import Held, NodeRoom, PoolRoom, Shape
from gpupool.scheduler.snapshot import Admission, PendingJob, PendingReason, Policy, ReasonCode
from gpupool.scheduler.workspace import Simulation, Workspace

_EPSILON = 1e-9
_SLACK = 1e-6  # wider than any rounding of summed holds: an upper bound stays an upper bound
# (ends_by or None, gpus, cpus, memory_gb) of one job on one node.
_End = tuple[float | None, int, float, float]
# Which reservations a job may use: (due no earlier than, types held for borrowers), or None: all.
_Which = tuple[float | None, tuple[str, ...]] | None
# Assignment reasons of a gpu type on which holding room could not help the job.
_NEVER_HELD = frozenset(
    {ReasonCode.NO_POOL, ReasonCode.TOO_LARGE, ReasonCode.QUOTA, ReasonCode.COHORT}
)


@dataclass(slots=True)
class Reservation:
    job: PendingJob
    gpu_type: str
    pool: PoolRoom
    nodes: tuple[int, ...]
    due: float
    holds: list[Held] = field(default_factory=list)
    # The job fits within its team's nominal quota of the type: only then is the held room
    # kept from other teams' guaranteed work too.
    guaranteed: bool = True

    def node_names(self) -> list[str]:
        return [self.pool.nodes[i].view.name for i in self.nodes]


class Reservations:
    """This cycle's reservations; see the module docstring."""

    def __init__(self, ws: Workspace, policy: Policy) -> None:
        self._ws = ws
        self._after = policy.starvation_after_s
        self.items: list[Reservation] = []
        self._teams: set[str] = set()
        # ``_ends`` per (pool, node), built once from the running jobs and extended with each
        # admission of the cycle as it appears (``_admitted_seen`` of ``ws.admitted`` so far).
        self._ends_by_node: dict[tuple[str, str], list[_End]] | None = None
        self._running_ends: bool | None = None  # a running job has a known end (None: not known)
        self._admitted_seen = 0
        # Per (pool, node): how many ends it had when sorted, and those ends by time.
        self._by_end: dict[tuple[str, str], tuple[int, list[_End]]] = {}
        # Answers of :func:`_releasing_could_help` per (which reservations, shape), valid while
        # neither the workspace's epoch nor the holds (``_holds_version``) move.
        self._holds_version = 0
        self._could_help: dict[tuple[_Which, Shape], bool] = {}
        self._could_help_at: tuple[int, int] = (-1, -1)
        # (team, shape, gpu types) whose :meth:`reserve` found no pool, and at which
        # (epoch, holds version): an identical job then finds none either.
        self._futile: dict[tuple[str, Shape, tuple[str, ...], str | None], tuple[int, int]] = {}

    @property
    def starving_before(self) -> float | None:
        """Jobs waiting since this time or earlier starve (``None``: protection is off)."""
        return None if self._after is None else self._ws.now - self._after

    def starving(self, job: PendingJob) -> bool:
        before = self.starving_before
        return before is not None and job.waiting_since <= before

    def may_reserve(self, job: PendingJob, types: tuple[str, ...]) -> bool:
        """False when :meth:`reserve` would surely return ``None`` for ``job`` now: its team
        holds a reservation already, or an identical request found no pool in this very state
        (everything :meth:`reserve` reads moves the workspace's epoch or the holds version)."""
        if job.team in self._teams:
            return False
        at = self._futile.get((job.team, job_shape(job), types, job.backend))
        return at != (self._ws.epoch, self._holds_version)

    def reserve(
        self, job: PendingJob, types: tuple[str, ...], no_fit: Assignment | None = None
    ) -> Reservation | None:
        """Hold room for a starving job that does not fit now, at most one per team.

        ``no_fit``: the job's assignment answer in the workspace as it is now, if known. When
        it says that every type failed a check that held room cannot change (no usable pool,
        too large, the team's quota), no pool is looked at: each would be skipped below."""
        if job.team in self._teams:
            return None
        ws, shape = self._ws, job_shape(job)
        if no_fit is not None and _never_held(no_fit):
            self._futile[(job.team, shape, types, job.backend)] = (ws.epoch, self._holds_version)
            return None
        ends = self._ends() if self._some_end_known() else None
        best: tuple[float, int, str, PoolRoom, tuple[int, ...]] | None = None
        for rank, f in enumerate(types):
            quota, used = ws.quota(job.team, f), ws.used(job.team, f)
            if not check_quota(quota, used, job.total_gpus, ws.cohort_balance(job.team, f)).fits:
                continue  # held room would not help: the team's own quota stops it
            if not gpuless_fits(job, f, ws):
                continue  # nor for a GPU-less job its team's cap stops
            for pool in usable_pools(job, shape, f, ws):
                if ends is None and len(pool.roomy_nodes(shape)) < shape.nodes:
                    continue  # no node without room now has a known time to get it
                times = self._earliest_nodes(pool, shape, ends or {})
                if len(times) < shape.nodes or times[-1][0] == math.inf:
                    continue
                key = (times[-1][0], rank, pool.name)
                if best is None or key < best[:3]:
                    best = (*key, pool, tuple(sorted(i for _, i in times)))
        if best is None:
            self._futile[(job.team, shape, types, job.backend)] = (ws.epoch, self._holds_version)
            return None
        due, rank, _, pool, nodes = best
        owed = ws.within_nominal(job.team, types[rank], job.total_gpus)
        reservation = Reservation(job, types[rank], pool, nodes, due, guaranteed=owed)
        for index in nodes:
            node = pool.nodes[index]
            devices = tuple(node.free_devices[: shape.gpus])
            reservation.holds.append(pool.hold(index, devices, shape.cpus, shape.memory_gb))
        self.items.append(reservation)
        self._teams.add(job.team)
        self._holds_version += 1
        ws.moved_everything()
        return reservation

    def backfill(self, job: PendingJob, types: tuple[str, ...]) -> Admission | None:
        """Admit ``job`` into held room it ends before, or that is held for a borrower on a
        type where the job fits within its team's nominal, when it fits nowhere else.

        Only for a job that fits nowhere now (the cycle asks after a NO_FIT).
        """
        ws = self._ws
        ends_by = None if job.max_runtime_s is None else ws.now + job.max_runtime_s
        owed = tuple(
            f
            for f in sorted({r.gpu_type for r in self.items if not r.guaranteed})
            if f in types and ws.within_nominal(job.team, f, job.total_gpus)
        )
        eligible = [
            r
            for r in self.items
            if (ends_by is not None and r.due >= ends_by)
            or (not r.guaranteed and r.gpu_type in owed)
        ]
        if not eligible:
            return None
        shape = job_shape(job)
        if not self._releasing_could_help(eligible, (ends_by, owed), shape):
            return None  # no node gains room for the job: it still fits nowhere
        with Simulation(ws) as sim:
            for reservation in eligible:
                for held in reservation.holds:
                    sim.release(held)
            outcome = assign(job, types, ws)
        if outcome.mode is not FitMode.FIT or outcome.pick is None:
            return None
        pick = outcome.pick
        touched = [
            (reservation, held)
            for reservation in eligible
            for held in reservation.holds
            if held.pool is pick.pool and held.index in pick.nodes
        ]
        for _, held in touched:
            held.pool.release(held.index, held.devices, held.cpus, held.memory_gb)
        placements = ws.apply(job.team, outcome.gpu_type, pick.pool, pick.nodes, shape, ends_by)
        for reservation, held in touched:  # hold again whatever the backfill job left free
            again = held.pool.hold(held.index, held.devices, held.cpus, held.memory_gb)
            reservation.holds[reservation.holds.index(held)] = again
        self._holds_version += 1
        return Admission(job.id, outcome.gpu_type, pick.pool.name, placements, outcome.borrowed)

    def explain(
        self, job: PendingJob, types: tuple[str, ...], found: tuple[PendingReason, ...]
    ) -> tuple[PendingReason, ...]:
        """Replace the reason of the gpu type where only held room stops ``job`` by RESERVED.

        Only for a job that fits nowhere now (the cycle asks after a NO_FIT).
        """
        if not self.items or not self._releasing_could_help(self.items, None, job_shape(job)):
            return found
        with Simulation(self._ws) as sim:
            for reservation in self.items:
                for held in reservation.holds:
                    sim.release(held)
            outcome = assign(job, types, self._ws)
        pick = outcome.pick
        if outcome.mode is not FitMode.FIT or pick is None:
            return found
        blocking = next(
            (r for r in self.items if r.pool is pick.pool and set(r.nodes) & set(pick.nodes)),
            None,
        )
        if blocking is None:
            return found
        node = next(pick.pool.nodes[i].view.name for i in pick.nodes if i in blocking.nodes)
        why = reasons.reserved(
            outcome.gpu_type, node, blocking.job.id, blocking.job.submitted_at, blocking.due
        )
        return tuple(why if r.gpu_type == outcome.gpu_type else r for r in found)

    def _releasing_could_help(self, items: list[Reservation], which: _Which, shape: Shape) -> bool:
        """:func:`_releasing_could_help` for ``items`` (the reservations ``which`` names: those
        due no earlier than a time or held for borrowers on some types; ``None``: all),
        remembered while nothing it reads changes: node room moves only with the workspace's
        epoch, holds only with ``_holds_version``."""
        at = (self._ws.epoch, self._holds_version)
        if at != self._could_help_at:
            self._could_help.clear()
            self._could_help_at = at
        key = (which, shape)
        known = self._could_help.get(key)
        if known is None:
            known = self._could_help[key] = _releasing_could_help(items, shape)
        return known

    def _earliest_nodes(
        self, pool: PoolRoom, shape: Shape, ends: dict[tuple[str, str], list[_End]]
    ) -> list[tuple[float, int]]:
        """The ``shape.nodes`` nodes of ``pool`` that will have room for one member of
        ``shape`` earliest, as (time, index), earliest first (then by index): what sorting
        every node by :func:`_earliest` gives, with each node's ends sorted once per cycle."""
        now, name, every = self._ws.now, pool.name, pool.every_node_could_hold(shape)
        times = []
        for i, node in enumerate(pool.nodes):
            if not every and not node.could_ever_hold(shape):
                continue
            if node.has_room(shape):
                times.append((now, i))
                continue
            at = (name, node.view.name)
            node_ends = ends.get(at)
            if not node_ends:
                times.append((math.inf, i))
                continue
            known = self._by_end.get(at)
            if known is None or known[0] != len(node_ends):
                known = self._by_end[at] = (len(node_ends), sorted(node_ends, key=_end_time))
            times.append((_earliest(node, shape, known[1], now), i))
        return heapq.nsmallest(shape.nodes, times)

    def _some_end_known(self) -> bool:
        """Whether a running job or an admission of this cycle has a known end; a running
        job's is looked for once per cycle (the running jobs do not change within it)."""
        if self._running_ends is None:
            self._running_ends = any(job.ends_by is not None for job in self._ws.running)
        if self._running_ends or self._ends_by_node is not None:
            return True
        admitted = self._ws.admitted
        return any(entry[4] is not None for entry in admitted[self._admitted_seen :])

    def _ends(self) -> dict[tuple[str, str], list[_End]]:
        """Per (pool, node): when each job holding room there ends, and what it frees.

        The running jobs never change within a cycle and admissions are only appended, so the
        map is built once and extended; each list keeps the running jobs first, then this
        cycle's admissions in order (:meth:`_earliest_nodes` sorts a copy by time).
        """
        ends = self._ends_by_node
        if ends is None:
            ends = self._ends_by_node = {}
            for job in self._ws.running:
                for p in job.placements:
                    ends.setdefault((job.pool, p.node), []).append(
                        (job.ends_by, len(p.devices), job.cpus, job.memory_gb)
                    )
        admitted = self._ws.admitted
        for pool, placements, cpus, memory, ends_by in admitted[self._admitted_seen :]:
            for p in placements:
                ends.setdefault((pool, p.node), []).append((ends_by, len(p.devices), cpus, memory))
        self._admitted_seen = len(admitted)
        return ends


def _never_held(no_fit: Assignment) -> bool:
    """True when each of ``no_fit``'s reasons (one per gpu type tried) is one that
    :meth:`Reservations.reserve` skips the type for: no pool could ever hold the job, or the
    team's quota (the same :func:`check_quota` on the same workspace) stops it."""
    reasons_ = no_fit.reasons
    return bool(reasons_) and all(reason.code in _NEVER_HELD for reason in reasons_)


def _releasing_could_help(items: list[Reservation], shape: Shape) -> bool:
    """False only when giving up every hold of ``items`` would give no node room for one member
    of ``shape`` that it lacks now. Giving up holds only adds room on the held nodes, and
    quota does not depend on holds, so then a job that fits nowhere now would fit nowhere after
    (:meth:`PoolRoom.pick` succeeds exactly when enough nodes have room) and the what-if can be
    skipped. An upper bound of each node's room after the release is used (every held device
    and amount counted, with a generous tolerance), so True is always safe to answer.
    """
    gained: dict[tuple[str, int], tuple[NodeRoom, int, float, float]] = {}
    for reservation in items:
        for held in reservation.holds:
            node = held.pool.nodes[held.index]
            key = (held.pool.name, held.index)
            known = gained.get(key)
            if known is None:
                gained[key] = (node, len(held.devices), held.cpus, held.memory_gb)
            else:
                gained[key] = (
                    node,
                    known[1] + len(held.devices),
                    known[2] + held.cpus,
                    known[3] + held.memory_gb,
                )
    for node, devices, cpus, memory in gained.values():
        if node.has_room(shape):
            continue  # room only grows: whether this node can hold a member does not change
        if (
            len(node.free_devices) + devices >= shape.gpus
            and node.free_cpus + cpus + _SLACK >= shape.cpus
            and node.free_memory_gb + memory + _SLACK >= shape.memory_gb
        ):
            return True
    return False


def _end_time(end: _End) -> float:
    return math.inf if end[0] is None else end[0]


def _earliest(node: NodeRoom, shape: Shape, by_end: list[_End], now: float) -> float:
    """When ``node``, which has no room for one member of ``shape`` now, will have it; ``inf``
    if never known. ``by_end``: the ends of the jobs on the node by time, unknown ends last
    (the order among equal times does not change the answer)."""
    devices, cpus, memory = len(node.free_devices), node.free_cpus, node.free_memory_gb
    for ends_by, gpus, job_cpus, job_memory in by_end:
        if ends_by is None:
            break
        devices, cpus, memory = devices + gpus, cpus + job_cpus, memory + job_memory
        if (
            devices >= shape.gpus
            and cpus + _EPSILON >= shape.cpus
            and memory + _EPSILON >= shape.memory_gb
        ):
            return max(ends_by, now)
    return math.inf
