"""How many nodes an autoscaled pool should have, and which ones to add, drain or keep (R4).

Pure: the caller (the controller's autoscaler, or the simulator) says what the pool's nodes hold
and which waiting jobs it could run, and applies the :class:`ScaleDecision`. Nothing here reads a
clock: ``now`` is passed in.

The rule, per pool:

1. **Need.** The nodes that hold work (admitted or running attempts, gangs included: an admitted
   gang holds its nodes until it ends) stay needed. The waiting demand is then packed, largest
   first, onto the free room of the nodes that are up or coming up (busiest first), and what
   does not fit counts whole new nodes. A gang of ``k`` nodes takes ``k`` distinct nodes.
   Demand that no node of the pool's shape could ever hold, or a gang larger than
   ``max_nodes``, is left out (it is explained by the scheduler, not served by scaling).
2. **Target** = ``max(need, floor)``, at most ``max_nodes``; ``floor`` is the larger of
   ``min_nodes`` and ``warm_nodes`` (a warm floor keeps scarce tiers ready).
3. **Up.** Below target: draining nodes are put back in service first (they are up already),
   then new nodes are asked for, never past ``max_nodes`` counting the draining ones (a node
   is paid for until it is released).
4. **Down.** Above target: idle nodes go first, those idle longest first, and only after
   ``idle_timeout_s`` of idleness (a node that just emptied is likely needed again soon); busy
   nodes are drained only when the pool has more busy nodes than it may have (``max_nodes``
   lowered): a draining node takes no new admissions and is released when empty. Nodes
   still coming up are never drained: they are kept and counted as idle once up.

Invariant (tested on tables and random pools): a decision never asks for a node past
``max_nodes``, never drains a node a waiting job was packed onto, and never releases a node
that holds work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpupool.scheduler.snapshot import PendingJob, PendingReason, ReasonCode

_EPSILON = 1e-9
# Reasons more nodes of the type would fix. Not QUOTA, COHORT or BUDGET (the team may not have
# more), BLOCKED (behind its team's head, which counts) nor PREEMPTING (room is on its way).
# TOO_LARGE: a pool scaled in (to zero, say) is too small for it now, not forever.
SCALABLE = frozenset(
    {ReasonCode.CAPACITY, ReasonCode.TOO_LARGE, ReasonCode.RESERVED, ReasonCode.PREEMPTION}
)


class NodePhase(StrEnum):
    PROVISIONING = "provisioning"  # asked for; not planned with until it is up
    READY = "ready"  # up: the scheduler may place attempts on it
    DRAINING = "draining"  # up, takes no new attempt; released once empty


@dataclass(frozen=True, slots=True)
class ScaleSettings:
    """A pool's ``autoscale:`` and node shape. Invariant: ``0 <= min_nodes <= max_nodes``."""

    min_nodes: int
    max_nodes: int
    gpus: int
    cpus: float
    memory_gb: float
    warm_nodes: int = 0
    idle_timeout_s: float = 600.0

    @property
    def floor(self) -> int:
        return min(self.max_nodes, max(self.min_nodes, self.warm_nodes))


@dataclass(frozen=True, slots=True)
class PoolNode:
    """One node of the pool as the decision sees it: its phase, the room its attempts hold and
    since when it has held none (``idle_since``: None while it holds work)."""

    name: str
    phase: NodePhase
    used_gpus: int = 0
    used_cpus: float = 0.0
    used_memory_gb: float = 0.0
    idle_since: float | None = None

    @property
    def busy(self) -> bool:
        return self.idle_since is None


@dataclass(frozen=True, slots=True)
class Want:
    """One waiting job the pool could run: ``nodes`` members of this many GPUs, cpus, GB."""

    job_id: str
    gpus: int
    nodes: int = 1
    cpus: float = 0.0
    memory_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """What to do now. ``target``: the nodes the pool should have in service (up or coming up,
    not draining); ``add``: new nodes to ask for; ``drain``: nodes to stop admitting to;
    ``keep``: draining nodes to put back in service; ``served``: the waiting jobs the target
    has room for, as packed until the pool reached ``max_nodes`` (packing stops there: no
    decision changes after); ``reason``: one line for logs and ``/v1/pools``."""

    target: int
    add: int = 0
    drain: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    reason: str = ""


