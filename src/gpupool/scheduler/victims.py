"""Preemption candidates per gpu type, in victim order, read as far as a search needs, and the
nodes a search targets.

Within one team the order is lowest priority, least run time (most recently started: the least
work lost), id (:func:`victim_order`); terminating jobs are ordered by when they end, then id.
Lists are ordered at first use and only as far as read (a heap feeding a cached prefix), so
finding one victim on a full cluster costs a heapify of one team's jobs, not a sort of every
running job.

:func:`target_nodes` puts first the candidates on the nodes that are cheapest to free for a job
(see :mod:`gpupool.scheduler.preemption`, "Node targeting").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import attrgetter

from gpupool.scheduler.capacity import NodeRoom, PoolRoom, Shape
from gpupool.scheduler.snapshot import RunningJob
from gpupool.scheduler.workspace import Workspace

_EPSILON = 1e-9  # summed cpus and memory are floats, as in capacity
_BY_GPUS = attrgetter("gpus")


def victim_order(job: RunningJob) -> tuple[int, float, str]:
    """Within one team: lowest priority, least run time (most recently started), id."""
    return (job.priority, -job.started_at, job.id)


# (an own-team job among them, their highest priority, how many, GPU-seconds they have run)
NodeCost = tuple[int, int, int, float]


def target_nodes(
    candidates: list[RunningJob],
    shape: Shape,
    pools: Sequence[PoolRoom],
    team: str,
    headroom: Mapping[str, int],
    now: float,
) -> list[RunningJob]:
    """``candidates`` (in victim order) with those on the cheapest nodes to free for ``shape``
    first: per team smallest first, so a team above its nominal gives as much as it may; the
    rest after, in their order.

    Borrowed capacity is counted per node and per team: ``headroom[t]`` is how many GPUs team
    ``t`` holds above its nominal (a team not listed, the preemptor's own or one whose jobs are
    ending, is not bounded). The search takes a job only while its team is above nominal, and
    takes the targeted jobs smallest first, so a set of jobs of ``t`` counts when all but its
    largest hold less than that.

    Per pool, the ``shape.nodes`` nodes are chosen one at a time, the cheapest first: a node
    with room for one member of ``shape`` costs nothing; any other the first of its candidates
    that frees enough alone, else its candidates in victim order until their room added to the
    free room would hold one member (a node they cannot free is not chosen). A node's cost
    (:data:`NodeCost`, least first, then packing order) counts the victims that are not ending
    already; ``team`` is the preemptor's, whose own jobs count after other teams' borrowed ones.
    For a job of several nodes, the same choice is also made after taking each gang candidate
    first, and the cheapest plan wins. The pool whose chosen nodes cost least in sum (then by
    name) is the target. No pool with enough such nodes: the order is unchanged.
    """
    on_node: dict[str, dict[str, list[RunningJob]]] = {}  # pool -> node -> its candidates
    for job in candidates:
        nodes = on_node.setdefault(job.pool, {})
        for p in job.placements:
            nodes.setdefault(p.node, []).append(job)
    best: tuple[NodeCost, str, list[RunningJob]] | None = None
    for pool in pools:
        picked = _cheapest_nodes(pool, shape, on_node.get(pool.name, {}), team, headroom, now)
        if picked is None:
            continue
        cost, victims = picked
        if best is None or (cost, pool.name) < best[:2]:
            best = (cost, pool.name, victims)
    if best is None or not best[2]:
        return candidates
    first = {job.id for job in best[2]}
    targeted = sorted((j for j in candidates if j.id in first), key=_BY_GPUS)
    return targeted + [j for j in candidates if j.id not in first]


def _cheapest_nodes(
    pool: PoolRoom,
    shape: Shape,
    on_node: Mapping[str, list[RunningJob]],
    team: str,
    headroom: Mapping[str, int],
    now: float,
) -> tuple[NodeCost, list[RunningJob]] | None:
    """The summed cost and the victims of the ``shape.nodes`` nodes of ``pool`` chosen one at a
    time, cheapest first (see :func:`target_nodes`); None when the pool has too few. Only nodes
    with candidates, and the first ``shape.nodes`` with room now, are looked at: no other can
    be freed, and those with room all cost nothing.

    For a job of several nodes, each gang candidate (a victim on several nodes) is also tried
    as the first victim, and the cheapest of these plans wins (the plain one on a tie): a gang
    that alone frees several nodes is otherwise missed when a cheaper node chosen first uses
    up its team's headroom."""
    looked = {i for name in on_node if (i := pool.node_index(name)) is not None}
    looked.update(pool.roomy_nodes(shape))
    best = _choose_nodes(pool, shape, on_node, looked, team, headroom, now, None)
    if shape.nodes > 1:
        gangs = {j.id: j for jobs in on_node.values() for j in jobs if len(j.placements) > 1}
        for gang in gangs.values():
            plan = _choose_nodes(pool, shape, on_node, looked, team, headroom, now, gang)
            if plan is not None and (best is None or plan[0] < best[0]):
                best = plan
    return best


