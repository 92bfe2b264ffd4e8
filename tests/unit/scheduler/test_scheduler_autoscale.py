"""The autoscaling decision (gpupool.scheduler.autoscale): tables of pools and waiting jobs,
and its invariants over random pools."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.scheduler import PendingJob, PendingReason
from gpupool.scheduler.autoscale import (
    NodePhase,
    PoolNode,
    ScaleDecision,
    ScaledPool,
    ScaleSettings,
    Want,
    decide,
    demand_by_pool,
)
from gpupool.scheduler.snapshot import ReasonCode

NOW = 10_000.0


def pool(
    min_nodes: int = 0, max_nodes: int = 4, warm: int = 0, idle_s: float = 600
) -> ScaleSettings:
    """A pool of 8-GPU nodes (64 cpus, 512 GB)."""
    return ScaleSettings(min_nodes, max_nodes, 8, 64.0, 512.0, warm, idle_s)


def up(name: str, gpus: int = 0, idle_for: float | None = None) -> PoolNode:
    """A ready node holding ``gpus`` GPUs, or idle for ``idle_for`` seconds (gpus 0)."""
    since = None if idle_for is None else NOW - idle_for
    return PoolNode(name, NodePhase.READY, used_gpus=gpus, idle_since=since)


def coming(name: str) -> PoolNode:
    return PoolNode(name, NodePhase.PROVISIONING)


def draining(name: str, gpus: int = 0) -> PoolNode:
    since = None if gpus else NOW
    return PoolNode(name, NodePhase.DRAINING, used_gpus=gpus, idle_since=since)


def job(name: str, gpus: int, nodes: int = 1) -> Want:
    return Want(name, gpus, nodes)


@dataclass(frozen=True)
class Case:
    settings: ScaleSettings
    nodes: list[PoolNode]
    demand: list[Want]
    target: int
    add: int = 0
    drain: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    served: set[str] = field(default_factory=set)


CASES = [
    pytest.param(Case(pool(), [], [], target=0), id="empty pool, nothing waiting: stays at zero"),
    pytest.param(
        Case(pool(), [], [job("a", 4)], target=1, add=1, served={"a"}),
        id="from zero: one job asks for one node",
    ),
    pytest.param(
        Case(pool(), [], [job("a", 4), job("b", 4), job("c", 4)], 2, add=2, served={"a", "b", "c"}),
        id="three half-node jobs pack onto two nodes",
    ),
    pytest.param(
        Case(pool(), [], [job("g", 8, nodes=3)], target=3, add=3, served={"g"}),
        id="a gang of three whole nodes asks for three",
    ),
    pytest.param(
        Case(pool(max_nodes=2), [], [job("g", 8, nodes=3)], target=0),
        id="a gang larger than max_nodes is not served by scaling",
    ),
    pytest.param(
        Case(pool(), [], [job("big", 16)], target=0),
        id="a job no node of the shape could hold is left out",
    ),
    pytest.param(
        Case(pool(), [up("p-0", gpus=4)], [job("a", 4)], target=1, served={"a"}),
        id="waiting work fits the free room of a busy node: no new node",
    ),
    pytest.param(
        Case(pool(), [coming("p-0")], [job("a", 8)], target=1, served={"a"}),
        id="a node coming up counts: no second node for the same job",
    ),
    pytest.param(
        Case(pool(warm=1), [], [], target=1, add=1),
        id="warm floor: one node kept up while idle",
    ),
    pytest.param(
        Case(
            pool(max_nodes=2), [], [job("a", 8), job("b", 8), job("c", 8)], 2, 2, served={"a", "b"}
        ),
        id="max_nodes caps the target; the third job waits",
    ),
    pytest.param(
        Case(pool(), [up("p-0", 8), up("p-1", idle_for=60)], [], target=1),
        id="an idle node is kept until its idle timeout",
    ),
    pytest.param(
        Case(pool(), [up("p-0", 8), up("p-1", idle_for=700)], [], target=1, drain=("p-1",)),
        id="an idle node past its timeout is drained",
    ),
    pytest.param(
        Case(
            pool(), [up("p-0", idle_for=700), up("p-1", idle_for=900)], [], 0, drain=("p-1", "p-0")
        ),
        id="scale to zero: longest idle first",
    ),
    pytest.param(
        Case(
            pool(min_nodes=1),
            [up("p-0", idle_for=700), up("p-1", idle_for=900)],
            [],
            1,
            drain=("p-1",),
        ),
        id="min_nodes holds the floor",
    ),
    pytest.param(
        Case(pool(), [up("p-0", idle_for=900)], [job("a", 2)], target=1, served={"a"}),
        id="an idle node a waiting job fits on is not drained",
    ),
    pytest.param(
        Case(
            pool(),
            [up("p-0", 8), draining("p-1", gpus=2)],
            [job("a", 8)],
            2,
            keep=("p-1",),
            served={"a"},
        ),
        id="demand returns: a draining node is taken back before a new one is asked for",
    ),
    pytest.param(
        Case(
            pool(max_nodes=3),
            [up("p-0", 8), up("p-1", 8), draining("p-2", 8)],
            [job("a", 8), job("b", 8)],
            3,
            keep=("p-2",),
            served={"a"},
        ),
        id="draining nodes count towards max_nodes",
    ),
    pytest.param(
        Case(pool(), [coming("p-0")], [], target=1),
        id="a node coming up is never drained",
    ),
    pytest.param(
        Case(
            pool(max_nodes=1),
            [up("p-0", 8), up("p-1", 2), up("p-2", 6)],
            [],
            1,
            drain=("p-1", "p-2"),
        ),
        id="max_nodes lowered below the busy nodes: the emptiest are drained",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_decision(case: Case) -> None:
    got = decide(case.settings, case.nodes, case.demand, NOW)
    assert (got.target, got.add, got.drain, got.keep) == (
        case.target,
        case.add,
        case.drain,
        case.keep,
    ), got.reason
    assert set(got.served) == case.served


phases = st.sampled_from(list(NodePhase))
random_nodes = st.lists(st.tuples(phases, st.integers(0, 8), st.integers(0, 2000)), max_size=6)
random_demand = st.lists(st.tuples(st.integers(0, 9), st.integers(1, 3)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    spec=random_nodes,
    wants=random_demand,
    bounds=st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(0, 3)),
)
def test_invariants(
    spec: list[tuple[NodePhase, int, int]],
    wants: list[tuple[int, int]],
    bounds: tuple[int, int, int],
) -> None:
    low, high, warm = bounds
    scale = pool(min(low, high), high, min(warm, high))
    nodes = [
        PoolNode(
            f"p-{i}",
            phase,
            used_gpus=0 if phase is NodePhase.PROVISIONING else used,
            idle_since=None if used and phase is not NodePhase.PROVISIONING else NOW - idle,
        )
        for i, (phase, used, idle) in enumerate(spec)
    ]
    nodes = [
        n if n.phase is not NodePhase.PROVISIONING else PoolNode(n.name, n.phase) for n in nodes
    ]
    demand = [job(f"j{i}", gpus, count) for i, (gpus, count) in enumerate(wants)]
    got: ScaleDecision = decide(scale, nodes, demand, NOW)
    by_name = {n.name: n for n in nodes}
    assert 0 <= got.target <= scale.max_nodes
    # Never asks past max_nodes, draining nodes counted.
    assert got.add == 0 or len(nodes) + got.add <= scale.max_nodes
    for name in got.drain:
        node = by_name[name]
        assert node.phase is NodePhase.READY  # neither one coming up nor one draining already
        if node.busy:  # a busy node is drained only when the pool is above max_nodes
            live = [n for n in nodes if n.phase is not NodePhase.DRAINING]
            assert len(live) > scale.max_nodes
        else:
            assert NOW - (node.idle_since or NOW) >= scale.idle_timeout_s
    assert all(by_name[name].phase is NodePhase.DRAINING for name in got.keep)
    assert not (got.drain and (got.add or got.keep))


def scaled_pool(name: str, gpu_type: str = "t4", **fields: object) -> ScaledPool:
    return ScaledPool(name, gpu_type, "local", pool(), **fields)  # type: ignore[arg-type]


def waiting(team: str = "a", nodes: int = 1, backend: str | None = None) -> PendingJob:
    return PendingJob("j", team, 0, 0.0, gpus=2, nodes=nodes, backend=backend)


def why(*reasons: tuple[str, ReasonCode]) -> tuple[PendingReason, ...]:
    return tuple(PendingReason(t, code, "") for t, code in reasons)


T4_CAPACITY = why(("t4", ReasonCode.CAPACITY))


@pytest.mark.parametrize(
    ("pools", "job", "reasons", "want"),
    [
        pytest.param([scaled_pool("p")], waiting(), T4_CAPACITY, "p", id="waits for room: counts"),
        pytest.param([scaled_pool("p")], waiting(), why(("t4", ReasonCode.TOO_LARGE)), "p",
                     id="too large for the pool scaled in: counts"),
        pytest.param([scaled_pool("p")], waiting(), why(("t4", ReasonCode.QUOTA)), None,
                     id="waits on its quota: more nodes would not help"),
        pytest.param([scaled_pool("p")], waiting(), why(("t4", ReasonCode.PREEMPTING)), None,
                     id="its victims are ending: room is on its way"),
        pytest.param([scaled_pool("q"), scaled_pool("p")], waiting(), T4_CAPACITY, "p",
                     id="two pools could: the first by name, once"),
        pytest.param([scaled_pool("p", dedicated_to="b"), scaled_pool("q")], waiting(),
                     T4_CAPACITY, "q", id="a pool dedicated to another team is skipped"),
        pytest.param([scaled_pool("p")], waiting(backend="slurm"), T4_CAPACITY, None,
                     id="pinned to another backend"),
        pytest.param([scaled_pool("p", gang=False)], waiting(nodes=2), T4_CAPACITY, None,
                     id="a gang on a backend that runs none"),
        pytest.param([scaled_pool("p"), scaled_pool("h", "h100")], waiting(),
                     why(("h100", ReasonCode.QUOTA), ("t4", ReasonCode.CAPACITY)), "p",
                     id="the first type on which it waits for room"),
    ],
)  # fmt: skip
def test_which_pool_a_waiting_job_counts_for(
    pools: list[ScaledPool], job: PendingJob, reasons: tuple[PendingReason, ...], want: str | None
) -> None:
    demand = demand_by_pool(pools, [(job, reasons)])
    assert {name for name, wants in demand.items() if wants} == ({want} if want else set())
