"""Physical room: the mutable working copy of one pool's nodes during one cycle
(docs/architecture.md §5.4).

A :class:`PoolRoom` is built from an immutable :class:`PoolView` and then changed by each
admission of the cycle, so later decisions in the same cycle see earlier ones.

Invariants:

* A node's free devices are ``range(node.gpus) - used_devices``, kept sorted; a placement takes
  the lowest ones, and a device is never handed out twice.
* ``_by_free[k]`` holds, sorted, the indices of exactly the nodes with ``k`` free devices. Nodes
  are indexed in name order, so walking ``k`` upwards and each bucket in order visits nodes from
  most to least allocated, then by name: the packing order.
* Free room only shrinks, except through :meth:`PoolRoom.release` (what-if removal of a running
  job or a reservation's hold), which forgets remembered failures. So a request that failed stays
  failed while no room was released, and so does every request at least as large in every
  dimension: ``_failed`` remembers a few such shapes to reject repeats in O(1).
* :meth:`PoolRoom.release` and :meth:`PoolRoom.occupy` move exact devices and amounts, recorded
  in a :class:`Held`, so every what-if can be undone exactly (docs/code-style.md §3).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from functools import cache
from operator import attrgetter

from gpupool.scheduler.snapshot import NodeView, Placement, PoolView

# Free cpus and memory are floats that admissions subtract from; the tolerance keeps a job that
# needs exactly what is left (up to rounding) from being refused.
_EPSILON = 1e-9
_MAX_FAILED_SHAPES = 16  # enough for the few distinct job shapes of real queues; bounds the scan


@dataclass(frozen=True, slots=True)
class Shape:
    """What one job needs: ``nodes`` distinct nodes, each with this many GPUs, cpus and GB."""

    gpus: int
    nodes: int
    cpus: float
    memory_gb: float

    def covers(self, other: Shape) -> bool:
        """True when ``other`` needs at least as much as ``self`` in every dimension."""
        return (
            self.gpus <= other.gpus
            and self.nodes <= other.nodes
            and self.cpus <= other.cpus
            and self.memory_gb <= other.memory_gb
        )


_BY_NAME = attrgetter("name")


class NodeRoom:
    """The free room of one node; see the module invariants."""

    __slots__ = ("free_cpus", "free_devices", "free_memory_gb", "view")

    def __init__(self, view: NodeView) -> None:
        self.view = view
        used, gpus = view.used_devices, view.gpus
        # Empty and full nodes (most of them) skip the per-device test.
        if not used:
            self.free_devices = list(range(gpus))
        elif len(used) >= gpus and used.issuperset(_all_devices(gpus)):
            self.free_devices = []
        else:
            self.free_devices = [d for d in range(gpus) if d not in used]
        self.free_cpus = view.cpus - view.used_cpus
        self.free_memory_gb = view.memory_gb - view.used_memory_gb

    def has_room(self, shape: Shape) -> bool:
        return (
            len(self.free_devices) >= shape.gpus
            and self.free_cpus + _EPSILON >= shape.cpus
            and self.free_memory_gb + _EPSILON >= shape.memory_gb
        )

    def could_ever_hold(self, shape: Shape) -> bool:
        """True when the empty node would have room: the job is not too large for it."""
        view = self.view
        return (
            view.gpus >= shape.gpus
            and view.cpus + _EPSILON >= shape.cpus
            and view.memory_gb + _EPSILON >= shape.memory_gb
        )


@cache
def _all_devices(gpus: int) -> frozenset[int]:
    return frozenset(range(gpus))


@dataclass(frozen=True, slots=True)
class Held:
    """Exact room of one node moved outside an admission: freed by a what-if removal, or taken
    by a hold (a reservation or a preemptor's share of free room)."""

    pool: PoolRoom
    index: int
    devices: tuple[int, ...]
    cpus: float
    memory_gb: float


@dataclass(frozen=True, slots=True)
class NodePick:
    """Nodes of one pool that can hold a job, and how tightly it packs there.

    ``slack`` is the number of free GPUs on the picked nodes before placement: lower packs better.
    """

    pool: PoolRoom
    nodes: tuple[int, ...]
    slack: int


class PoolRoom:
    """One pool's nodes and their free room; see the module invariants."""

    __slots__ = (
        "_by_free",
        "_failed",
        "_fits_empty",
        "_fits_every",
        "_index",
        "nodes",
        "total_gpus",
        "view",
    )

    def __init__(self, view: PoolView) -> None:
        self.view = view
        self.nodes = list(map(NodeRoom, sorted(view.nodes, key=_BY_NAME)))
        self.total_gpus = sum(n.gpus for n in view.nodes)
        top = max((n.gpus for n in view.nodes), default=0)
        self._by_free: list[list[int]] = [[] for _ in range(top + 1)]
        for index, node in enumerate(self.nodes):
            self._by_free[len(node.free_devices)].append(index)
        self._failed: list[Shape] = []
        self._fits_empty: dict[Shape, bool] = {}
        self._fits_every: dict[Shape, bool] = {}
        self._index = {node.view.name: index for index, node in enumerate(self.nodes)}

    @property
    def name(self) -> str:
        return self.view.name

    def node_index(self, name: str) -> int | None:
        return self._index.get(name)

    def usable_by(self, team: str) -> bool:
        return self.view.dedicated_to is None or self.view.dedicated_to == team

    def could_ever_hold(self, shape: Shape) -> bool:
        """True when the pool, empty, would have ``shape.nodes`` nodes large enough, and its
        backend runs multi-node jobs if the shape has more than one node."""
        known = self._fits_empty.get(shape)
        if known is None:
            if shape.nodes > 1 and not self.view.gang:
                known = self._fits_empty[shape] = False
                return known
            large = 0
            for node in self.nodes:  # stops as soon as enough nodes are large enough
                if node.could_ever_hold(shape):
                    large += 1
                    if large >= shape.nodes:
                        break
            known = self._fits_empty[shape] = large >= shape.nodes
        return known

    def every_node_could_hold(self, shape: Shape) -> bool:
        """True when each node, empty, would have room for one member of ``shape``."""
        known = self._fits_every.get(shape)
        if known is None:
            known = self._fits_every[shape] = all(n.could_ever_hold(shape) for n in self.nodes)
        return known

    def max_free_gpus(self) -> int:
        """The most free GPUs on any one node (for messages)."""
        for k in range(len(self._by_free) - 1, -1, -1):
            if self._by_free[k]:
                return k
        return 0

    def count_nodes_with(self, gpus: int, extra: dict[str, int]) -> int:
        """How many nodes would have ``gpus`` free devices if each node named in ``extra`` had
        that many more free (devices only: a cheap upper bound for what-if searches).

        Reads the buckets for nodes already free enough and visits only the named nodes.
        """
        if gpus <= 0:
            return len(self.nodes)
        if len(self._index) != len(self.nodes):  # duplicate node names: count by name, slowly
            return sum(
                1
                for node in self.nodes
                if len(node.free_devices) + extra.get(node.view.name, 0) >= gpus
            )
        count = sum(len(bucket) for bucket in self._by_free[gpus:])
        for name, more in extra.items():
            index = self._index.get(name)
            if index is not None and len(self.nodes[index].free_devices) < gpus:
                count += len(self.nodes[index].free_devices) + more >= gpus
        return count

    def roomy_nodes(self, shape: Shape) -> list[int]:
        """The first ``shape.nodes`` nodes, in packing order, with room for one member of
        ``shape`` now."""
        found: list[int] = []
        for bucket in self._by_free[shape.gpus :] if shape.gpus < len(self._by_free) else []:
            for index in bucket:
                if self.nodes[index].has_room(shape):
                    found.append(index)
                    if len(found) == shape.nodes:
                        return found
        return found

    def pick(self, shape: Shape) -> NodePick | None:
        """The most allocated nodes that can hold ``shape`` (fewest free GPUs, then name)."""
        for failed in self._failed:  # a plain loop: this runs for every pool of every job
            if failed.covers(shape):
                return None
        buckets = self._by_free[shape.gpus :] if shape.gpus < len(self._by_free) else []
        nodes, wanted = self.nodes, shape.nodes
        # Counting first rejects most impossible gangs without touching a single node.
        if wanted == 1 or sum(map(len, buckets)) >= wanted:
            picked: list[int] = []
            slack = 0
            for free, bucket in enumerate(buckets, start=shape.gpus):
                for index in bucket:
                    if nodes[index].has_room(shape):
                        if wanted == 1:
                            return NodePick(self, (index,), free)
                        picked.append(index)
                        slack += free
                        if len(picked) == wanted:
                            return NodePick(self, tuple(picked), slack)
        self._remember_failure(shape)
        return None

    def take(self, nodes: tuple[int, ...], shape: Shape) -> tuple[Placement, ...]:
        """Commit a pick: hand out the lowest free devices and the cpus and memory of each node."""
        placements = []
        for index in nodes:
            node = self.nodes[index]
            before = len(node.free_devices)
            devices = tuple(node.free_devices[: shape.gpus])
            del node.free_devices[: shape.gpus]
            node.free_cpus -= shape.cpus
            node.free_memory_gb -= shape.memory_gb
            self._rebucket(index, before)
            placements.append(Placement(node.view.name, devices))
        return tuple(placements)

    def release(self, index: int, devices: tuple[int, ...], cpus: float, memory_gb: float) -> Held:
        """Free these devices (those in use) and up to this much cpus and memory of one node.

        Returns exactly what was freed, for :meth:`occupy` to take back. Room grows, so the
        remembered failures are dropped (see :meth:`failures` to keep them across a what-if).
        """
        node = self.nodes[index]
        before = len(node.free_devices)
        free = set(node.free_devices)
        freed = tuple(d for d in sorted(set(devices)) if 0 <= d < node.view.gpus and d not in free)
        for device in freed:
            insort(node.free_devices, device)
        # Clamped at what is in use: a snapshot whose jobs claim more than the node has used
        # must not make the node look larger than it is.
        cpus = max(0.0, min(cpus, node.view.cpus - node.free_cpus))
        memory_gb = max(0.0, min(memory_gb, node.view.memory_gb - node.free_memory_gb))
        node.free_cpus += cpus
        node.free_memory_gb += memory_gb
        self._rebucket(index, before)
        self._failed.clear()
        return Held(self, index, freed, cpus, memory_gb)

    def occupy(self, held: Held) -> None:
        """Take exactly ``held``'s room, which must be free (undoes :meth:`release`)."""
        node = self.nodes[held.index]
        before = len(node.free_devices)
        for device in held.devices:
            del node.free_devices[bisect_left(node.free_devices, device)]
        node.free_cpus -= held.cpus
        node.free_memory_gb -= held.memory_gb
        self._rebucket(held.index, before)

    def hold(self, index: int, devices: tuple[int, ...], cpus: float, memory_gb: float) -> Held:
        """Take those of ``devices`` that are free and up to this much free cpus and memory."""
        node = self.nodes[index]
        free = set(node.free_devices)
        held = Held(
            self,
            index,
            tuple(d for d in sorted(set(devices)) if d in free),
            max(0.0, min(cpus, node.free_cpus)),
            max(0.0, min(memory_gb, node.free_memory_gb)),
        )
        self.occupy(held)
        return held

    def failures(self) -> list[Shape]:
        """The remembered failures, to restore with :meth:`restore_failures` after a what-if."""
        return list(self._failed)

    def restore_failures(self, failed: list[Shape]) -> None:
        """Only valid when the room is back to what it was when ``failed`` was saved."""
        self._failed = failed

    def _rebucket(self, index: int, before: int) -> None:
        after = len(self.nodes[index].free_devices)
        if after != before:
            bucket = self._by_free[before]
            del bucket[bisect_left(bucket, index)]
            insort(self._by_free[after], index)

    def _remember_failure(self, shape: Shape) -> None:
        if any(failed.covers(shape) for failed in self._failed):
            return
        # Keep only the minimal failed shapes: a new, smaller one makes larger ones redundant.
        self._failed = [failed for failed in self._failed if not shape.covers(failed)]
        if len(self._failed) < _MAX_FAILED_SHAPES:
            self._failed.append(shape)
