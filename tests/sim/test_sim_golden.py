"""Small traces whose outcomes are worked out by hand, under each policy.

The cluster: one pool of one node with 4 GPUs; teams a and b with nominal 2 each, in one
cohort. A cycle runs at every submit and end, as the controller's does; the quota-violation
grace is one ``cycle_interval_s`` (10 s). Times below are the hand-computed starts and ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpupool.sim.cluster import policy_setup
from gpupool.sim.engine import Outcome, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import TraceJob
from gpupool.spec.models import (
    ClusterConfig,
    Cohort,
    GpuType,
    NodeShape,
    Pool,
    PriorityClass,
    Quota,
    SchedulerSettings,
    Team,
)

CONFIG = ClusterConfig(
    gpu_types={"gpu": GpuType()},
    pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4))],
    cohorts={"c": Cohort()},
    teams={
        "a": Team(cohort="c", quota={"gpu": Quota(nominal=2)}),
        "b": Team(cohort="c", quota={"gpu": Quota(nominal=2)}),
    },
    scheduler=SchedulerSettings(cycle_interval_s=10, starvation_after_s=None),
)
NOMINAL = {"a": 2, "b": 2}


def job(
    job_id: str, at: float, duration: float, gpus: int, team: str, checkpoint: int | None = None
) -> TraceJob:
    return TraceJob(job_id, at, duration, gpus, team, checkpoint_interval_s=checkpoint)


@dataclass(frozen=True)
class Case:
    policy: str
    trace: list[TraceJob]
    want: dict[str, tuple[float | None, float | None]]  # job -> (first start, end)
    want_unschedulable: set[str] = field(default_factory=set)
    want_preemptions: int = 0
    want_violation_s: dict[str, float] = field(default_factory=dict)
    want_borrowed_gpu_s: float = 0.0
    want_lost_gpu_s: dict[str, float] = field(default_factory=dict)


BORROW = [job("a1", 0, 100, 2, "a"), job("a2", 0, 50, 2, "a")]
# a1 (1 GPU) runs; a2 (2 GPUs) would need 3 > nominal 2; a3 (1 GPU) fits beside a1.
HEAD_OF_LINE = [job("a1", 0, 100, 1, "a"), job("a2", 0, 100, 2, "a"), job("a3", 0, 100, 1, "a")]
# a borrows all 4 GPUs; b's job at 100 reclaims 2 of them.
RECLAIM = [job("a1", 0, 1000, 2, "a"), job("a2", 0, 1000, 2, "a"), job("b1", 100, 200, 2, "b")]
# The same, a1 checkpointing every 30 s of work: preempted after 100 s, it keeps 90.
RECLAIM_CHECKPOINTED = [job("a1", 0, 1000, 2, "a", checkpoint=30), *RECLAIM[1:]]

# Five GPU-less jobs of a. Its cap: nominal 2 x 2 CPUs per GPU (4 GPUs, 8 CPUs a node),
# each job counting one CPU: four run at once.
GPULESS = [job(f"g{i}", 0, 100, 0, "a") for i in range(5)]
GPULESS_FIRST = ["g0", "g1", "g2", "g3"]

CASES = [
    pytest.param(
        Case("hard-quota-fifo", BORROW, {"a1": (0, 100), "a2": (100, 150)}),
        id="hard quota: the second job waits for the first although b's GPUs are idle",
    ),
    pytest.param(
        Case("gpupool", BORROW, {"a1": (0, 100), "a2": (0, 50)}, want_borrowed_gpu_s=2 * 50),
        id="gpupool: the second job borrows b's idle GPUs",
    ),
    pytest.param(
        Case(
            "hard-quota-fifo",
            HEAD_OF_LINE,
            {"a1": (0, 100), "a2": (100, 200), "a3": (200, 300)},
            # a3 fit within nominal from 0 to 100 behind a2: 100 s, less one 10 s interval.
            want_violation_s={"a": 90.0},
        ),
        id="strict FIFO: a waiting head blocks a job that fits within nominal",
    ),
    pytest.param(
        Case(
            "gpupool",
            HEAD_OF_LINE,
            {"a1": (0, 100), "a2": (0, 100), "a3": (0, 100)},
            want_borrowed_gpu_s=2 * 100,
        ),
        id="best-effort FIFO: the small job starts, the large one borrows",
    ),
    pytest.param(
        Case(
            "fifo",
            [job("a1", 0, 100, 3, "a"), job("b1", 5, 100, 2, "b"), job("a2", 6, 100, 1, "a")],
            {"a1": (0, 100), "b1": (100, 200), "a2": (100, 200)},
            # b1 fits b's nominal 2 from 10 (first cycle after its submit) to 100 but waits.
            want_violation_s={"b": 85.0, "a": 0.0},
        ),
        id="one global FIFO: b's job waits behind the first job, a's behind b's",
    ),
    pytest.param(
        Case(
            "gpupool",
            RECLAIM,
            # b1 reclaims at the cycle at 100; the victim (a1: of two jobs started together the
            # order ends in the id) ends at once and b1 starts at the next tick, 50 ms later.
            # a1 starts again when b1 ends and runs its 1000 s from the start: its first 100 s
            # on 2 GPUs are lost.
            {"a1": (0, 300.05 + 1000), "b1": (100.05, 300.05), "a2": (0, 1000)},
            want_preemptions=1,
            # Borrowing is recorded per admission: a2 was admitted above nominal (0-1000), a1's
            # second attempt too (1000 s).
            want_borrowed_gpu_s=2 * 1000 + 2 * 1000,
            want_lost_gpu_s={"a1": 2 * 100},
        ),
        id="reclaim: b's job within nominal preempts a borrowing job of a, which starts over",
    ),
    pytest.param(
        Case(
            "gpupool",
            RECLAIM_CHECKPOINTED,
            # a1's second attempt resumes from its checkpoint at 90 s: 910 s left.
            {"a1": (0, 300.05 + 910), "b1": (100.05, 300.05), "a2": (0, 1000)},
            want_preemptions=1,
            want_borrowed_gpu_s=2 * 1000 + 2 * 910,
            want_lost_gpu_s={"a1": 2 * 10},
        ),
        id="reclaim of a job that checkpoints: it resumes from its last checkpoint",
    ),
    pytest.param(
        Case("gpupool", GPULESS, {**dict.fromkeys(GPULESS_FIRST, (0, 100)), "g4": (100, 200)}),
        id="GPU-less jobs: at most the team's cap runs at once (4 CPUs, one per job)",
    ),
    pytest.param(
        Case("fifo", GPULESS, dict.fromkeys([*GPULESS_FIRST, "g4"], (0, 100))),
        id="GPU-less jobs under one global FIFO: the one team holds every CPU",
    ),
    pytest.param(
        Case(
            "hard-quota-fifo",
            [job("a1", 0, 100, 4, "a"), job("a2", 0, 10, 1, "a")],
            {"a1": (None, None), "a2": (0, 10)},
            want_unschedulable={"a1"},
        ),
        id="a job larger than the team's quota is unschedulable, not blocking",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_golden(case: Case) -> None:
    outcome = simulate(policy_setup(CONFIG, case.policy), case.trace, NOMINAL)
    got = {r.trace.job_id: (r.first_start, r.end) for r in outcome.jobs}
    assert got == pytest.approx(case.want)
    assert {r.trace.job_id for r in outcome.jobs if r.unschedulable} == case.want_unschedulable
    assert outcome.preemptions == case.want_preemptions
    for team, seconds in case.want_violation_s.items():
        assert outcome.quota_violation_s.get(team, 0.0) == pytest.approx(seconds)
    assert outcome.borrowed_gpu_s == pytest.approx(case.want_borrowed_gpu_s)
    lost = {r.trace.job_id: r.lost_gpu_s for r in outcome.jobs if r.lost_gpu_s}
    assert lost == pytest.approx(case.want_lost_gpu_s)


def _metrics(outcome: Outcome) -> dict[str, object]:
    return {k: v for k, v in summarize(outcome).items() if k not in ("wall_s", "events_per_s")}


def test_metrics_of_the_borrow_case() -> None:
    got = summarize(simulate(policy_setup(CONFIG, "hard-quota-fifo"), BORROW, NOMINAL))
    # JCTs 100 and 150, queue delays 0 and 100; 2x100 + 2x50 GPU-s held of 4 GPUs x 150 s.
    assert got["avg_jct_s"] == pytest.approx(125.0)
    assert got["p50_jct_s"] == pytest.approx(125.0)
    assert got["avg_queue_s"] == pytest.approx(50.0)
    assert got["utilization"] == pytest.approx(300 / 600)
    assert got["makespan_s"] == pytest.approx(150.0)
    # b had no job: a alone is served, fairness over one team is 1.
    assert got["jain_fairness"] == pytest.approx(1.0)
    assert got["per_team"]["a"]["service"] == pytest.approx(
        (2 * 100 + 2 * 50) / (2 * 100 + 2 * 150)
    )


def test_same_input_same_outcome() -> None:
    trace = [*RECLAIM, job("b2", 150, 30, 1, "b")]
    runs = [_metrics(simulate(policy_setup(CONFIG, "gpupool"), trace, NOMINAL)) for _ in range(2)]
    assert runs[0] == runs[1]


def test_the_bill_of_the_borrow_case() -> None:
    # A GPU-hour at 3.60: a GPU-second costs 0.001. a1 holds 2 GPUs within a's nominal for
    # 100 s, a2 2 borrowed GPUs for 50 s; the pool's 4 GPUs over the 100 s span leave 100
    # GPU-seconds idle.
    priced = CONFIG.model_copy(update={"gpu_types": {"gpu": GpuType(price_per_gpu_hour=3.6)}})
    got = summarize(simulate(policy_setup(priced, "gpupool"), BORROW, NOMINAL))
    team = got["per_team"]["a"]
    assert team["gpu_hours_within_nominal"] == pytest.approx(200 / 3600)
    assert team["gpu_hours_borrowed"] == pytest.approx(100 / 3600)
    assert team["cost"] == pytest.approx(0.3)
    assert got["cost"] == pytest.approx(0.3)
    assert got["idle_gpu_hours"] == pytest.approx(100 / 3600)
    assert got["idle_cost"] == pytest.approx(0.1)
    assert got["currency"] == "USD"


def test_a_preemptor_starts_when_its_victim_has_run_its_minimum_run_time() -> None:
    """a's low-priority job (protected for its first 300 s) holds the node when a's
    high-priority job arrives at 100: no submit or end happens at 300, yet the victim becomes
    preemptible then, and a cycle runs, as the controller's periodic cycle would."""
    config = CONFIG.model_copy(
        update={
            "priority_classes": {
                "low": PriorityClass(value=0, default=True, min_runtime_s=300),
                "high": PriorityClass(value=10),
            }
        }
    )
    trace = [
        TraceJob("low", 0, 1000, 4, "a", priority_class="low"),
        TraceJob("high", 100, 50, 4, "a", priority_class="high"),
    ]
    outcome = simulate(policy_setup(config, "gpupool"), trace, NOMINAL)
    got = {r.trace.job_id: (r.first_start, r.end) for r in outcome.jobs}
    # Preempted at 300; high starts at the next tick and ends 50 s later, when low starts over.
    assert got == pytest.approx({"low": (0, 350.05 + 1000), "high": (300.05, 350.05)})
    assert outcome.preemptions == 1
