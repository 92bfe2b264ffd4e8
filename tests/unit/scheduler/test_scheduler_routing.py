"""Routing (R2, Q5): a job pinned to a backend runs only on that backend's pools, and a
multi-node job only on pools whose backend runs gangs (``PoolView.gang``)."""

from __future__ import annotations

import pytest

from gpupool.scheduler import run_cycle
from gpupool.scheduler.snapshot import ReasonCode
from support.scheduler_cases import Case, check, job, node, pool, quota, run, team

NO_POOL, TOO_LARGE = ReasonCode.NO_POOL, ReasonCode.TOO_LARGE
ALL4 = (0, 1, 2, 3)
LOCAL_AND_SLURM = (
    pool("a-local", "h100", node("l1"), backend="local", gang=False),
    pool("b-slurm", "h100", node("s1"), node("s2"), backend="slurm"),
)
TEAM = (team("team-a", h100=quota(16)),)
HALF_LOCAL = (run("r", "team-a", "l1", (0, 1), pool_name="a-local"),)

CASES = [
    pytest.param(
        Case(
            pools=LOCAL_AND_SLURM,
            teams=TEAM,
            running=HALF_LOCAL,
            pending=(job("j", "team-a", 2),),
            want_admitted={"j": {"l1": (2, 3)}},
        ),
        id="unpinned, a job packs onto the fuller local node",
    ),
    pytest.param(
        Case(
            pools=LOCAL_AND_SLURM,
            teams=TEAM,
            running=HALF_LOCAL,
            pending=(job("j", "team-a", 2, backend="slurm"),),
            want_admitted={"j": {"s1": (0, 1)}},
        ),
        id="a job pinned to slurm is not admitted on the local pool that packs better",
    ),
    pytest.param(
        Case(
            pools=LOCAL_AND_SLURM,
            teams=TEAM,
            pending=(job("j", "team-a", 4, backend="ray"),),
            want_pending={"j": {NO_POOL}},
        ),
        id="a job pinned to a backend without a pool of its type waits with no_pool",
    ),
    pytest.param(
        Case(
            pools=LOCAL_AND_SLURM,
            teams=TEAM,
            pending=(job("gang", "team-a", 4, nodes=2),),
            want_admitted={"gang": {"s1": ALL4, "s2": ALL4}},
        ),
        id="a gang goes to the pool whose backend runs gangs",
    ),
    pytest.param(
        Case(
            pools=(pool("a-local", "h100", node("l1"), node("l2"), backend="local", gang=False),),
            teams=TEAM,
            pending=(job("gang", "team-a", 2, nodes=2), job("one", "team-a", 2)),
            want_admitted={"one": {"l1": (0, 1)}},
            want_pending={"gang": {TOO_LARGE}},
        ),
        id="a gang is never admitted where its backend cannot run it; one node is",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_run_cycle(case: Case) -> None:
    check(case, run_cycle(case.snapshot(), case.policy))


def test_why_says_the_backend_runs_single_node_jobs_only() -> None:
    case = Case(
        pools=(pool("a-local", "h100", node("l1"), node("l2"), backend="local", gang=False),),
        teams=TEAM,
        pending=(job("gang", "team-a", 2, nodes=2),),
    )
    (reason,) = run_cycle(case.snapshot(), case.policy).pending["gang"]
    assert reason.message == (
        "no h100 pool whose backend runs multi-node jobs has 2 nodes with 2 GPUs each "
        "(pools on local run single-node jobs only)"
    )
