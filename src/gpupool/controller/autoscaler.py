"""The autoscaler: the nodes of the autoscaled pools the controller sizes itself (R4).

For each pool with ``autoscale.mode: autoscale`` on a backend the controller sizes
(``spec.checks.AUTOSCALED_BY_CONTROLLER``: ``local``), this keeps the pool's nodes and their
phase, and at each step applies :func:`gpupool.scheduler.autoscale.decide`:

* a node asked for is *provisioning* for ``provision_delay_s``, then *ready*; the scheduler plans
  only with ready nodes (:meth:`Autoscaler.ready_nodes`), so nothing is admitted to a node that
  is not up;
* a node picked for scale-down is *draining*: it is left out of the snapshot, so no new attempt
  goes there, while the attempts on it run on (their placements keep holding their quota); it is
  released once none is left;
* a node the provider took back (an attempt on it was evicted) is forgotten at once.

Node names are ``<pool>-<i>`` with the lowest index not in use, as fixed pools name theirs.

The simulator drives the same class on its virtual clock. Nothing here does I/O: the caller
passes the running attempts and the waiting jobs with their last reasons.

Invariants: a pool never has more than ``max_nodes`` nodes in any phase; a node that holds an
attempt is never released; a node an attempt runs on but the autoscaler does not know (a
restart: this memory is not stored) is adopted as ready, so a restarted controller starts
from the nodes its running attempts hold and asks for the rest again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.backends.registry import runs_gangs
from gpupool.scheduler import PendingJob, PendingReason, RunningJob
from gpupool.scheduler.autoscale import (
    Matcher,
    NodePhase,
    PoolNode,
    ScaleDecision,
    ScaledPool,
    ScaleSettings,
    Want,
    decide,
    want_of,
)
from gpupool.spec.checks import AUTOSCALED_BY_CONTROLLER
from gpupool.spec.models import ClusterConfig, Pool

log = logging.getLogger(__name__)


def managed(pool: Pool) -> bool:
    """Whether the controller sizes ``pool`` (see the module docstring)."""
    return pool.autoscale.mode == "autoscale" and pool.backend in AUTOSCALED_BY_CONTROLLER


def scale_settings(pool: Pool) -> ScaleSettings:
    scale = pool.autoscale
    most = pool.nodes if scale.max_nodes is None else scale.max_nodes
    return ScaleSettings(
        min_nodes=min(scale.min_nodes, most),
        max_nodes=most,
        gpus=pool.node.gpus,
        cpus=pool.node.cpus,
        memory_gb=pool.node.memory_gb,
        warm_nodes=min(scale.warm_nodes, most),
        idle_timeout_s=float(scale.idle_timeout_s),
    )


@dataclass
class Node:
    name: str
    phase: NodePhase
    ready_at: float = 0.0  # when a provisioning node comes up
    idle_since: float | None = None  # None while it holds an attempt


@dataclass(frozen=True)
class PoolScale:
    """What ``/v1/pools`` and the logs say of one autoscaled pool."""

    target: int
    ready: int
    provisioning: int
    draining: int
    reason: str


class Autoscaler:
    """The autoscaled pools' nodes (see the module docstring). Driven from one thread."""

    def __init__(
        self,
        sizes: Callable[[Pool], bool] = managed,
        gang: Callable[[str], bool] = runs_gangs,
    ) -> None:
        """``sizes``: which pools it sizes (the simulator sizes every autoscaled pool, all
        served by its simulated backend); ``gang``: whether a backend runs multi-node jobs."""
        self._sizes = sizes
        self._gang = gang
        self._nodes: dict[str, dict[str, Node]] = {}  # pool -> name -> node
        self.status: dict[str, PoolScale] = {}
        self._ready: dict[str, tuple[str, ...]] = {}  # pool -> its ready nodes, by index
        # The last running attempts stepped with (the same tuple: the same usage).
        self._seen: tuple[Sequence[RunningJob], dict[str, dict[str, tuple[int, float, float]]]]
        self._seen = ((), {})
        self._matcher: Matcher | None = None
        # job id -> (its reasons when matched, the pool it counts for, the job as matched)
        self._matched: dict[str, tuple[tuple[PendingReason, ...], str | None, PendingJob]] = {}

    def forget(self) -> None:
        """A new term: another controller may have sized the pools meanwhile. Start over from
        the nodes the active attempts hold (adopted at the next step)."""
        self._nodes.clear()
        self._ready.clear()
        self.status.clear()
        self._seen = ((), {})
        self._matcher = None
        self._matched = {}

    def ready_nodes(self, config: ClusterConfig) -> dict[str, tuple[str, ...]]:
        """Per autoscaled pool, the names of the nodes the scheduler may place attempts on."""
        return {p.name: self._ready.get(p.name, ()) for p in config.pools if self._sizes(p)}

    def _refresh_ready(self, pool: str) -> None:
        nodes = self._nodes.get(pool, {}).values()
        ready = [n.name for n in nodes if n.phase is NodePhase.READY]
        self._ready[pool] = tuple(sorted(ready, key=_index))

    def node_names(self, pool: str) -> tuple[str, ...]:
        """Every node ``pool`` pays for now: up, coming up or draining."""
        return tuple(self._nodes.get(pool, {}))

    def node_counts(self, config: ClusterConfig) -> dict[str, int]:
        """Per autoscaled pool, the nodes it pays for now: up, coming up or draining."""
        return {p.name: len(self._nodes.get(p.name, ())) for p in config.pools if self._sizes(p)}

    def next_change(self, config: ClusterConfig, now: float) -> float:
        """The next moment a step would change something by time alone: a node comes up, or
        an idle node reaches its idle timeout (``inf``: none). For callers that step only on
        events (the simulator)."""
        moments = [math.inf]
        for pool in config.pools:
            timeout = float(pool.autoscale.idle_timeout_s)
            for node in self._nodes.get(pool.name, {}).values():
                if node.phase is NodePhase.PROVISIONING:
                    moments.append(node.ready_at)
                elif node.phase is NodePhase.READY and node.idle_since is not None:
                    moments.append(node.idle_since + timeout)
        return min((m for m in moments if m > now), default=math.inf)

    def evicted(self, pool: str, nodes: Iterable[str]) -> None:
        """The provider took ``nodes`` of ``pool`` back: they are gone."""
        known = self._nodes.get(pool, {})
        for name in nodes:
            if known.pop(name, None) is not None:
                log.info("pool %s: node %s was taken back by its provider", pool, name)
        self._refresh_ready(pool)

    def step(
        self,
        config: ClusterConfig,
        running: Sequence[RunningJob],
        waiting: Callable[[], Iterable[tuple[PendingJob, tuple[PendingReason, ...]]]],
        now: float,
    ) -> bool:
        """Bring every autoscaled pool's nodes one step towards its target; True when the
        nodes the scheduler may use changed. ``waiting()`` lists the queued jobs with their
        last reasons; it is called only when some pool could still grow or shrink (a pool
        with its most nodes, all up and busy, can do neither, whatever waits)."""
        pools = [p for p in config.pools if self._sizes(p)]
        for gone in set(self._nodes) - {p.name for p in pools}:
            del self._nodes[gone]
            self.status.pop(gone, None)
            self._ready.pop(gone, None)
        if not pools:
            return False
        before = self.ready_nodes(config)
        if self._seen[0] is not running:
            self._seen = (running, _usage(running))
        usage = self._seen[1]
        settings = {p.name: scale_settings(p) for p in pools}
        scaled = [
            ScaledPool(
                p.name,
                p.gpu_type,
                p.backend,
                settings[p.name],
                p.dedicated_to,
                self._gang(p.backend),
            )
            for p in pools
        ]
        for pool in pools:
            nodes = self._nodes.setdefault(pool.name, {})
            self._observe(pool, nodes, usage.get(pool.name, {}), now)
        demand: dict[str, list[Want]] = {p.name: [] for p in pools}
        if not all(
            _saturated(self._nodes[p.name], usage.get(p.name, {}), settings[p.name]) for p in pools
        ):
            demand = self._demand(scaled, waiting())
        for pool in pools:
            nodes = self._nodes[pool.name]
            used = usage.get(pool.name, {})
            decision = decide(settings[pool.name], _views(nodes, used), demand[pool.name], now)
            self._apply(pool, nodes, decision, used, now)
            self._refresh_ready(pool.name)
        return self.ready_nodes(config) != before

    def _demand(
        self,
        scaled: Sequence[ScaledPool],
        waiting: Iterable[tuple[PendingJob, tuple[PendingReason, ...]]],
    ) -> dict[str, list[Want]]:
        """:func:`~gpupool.scheduler.autoscale.demand_by_pool`, remembering each job's pool
        while its reasons are the same object (the controller and the simulator keep a
        waiting job's reasons tuple until they change), so a long queue costs a lookup a job."""
        if self._matcher is None or self._matcher.pools != tuple(sorted(scaled, key=_name)):
            self._matcher = Matcher(scaled)
            self._matched = {}
        matched, seen = self._matched, {}
        demand: dict[str, list[Want]] = {p.name: [] for p in scaled}
        for job, reasons in waiting:
            hit = matched.get(job.id)
            if hit is None or hit[0] is not reasons or hit[2] is not job:
                hit = (reasons, self._matcher.pool_for(job, reasons), job)
            seen[job.id] = hit
            if hit[1] is not None:
                demand[hit[1]].append(want_of(job))
        self._matched = seen
        return demand

    def _observe(
        self,
        pool: Pool,
        nodes: dict[str, Node],
        used: Mapping[str, tuple[int, float, float]],
        now: float,
    ) -> None:
        """Nodes come up, idle clocks start and stop, empty draining nodes are released."""
        for name in used:  # attempts on a node this memory does not know: adopt it
            if name not in nodes:
                nodes[name] = Node(name, NodePhase.READY)
        for node in list(nodes.values()):
            if node.phase is NodePhase.PROVISIONING and node.ready_at <= now:
                node.phase = NodePhase.READY
                node.idle_since = None  # its idle clock starts now that it is up
                log.info("pool %s: node %s is up", pool.name, node.name)
            if node.phase is NodePhase.PROVISIONING:
                continue
            if node.name in used:
                node.idle_since = None
            elif node.idle_since is None:
                node.idle_since = now
            if node.phase is NodePhase.DRAINING and node.name not in used:
                del nodes[node.name]
                log.info("pool %s: drained node %s released", pool.name, node.name)

    def _apply(
        self,
        pool: Pool,
        nodes: dict[str, Node],
        decision: ScaleDecision,
        used: Mapping[str, tuple[int, float, float]],
        now: float,
    ) -> None:
        for name in decision.keep:
            nodes[name].phase = NodePhase.READY
        for name in decision.drain:
            if name in used:
                nodes[name].phase = NodePhase.DRAINING
                log.info("pool %s: draining node %s (%s)", pool.name, name, decision.reason)
            else:
                del nodes[name]
                log.info("pool %s: released idle node %s (%s)", pool.name, name, decision.reason)
        delay = pool.autoscale.provision_delay_s
        for _ in range(decision.add):
            name = _free_name(pool.name, nodes)
            phase = NodePhase.READY if delay <= 0 else NodePhase.PROVISIONING
            nodes[name] = Node(name, phase, ready_at=now + delay, idle_since=now)
            log.info("pool %s: node %s asked for (%s)", pool.name, name, decision.reason)
        phases = [n.phase for n in nodes.values()]
        self.status[pool.name] = PoolScale(
            target=decision.target,
            ready=phases.count(NodePhase.READY),
            provisioning=phases.count(NodePhase.PROVISIONING),
            draining=phases.count(NodePhase.DRAINING),
            reason=decision.reason,
        )


