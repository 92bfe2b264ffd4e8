"""Build the scheduler's :class:`Snapshot` from the configuration and store rows.

Capacity is derived from the active attempts (admitted or running): each holds the devices,
cpus and memory recorded in its placements, so node usage and team usage come from one
source and cannot disagree.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from gpupool.backends.base import PoolCapacity
from gpupool.backends.registry import runs_gangs
from gpupool.scheduler import (
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    Queueing,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    held_gpus,
)
from gpupool.scheduler.snapshot import (
    BorrowWithinCohort,
    PreemptionPolicy,
    Reclaim,
    WithinTeam,
)
from gpupool.spec.models import ClusterConfig, Pool, Preemption


def node_name(pool: str, index: int) -> str:
    return f"{pool}-{index}"


def build_snapshot(
    config: ClusterConfig,
    now: float,
    pending: Sequence[PendingJob],
    running: Sequence[RunningJob],
    usage_history: Mapping[str, float] | None = None,
    capacity: Mapping[str, PoolCapacity] | None = None,
    node_names: Mapping[str, Sequence[str]] | None = None,
) -> Snapshot:
    """``capacity``: what backends that report it say of their pools; a pool never gets
    more nodes or GPUs per node than its configuration declares, but fewer when the backend
    sees fewer (drained or down nodes are not planned with). ``node_names``: the nodes of the
    pools the autoscaler sizes that are up and not draining (``controller.autoscaler``), which
    are then the pool's nodes."""
    capacity = capacity or {}
    node_names = node_names or {}
    used_devices: dict[str, set[int]] = defaultdict(set)
    used_cpus: dict[str, float] = defaultdict(float)
    used_memory: dict[str, float] = defaultdict(float)
    for job in running:
        for placement in job.placements:
            used_devices[placement.node].update(placement.devices)
            used_cpus[placement.node] += job.cpus
            used_memory[placement.node] += job.memory_gb
    pools = tuple(
        PoolView(
            name=pool.name,
            gpu_type=pool.gpu_type,
            backend=pool.backend,
            dedicated_to=pool.dedicated_to,
            gang=runs_gangs(pool.backend),
            nodes=tuple(
                NodeView(
                    name=name,
                    gpus=_gpus(pool, capacity.get(pool.name)),
                    cpus=pool.node.cpus,
                    memory_gb=pool.node.memory_gb,
                    used_devices=frozenset(used_devices.get(name, ())),
                    used_cpus=used_cpus.get(name, 0.0),
                    used_memory_gb=used_memory.get(name, 0.0),
                )
                for name in _names(pool, capacity.get(pool.name), node_names)
            ),
        )
        for pool in config.pools
    )
    teams = team_views(config, usage_history or {})
    # A team removed from the configuration keeps its jobs, but they cannot be scheduled.
    known = tuple(job for job in pending if job.team in teams)
    return Snapshot(
        now=now,
        pools=pools,
        teams=teams,
        running=tuple(running),
        pending=known,
        usage=held_gpus(running),
    )


def _names(
    pool: Pool, seen: PoolCapacity | None, sized: Mapping[str, Sequence[str]]
) -> Sequence[str]:
    """The pool's nodes: the autoscaler's when it sizes the pool (none at all included)."""
    if pool.name in sized:
        return sized[pool.name]
    return [node_name(pool.name, i) for i in range(_nodes(pool, seen))]


def _nodes(pool: Pool, seen: PoolCapacity | None) -> int:
    return pool.nodes if seen is None else min(pool.nodes, seen.nodes)


def _gpus(pool: Pool, seen: PoolCapacity | None) -> int:
    return pool.node.gpus if seen is None else min(pool.node.gpus, seen.gpus_per_node)


def preemption_policy(spec: Preemption) -> PreemptionPolicy:
    return PreemptionPolicy(
        within_team=WithinTeam(spec.within_team),
        reclaim=Reclaim(spec.reclaim),
        borrow_within_cohort=BorrowWithinCohort(spec.borrow_within_cohort.policy),
        borrow_max_priority_threshold=spec.borrow_within_cohort.max_priority_threshold,
    )