def _choose_nodes(
    pool: PoolRoom,
    shape: Shape,
    on_node: Mapping[str, list[RunningJob]],
    looked: set[int],
    team: str,
    headroom: Mapping[str, int],
    now: float,
    first: RunningJob | None,
) -> tuple[NodeCost, list[RunningJob]] | None:
    """One plan of :func:`_cheapest_nodes`: ``first`` (when given) taken before any node is
    chosen, then the nodes among ``looked`` one at a time, cheapest first."""
    taken: dict[str, tuple[int, int]] = {}  # (GPUs, largest job) counted per team so far
    gone: set[str] = set()
    total: NodeCost = (0, 0, 0, 0.0)
    victims: list[RunningJob] = []
    if first is not None:
        limit = None if first.terminating else headroom.get(first.team)
        if limit is not None and limit <= 0:
            return None  # its team is not above nominal: it is no victim at all
        gone.add(first.id)
        taken[first.team] = _plus((0, 0), first)
        victims.append(first)
        if not first.terminating:
            total = (int(first.team == team), first.priority, 1, _work(first, now))
    chosen: set[int] = set()
    for _ in range(shape.nodes):
        best: tuple[NodeCost, int, list[RunningJob]] | None = None
        for index in sorted(looked - chosen):
            node = pool.nodes[index]
            if not node.could_ever_hold(shape):
                continue
            here = on_node.get(node.view.name, ())
            freed = _free_node(node, shape, here, team, headroom, taken, gone, now)
            if freed is not None and (best is None or (freed[0], index) < best[:2]):
                best = (freed[0], index, freed[1])
        if best is None:
            return None
        cost, index, jobs = best
        chosen.add(index)
        for job in jobs:
            if job.id not in gone:
                gone.add(job.id)
                taken[job.team] = _plus(taken.get(job.team, (0, 0)), job)
                victims.append(job)
        total = (
            max(total[0], cost[0]),
            max(total[1], cost[1]),
            total[2] + cost[2],
            total[3] + cost[3],
        )
    return total, victims


def _free_node(
    node: NodeRoom,
    shape: Shape,
    jobs: Sequence[RunningJob],
    team: str,
    headroom: Mapping[str, int],
    taken: Mapping[str, tuple[int, int]],
    gone: set[str],
    now: float,
) -> tuple[NodeCost, list[RunningJob]] | None:
    """The cost and victims of making room for one member of ``shape`` on ``node``: its
    candidates ``jobs`` in order, each while its team's headroom allows, until enough is free
    (``gone``: victims of nodes chosen before, which free their room here too); None when
    they cannot."""
    name = node.view.name
    devices, cpus, memory = len(node.free_devices), node.free_cpus, node.free_memory_gb
    for job in jobs:  # what victims of nodes chosen before free here (gangs)
        if job.id in gone:
            devices += sum(len(p.devices) for p in job.placements if p.node == name)
            cpus, memory = cpus + job.cpus, memory + job.memory_gb
    more: dict[str, tuple[int, int]] = {}
    picked: list[RunningJob] = []
    own = top = count = 0
    work = 0.0

    def allowed(job: RunningJob) -> bool:
        limit = None if job.terminating else headroom.get(job.team)
        if job.id in gone or limit is None:
            return job.id not in gone
        gpus, largest = _plus(more.get(job.team) or taken.get(job.team, (0, 0)), job)
        return gpus - largest < limit

    if not node_has(devices, cpus, memory, shape):
        # The first victim (in victim order) that frees enough alone, if any: one whole-node
        # job rather than several smaller ones before it.
        alone = next(
            (
                j
                for j in jobs
                if allowed(j)
                and node_has(
                    devices + sum(len(p.devices) for p in j.placements if p.node == name),
                    cpus + j.cpus,
                    memory + j.memory_gb,
                    shape,
                )
            ),
            None,
        )
        if alone is not None:
            jobs = [alone]
    for job in jobs:
        if node_has(devices, cpus, memory, shape):
            break
        if not allowed(job):
            continue  # ended before, or its team would no longer be above nominal
        more[job.team] = _plus(more.get(job.team) or taken.get(job.team, (0, 0)), job)
        devices += sum(len(p.devices) for p in job.placements if p.node == name)
        cpus, memory = cpus + job.cpus, memory + job.memory_gb
        picked.append(job)
        if not job.terminating:
            own = max(own, int(job.team == team))
            count += 1
            top = max(top, job.priority)
            work += _work(job, now)
    if not node_has(devices, cpus, memory, shape):
        return None
    return (own, top, count, work), picked