class _Room:
    """Free room of one node during packing."""

    __slots__ = ("cpus", "gpus", "memory_gb", "name", "used")

    def __init__(self, name: str, gpus: int, cpus: float, memory_gb: float, used: bool) -> None:
        self.name = name
        self.gpus = gpus
        self.cpus = cpus
        self.memory_gb = memory_gb
        self.used = used  # holds work, or waiting work was packed onto it

    def holds(self, want: Want) -> bool:
        return (
            self.gpus >= want.gpus
            and self.cpus + _EPSILON >= want.cpus
            and self.memory_gb + _EPSILON >= want.memory_gb
        )

    def take(self, want: Want) -> None:
        self.gpus -= want.gpus
        self.cpus -= want.cpus
        self.memory_gb -= want.memory_gb
        self.used = True


def fits_pool(want: Want, settings: ScaleSettings) -> bool:
    """Whether the pool at its largest, empty, could hold ``want``."""
    return (
        want.nodes <= settings.max_nodes
        and want.gpus <= settings.gpus
        and want.cpus <= settings.cpus + _EPSILON
        and want.memory_gb <= settings.memory_gb + _EPSILON
    )


def _pack(settings: ScaleSettings, rooms: list[_Room], demand: Sequence[Want]) -> tuple[str, ...]:
    """Pack ``demand`` onto ``rooms``, then onto new nodes appended to them (changed in
    place); the jobs packed, in packing order. Rooms are tried busiest first (least
    free GPUs), then by name, so waiting work fills nodes that are busy already."""
    order = sorted(
        (w for w in demand if fits_pool(w, settings)),
        key=lambda w: (-w.gpus * w.nodes, -w.gpus, -w.cpus, -w.memory_gb, w.job_id),
    )
    new = 0
    served: list[str] = []
    limit = settings.max_nodes
    used = sum(1 for room in rooms if room.used)
    for want in order:
        if used >= limit:
            break  # the target is the most already: packing more changes no decision
        rooms.sort(key=lambda r: (r.gpus, r.name))
        picked = [room for room in rooms if room.holds(want)][: want.nodes]
        missing = want.nodes - len(picked)
        if missing and len(rooms) + missing > limit:
            continue  # would need more nodes than the pool may have: it waits, unserved
        for room in picked:
            used += not room.used
            room.take(want)
        used += missing
        for _ in range(missing):
            new += 1
            room = _Room(
                f"\uffffnew-{new:06d}", settings.gpus, settings.cpus, settings.memory_gb, False
            )
            room.take(want)
            rooms.append(room)
        served.append(want.job_id)
    return tuple(served)


def decide(
    settings: ScaleSettings, nodes: Sequence[PoolNode], demand: Sequence[Want], now: float
) -> ScaleDecision:
    """The pool's target and the changes that move it there (see the module docstring)."""
    live = [n for n in nodes if n.phase is not NodePhase.DRAINING]
    draining = [n for n in nodes if n.phase is NodePhase.DRAINING]
    rooms = [
        _Room(
            n.name,
            settings.gpus - n.used_gpus,
            settings.cpus - n.used_cpus,
            settings.memory_gb - n.used_memory_gb,
            n.busy or n.phase is NodePhase.PROVISIONING,  # kept until up, then may idle
        )
        for n in live
    ]
    # Draining nodes take part too, after the live ones: one taken back is up already.
    spare = [
        _Room(
            n.name,
            settings.gpus - n.used_gpus,
            settings.cpus - n.used_cpus,
            settings.memory_gb - n.used_memory_gb,
            n.busy,
        )
        for n in sorted(draining, key=lambda n: (n.idle_since is not None, n.name))
    ]
    served = _pack(settings, rooms, demand)
    need = sum(1 for r in rooms if r.used)  # the new nodes included
    target = min(settings.max_nodes, max(need, settings.floor))
    in_service = len(live)
    if target > in_service:
        # Draining nodes first: put back what packing could use, busy ones first.
        keep = tuple(room.name for room in spare[: target - in_service])
        room_left = settings.max_nodes - len(nodes)
        add = max(0, min(target - in_service - len(keep), room_left))
        why = f"{len(served)} waiting job(s) need {need} node(s)" if served else "the floor"
        return ScaleDecision(target, add=add, keep=keep, served=served, reason=why)
    if target == in_service:
        return ScaleDecision(target, served=served, reason="steady")
    return _shrink(settings, live, rooms, target, served, now)