def policy_for(config: ClusterConfig) -> Policy:
    settings = config.scheduler
    return Policy(
        gpu_type_order=tuple(config.gpu_type_order()),
        preemption={
            name: preemption_policy(cohort.preemption) for name, cohort in config.cohorts.items()
        },
        default_preemption=preemption_policy(settings.preemption),
        preemption_budget=settings.preemption_budget,
        starvation_after_s=settings.starvation_after_s,
        queueing=Queueing(settings.queueing),
        max_preemptions_per_job=settings.max_preemptions_per_job,
        min_runtime_s=config.min_runtimes(),
        gpu_type_weights=config.fair_share_weights(),
    )


class PoolState:
    """The pools' node views kept up to date as attempts take and free devices, for callers
    that build a snapshot every few milliseconds (the simulator): a node's view is rebuilt
    only when something on it changed, instead of every node at every cycle. Devices only;
    cpus and memory of jobs are not tracked (the simulator's jobs ask for none). ``gang`` says
    whether a backend runs multi-node jobs (default: what its adapter declares).

    An autoscaled pool's nodes change (:meth:`set_nodes`): a node left out (draining) keeps
    the devices its attempts hold until they free them, but is no longer in the views."""

    def __init__(self, config: ClusterConfig, gang: Callable[[str], bool] = runs_gangs) -> None:
        self._config = config
        self._gang = gang
        self._at: dict[str, tuple[str, int]] = {}  # node in a view -> (pool, index in the pool)
        self._used: dict[str, set[int]] = defaultdict(set)
        self._views: dict[str, list[NodeView]] = {}
        self._shape = {pool.name: pool.node for pool in config.pools}
        self._dirty: set[str] = set()
        for pool in config.pools:
            self.set_nodes(pool.name, [node_name(pool.name, i) for i in range(pool.nodes)])

    def set_nodes(self, pool: str, names: Sequence[str]) -> None:
        """The nodes of ``pool`` the scheduler may place on are now ``names``."""
        for old in self._views.get(pool, ()):
            self._at.pop(old.name, None)
        shape = self._shape[pool]
        views = []
        for i, name in enumerate(names):
            self._at[name] = (pool, i)
            used = frozenset(self._used.get(name, ()))
            views.append(NodeView(name, shape.gpus, shape.cpus, shape.memory_gb, used))
        self._views[pool] = views
        self._dirty.difference_update(names)

    def take(self, placements: Sequence[Placement]) -> None:
        for placement in placements:
            self._used[placement.node].update(placement.devices)
            self._dirty.add(placement.node)

    def free(self, placements: Sequence[Placement]) -> None:
        for placement in placements:
            self._used[placement.node].difference_update(placement.devices)
            self._dirty.add(placement.node)

    def pools(self) -> tuple[PoolView, ...]:
        for name in self._dirty:
            found = self._at.get(name)
            if found is None:  # a node no longer in a view (drained, released)
                continue
            pool, index = found
            views = self._views[pool]
            views[index] = dataclasses.replace(
                views[index], used_devices=frozenset(self._used[name])
            )
        self._dirty.clear()
        return tuple(
            PoolView(
                name=pool.name,
                gpu_type=pool.gpu_type,
                backend=pool.backend,
                dedicated_to=pool.dedicated_to,
                nodes=tuple(self._views[pool.name]),
                gang=self._gang(pool.backend),
            )
            for pool in self._config.pools
        )


def team_views(config: ClusterConfig, usage_history: Mapping[str, float]) -> dict[str, TeamView]:
    """Each team's view with a quota for every gpu type: the configured GPUs, and the cap on its
    GPU-less work (:meth:`ClusterConfig.gpuless_caps`), so GPU-less jobs are bounded on every
    type, including those the team has no quota entry for."""
    caps = config.gpuless_caps()
    views = {}
    for name, team in config.teams.items():
        quota = {}
        for gpu_type, (cpus, memory_gb) in caps[name].items():
            q = team.quota.get(gpu_type)
            if q is None:
                quota[gpu_type] = QuotaView(cpus=cpus, memory_gb=memory_gb)
            else:
                quota[gpu_type] = QuotaView(
                    q.nominal, q.borrowing_limit, q.lending_limit, cpus, memory_gb
                )
        views[name] = TeamView(
            name=name,
            cohort=team.cohort,
            weight=team.weight,
            quota=quota,
            usage_history=usage_history.get(name, 0.0),
        )
    return views