def _saturated(
    nodes: Mapping[str, Node], used: Mapping[str, tuple[int, float, float]], scale: ScaleSettings
) -> bool:
    """Every node up and busy, and as many as the pool may have: no demand changes a thing."""
    live = [n for n in nodes.values() if n.phase is not NodePhase.DRAINING]
    return len(live) >= scale.max_nodes and all(
        n.phase is NodePhase.READY and n.name in used for n in live
    )


def _name(pool: ScaledPool) -> str:
    return pool.name


def _usage(running: Sequence[RunningJob]) -> dict[str, dict[str, tuple[int, float, float]]]:
    """Per pool, the GPUs, cpus and GB held on each node by the active attempts."""
    usage: dict[str, dict[str, tuple[int, float, float]]] = {}
    for job in running:
        used = usage.setdefault(job.pool, {})
        for placement in job.placements:
            gpus, cpus, memory = used.get(placement.node, (0, 0.0, 0.0))
            used[placement.node] = (
                gpus + len(placement.devices),
                cpus + job.cpus,
                memory + job.memory_gb,
            )
    return usage


def _views(
    nodes: Mapping[str, Node], used: Mapping[str, tuple[int, float, float]]
) -> list[PoolNode]:
    views = []
    for node in nodes.values():
        gpus, cpus, memory = used.get(node.name, (0, 0.0, 0.0))
        since = None if node.phase is NodePhase.PROVISIONING else node.idle_since
        views.append(PoolNode(node.name, node.phase, gpus, cpus, memory, since))
    return views


def _free_name(pool: str, nodes: Mapping[str, Node]) -> str:
    index = 0
    while f"{pool}-{index}" in nodes:
        index += 1
    return f"{pool}-{index}"


def _index(name: str) -> int:
    """The index of a node name ``<pool>-<i>`` (-1 if it has none)."""
    tail = name.rpartition("-")[2]
    return int(tail) if tail.isdigit() else -1