def _shrink(
    settings: ScaleSettings,
    live: Sequence[PoolNode],
    rooms: Sequence[_Room],
    target: int,
    served: tuple[str, ...],
    now: float,
) -> ScaleDecision:
    """Drain down towards ``target``: idle nodes past their timeout, longest idle first; busy
    nodes only beyond ``max_nodes``, the emptiest first. Nodes packed onto are kept."""
    packed = {room.name for room in rooms if room.used}
    surplus = len(live) - target
    idle = sorted(
        (
            n
            for n in live
            if n.phase is NodePhase.READY
            and n.name not in packed
            and n.idle_since is not None
            and now - n.idle_since >= settings.idle_timeout_s
        ),
        key=lambda n: (n.idle_since, _reverse(n.name)),
    )
    drain = [n.name for n in idle[:surplus]]
    over = len(live) - settings.max_nodes - len(drain)
    if over > 0:
        busy = sorted(
            (n for n in live if n.phase is NodePhase.READY and n.name not in drain and n.busy),
            key=lambda n: (n.used_gpus, n.used_cpus, _reverse(n.name)),
        )
        drain.extend(n.name for n in busy[:over])
    waiting = surplus - len(drain)
    why = f"{len(drain)} node(s) drained" if drain else ""
    if waiting > 0:
        why = ", ".join(
            filter(
                None, [why, f"{waiting} idle node(s) kept until idle {settings.idle_timeout_s:g} s"]
            )
        )
    return ScaleDecision(target, drain=tuple(drain), served=served, reason=why or "steady")


def _reverse(name: str) -> tuple[int, ...]:
    """A sort key that orders names from last to first (the newest node of a pool first)."""
    return (*(-ord(c) for c in name), 1)


@dataclass(frozen=True, slots=True)
class ScaledPool:
    """An autoscaled pool as :func:`demand_by_pool` matches waiting jobs to it."""

    name: str
    gpu_type: str
    backend: str
    settings: ScaleSettings
    dedicated_to: str | None = None
    gang: bool = True


class Matcher:
    """Which autoscaled pool a waiting job counts for (see :func:`demand_by_pool`)."""

    def __init__(self, pools: Sequence[ScaledPool]) -> None:
        self.pools = tuple(sorted(pools, key=lambda p: p.name))
        self._by_type: dict[str, list[ScaledPool]] = {}
        for found in self.pools:
            self._by_type.setdefault(found.gpu_type, []).append(found)

    def pool_for(self, job: PendingJob, reasons: tuple[PendingReason, ...]) -> str | None:
        """The first gpu type (in the reasons' order) on which ``job`` waits for a reason more
        nodes would fix, and there the first pool in name order that may run it (its team,
        its backend pin, its shape, a gang only where the backend runs gangs)."""
        want = want_of(job)
        for reason in reasons:
            if reason.code not in SCALABLE:
                continue
            for pool in self._by_type.get(reason.gpu_type, ()):
                if pool.dedicated_to is not None and pool.dedicated_to != job.team:
                    continue
                if job.backend is not None and job.backend != pool.backend:
                    continue
                if job.nodes > 1 and not pool.gang:
                    continue
                if fits_pool(want, pool.settings):
                    return pool.name
        return None


def want_of(job: PendingJob) -> Want:
    return Want(job.id, job.gpus, job.nodes, job.cpus, job.memory_gb)


def demand_by_pool(
    pools: Sequence[ScaledPool],
    waiting: Iterable[tuple[PendingJob, tuple[PendingReason, ...]]],
) -> dict[str, list[Want]]:
    """The waiting jobs each autoscaled pool could run, from their last pending reasons
    (:meth:`Matcher.pool_for`). Each job counts once, so two pools never grow for one job."""
    matcher = Matcher(pools)
    demand: dict[str, list[Want]] = {p.name: [] for p in pools}
    for job, reasons in waiting:
        pool = matcher.pool_for(job, reasons)
        if pool is not None:
            demand[pool].append(want_of(job))
    return demand
