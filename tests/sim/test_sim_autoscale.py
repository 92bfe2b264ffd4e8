"""The simulator sizes autoscaled pools with the controller's autoscaler, and bills node-hours.

The cluster: one pool of at most two 4-GPU nodes at 2.00 per GPU-hour (0.50 on spot); a
node takes 100 s to come up and goes after 50 s idle. Times below are worked out by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from gpupool.sim.cluster import ClusterError, policy_setup, scaled
from gpupool.sim.engine import Outcome, simulate
from gpupool.sim.metrics import node_seconds, summarize
from gpupool.sim.spot import SpotModel
from gpupool.sim.trace import TraceJob
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, Quota, Team

CONFIG = ClusterConfig(
    gpu_types={"gpu": GpuType(price_per_gpu_hour=2.0, spot_price_per_gpu_hour=0.5)},
    pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=2, node=NodeShape(gpus=4))],
    teams={"a": Team(quota={"gpu": Quota(nominal=8)})},
)
TRACE = [
    TraceJob("j1", 0, 300, 4, "a"),
    TraceJob("j2", 0, 300, 4, "a"),
    TraceJob("j3", 1000, 100, 2, "a"),
]


@dataclass(frozen=True)
class Case:
    scaling: str
    runs: dict[str, tuple[float, float]]  # job -> (start, end)
    node_s: float  # node-seconds paid for over the run's span (0 .. 1200 s)
    price: float


CASES = [
    pytest.param(
        Case("fixed", {"j1": (0, 300), "j2": (0, 300), "j3": (1000, 1100)}, 2 * 1100, 2.0),
        id="fixed: two nodes for the whole span, nothing waits",
    ),
    pytest.param(
        # Two nodes asked for at 0, up at 100; idle from 400, released at 450; one asked for
        # at 1000 (j3), up at 1100; the run ends with j3 at 1200.
        Case(
            "autoscale",
            {"j1": (100, 400), "j2": (100, 400), "j3": (1100, 1200)},
            2 * 450 + 200,
            2.0,
        ),
        id="autoscale: jobs wait for nodes to come up; idle nodes go",
    ),
    pytest.param(
        Case(
            "autoscale-spot",
            {"j1": (100, 400), "j2": (100, 400), "j3": (1100, 1200)},
            2 * 450 + 200,
            0.5,
        ),
        id="autoscale on spot nodes: the same times at the spot price",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_sizes_and_bill(case: Case) -> None:
    config = scaled(CONFIG, case.scaling, provision_delay_s=100, idle_timeout_s=50)
    outcome = simulate(policy_setup(config, "gpupool"), TRACE, {"a": 8})
    runs = {r.trace.job_id: (r.first_start, r.end) for r in outcome.jobs}
    metrics = summarize(outcome)
    assert runs == case.runs
    assert metrics["node_hours"] == pytest.approx(case.node_s / 3600)
    gpu_s = case.node_s * 4
    assert metrics["capacity_cost"] == pytest.approx(gpu_s / 3600 * case.price)
    used = 4 * 300 * 2 + 2 * 100
    assert metrics["idle_gpu_hours"] == pytest.approx((gpu_s - used) / 3600)
    assert metrics["capacity_cost"] == pytest.approx(metrics["cost"] + metrics["idle_cost"])


def test_a_gang_larger_than_one_node_scales_the_pool_to_its_size() -> None:
    config = scaled(CONFIG, "autoscale", provision_delay_s=100, idle_timeout_s=50)
    outcome = simulate(policy_setup(config, "gpupool"), [TraceJob("g", 0, 60, 8, "a")], {"a": 8})
    (record,) = outcome.jobs
    assert (record.shape.nodes, record.first_start, record.end) == (2, 100, 160)
    assert outcome.pool_nodes["p"][:2] == [(0, 0), (0, 2)]  # asked for at once, both


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        pytest.param([], 0.0, id="never a node"),
        pytest.param([(0.0, 2), (450.0, 0), (1000.0, 1)], 2 * 450 + 200, id="down and up"),
        pytest.param([(-100.0, 3)], 3 * 1200, id="a change before the span counts from its start"),
    ],
)
def test_node_seconds(changes: list[tuple[float, int]], want: float) -> None:
    assert node_seconds(changes, 0.0, 1200.0) == want


def test_an_unknown_scaling_names_the_known_ones() -> None:
    with pytest.raises(ClusterError, match="use one of: configured, fixed, fixed-spot"):
        scaled(CONFIG, "elastic")


def test_spot_lifetimes_repeat_with_the_seed_and_never_come_at_rate_zero() -> None:
    def moments(seed: int) -> list[tuple[str, str]]:
        model = SpotModel(per_node_day=24.0, seed=seed)  # one eviction a node-hour
        model.track("p", ["p-0", "p-1"], 0.0)
        return model.due(10 * 3600.0)

    assert moments(1) == moments(1) and moments(1)
    never = SpotModel(0.0)
    never.track("p", ["p-0"], 0.0)
    assert never.next_eviction() == math.inf


@pytest.mark.parametrize("scaling", ["autoscale-spot", "fixed-spot"])
def test_spot_evictions_requeue_attempts_and_every_job_still_ends(scaling: str) -> None:
    """One eviction per node-hour on average against jobs of an hour: attempts are taken back
    and run again; an autoscaled pool replaces the node, a fixed pool gets it back at once."""
    config = scaled(CONFIG, scaling, provision_delay_s=100, idle_timeout_s=50)
    trace = [TraceJob(f"j{i}", i * 600.0, 3600.0, 4, "a") for i in range(6)]

    def run() -> Outcome:
        setup = policy_setup(config, "gpupool")
        return simulate(setup, trace, {"a": 8}, spot_evictions_per_node_day=24.0, seed=7)

    outcome = run()
    assert all(r.end is not None for r in outcome.jobs)
    assert outcome.evictions == sum(r.evicted for r in outcome.jobs) > 0
    for record in outcome.jobs:
        assert record.attempts == 1 + record.evicted  # no preemption here: evictions only
        assert (record.lost_gpu_s > 0) == (record.evicted > 0)
    assert summarize(outcome)["evictions"] == outcome.evictions
    again = run()
    assert [(r.first_start, r.end) for r in again.jobs] == [
        (r.first_start, r.end) for r in outcome.jobs
    ]