def _work(job: RunningJob, now: float) -> float:
    """The GPU-seconds ``job`` has run: what preempting it loses."""
    return job.gpus * max(0.0, now - job.started_at)


def _plus(counted: tuple[int, int], job: RunningJob) -> tuple[int, int]:
    """(GPUs, largest job) of a team's counted victims, with ``job`` added."""
    return counted[0] + job.gpus, max(counted[1], job.gpus)


def node_has(devices: int, cpus: float, memory: float, shape: Shape) -> bool:
    return (
        devices >= shape.gpus
        and cpus + _EPSILON >= shape.cpus
        and memory + _EPSILON >= shape.memory_gb
    )


class _Ordered:
    """One team's running jobs of one gpu type in :func:`victim_order`, sorted lazily: a heap
    pops them into a cached prefix only as far as searches read, so finding a victim on a full
    cluster does not sort every running job."""

    __slots__ = ("_heap", "_prefix")

    def __init__(self, jobs: list[RunningJob]) -> None:
        # victim_order inlined (this runs once per team over all its jobs); ids are unique, so
        # two entries never compare equal up to the job itself.
        self._heap = [(job.priority, -job.started_at, job.id, job) for job in jobs]
        heapq.heapify(self._heap)
        self._prefix: list[RunningJob] = []

    def __iter__(self) -> Iterator[RunningJob]:
        i = 0
        while True:
            if i < len(self._prefix):
                yield self._prefix[i]
                i += 1
            elif self._heap:
                self._prefix.append(heapq.heappop(self._heap)[3])
            else:
                return


class VictimIndex:
    """Running jobs per gpu type and team in :func:`victim_order`, and the terminating ones by
    end time; each list is ordered at first use, so a cycle pays only for what it searches."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._teams: dict[tuple[str, str], _Ordered] = {}
        self._ending: dict[str, list[RunningJob]] = {}
        self._possible: dict[tuple[bool, str, str], bool] = {}

    def may_have_candidates(self, team: str, gpu_type: str) -> bool:
        """False when no search for a job of ``team`` on ``gpu_type`` can find any candidate:
        nothing of the type is ending and neither the team nor any member of its cohort runs a
        job of it. Fixed for the cycle: running jobs are never added, claims only remove."""
        cohort = self._ws.team(team).cohort
        key = (False, team, gpu_type) if cohort is None else (True, cohort, gpu_type)
        possible = self._possible.get(key)
        if possible is None:
            by_team = self._ws.jobs_of(gpu_type)
            members = [team] if cohort is None else self._ws.cohort_members(cohort)
            possible = self._possible[key] = bool(self._ws.ending_of(gpu_type)) or any(
                by_team.get(member) for member in members
            )
        return possible

    def team_jobs(self, gpu_type: str, team: str) -> Iterable[RunningJob]:
        ordered = self._teams.get((gpu_type, team))
        if ordered is None:
            jobs = self._ws.jobs_of(gpu_type).get(team, [])
            ordered = self._teams[(gpu_type, team)] = _Ordered(jobs)
        return ordered

    def ending(self, gpu_type: str) -> list[RunningJob]:
        jobs = self._ending.get(gpu_type)
        if jobs is None:
            jobs = self._ending[gpu_type] = sorted(
                self._ws.ending_of(gpu_type),
                key=lambda j: (math.inf if j.ends_by is None else j.ends_by, j.id),
            )
        return jobs
