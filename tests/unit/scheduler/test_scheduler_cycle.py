"""run_cycle as a table of named cases (docs/architecture.md §5, docs/code-style.md §14)."""

from __future__ import annotations

import gc
import random
from dataclasses import dataclass, field, replace

import pytest

from gpupool.core.hashing import rendezvous_order
from gpupool.scheduler import (
    CycleResult,
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
    run_cycle,
)
from gpupool.scheduler.snapshot import ReasonCode

# --- builders -----------------------------------------------------------------------------------


def node(
    name: str,
    gpus: int = 4,
    *,
    used: tuple[int, ...] = (),
    cpus: float = 32,
    memory_gb: float = 256,
    used_cpus: float = 0,
    used_memory_gb: float = 0,
) -> NodeView:
    return NodeView(name, gpus, cpus, memory_gb, frozenset(used), used_cpus, used_memory_gb)


def pool(name: str, gpu_type: str, *nodes: NodeView, dedicated_to: str | None = None) -> PoolView:
    return PoolView(name, gpu_type, "local", tuple(nodes), dedicated_to)


def quota(nominal: int, borrow: int | None = None, lend: int | None = None) -> QuotaView:
    return QuotaView(nominal, borrow, lend)


def team(
    name: str, cohort: str | None = None, weight: float = 1.0, **quotas: QuotaView
) -> TeamView:
    return TeamView(name, cohort, weight, dict(quotas))


def running(
    job_id: str, team_name: str, gpu_type: str, gpus: int, *, priority: int = 0
) -> RunningJob:
    """Usage for quota only: NodeView.used_* carries the room (one source of truth)."""
    devices = tuple(range(gpus))
    return RunningJob(
        job_id, team_name, priority, gpu_type, "elsewhere", (Placement("elsewhere", devices),)
    )


def job(
    job_id: str,
    team_name: str,
    gpus: int = 1,
    *,
    nodes: int = 1,
    priority: int = 0,
    at: float = 0.0,
    types: tuple[str, ...] = (),
    cpus: float = 0.0,
    memory_gb: float = 0.0,
) -> PendingJob:
    return PendingJob(job_id, team_name, priority, at, gpus, nodes, cpus, memory_gb, types)


@dataclass(frozen=True)
class Case:
    pools: tuple[PoolView, ...]
    teams: tuple[TeamView, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    policy: Policy = field(default_factory=Policy)
    # job id -> (pool, {node: devices}); an admitted job not listed here fails the case.
    want_admitted: dict[str, tuple[str, dict[str, tuple[int, ...]]]] = field(default_factory=dict)
    want_pending: dict[str, set[ReasonCode]] = field(default_factory=dict)
    want_borrowed: dict[str, int] = field(default_factory=dict)
    want_order: tuple[str, ...] | None = None  # admission order, when it matters

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now=100.0,
            pools=self.pools,
            teams={t.name: t for t in self.teams},
            running=self.running,
            pending=self.pending,
        )


def check(case: Case, result: CycleResult) -> None:
    got_admitted = {
        a.job_id: (a.pool, {p.node: p.devices for p in a.placements}) for a in result.admissions
    }
    assert got_admitted == case.want_admitted
    got_pending = {job_id: {r.code for r in reasons} for job_id, reasons in result.pending.items()}
    assert got_pending == case.want_pending
    for job_id, borrowed in case.want_borrowed.items():
        assert next(a.borrowed for a in result.admissions if a.job_id == job_id) == borrowed
    if case.want_order is not None:
        assert tuple(a.job_id for a in result.admissions) == case.want_order


# --- the table ----------------------------------------------------------------------------------

H100 = pool("h100-a", "h100", node("h1", 4))
RESEARCH_A = team("team-a", "research", h100=quota(2, 2))
RESEARCH_B = team("team-b", "research", h100=quota(2))
QUOTA, COHORT, CAPACITY = ReasonCode.QUOTA, ReasonCode.COHORT, ReasonCode.CAPACITY
NO_POOL, TOO_LARGE = ReasonCode.NO_POOL, ReasonCode.TOO_LARGE

QUOTA_CASES = [
    pytest.param(
        Case(
            pools=(H100,),
            teams=(team("team-a", h100=quota(2)),),
            pending=(job("j1", "team-a", 2),),
            want_admitted={"j1": ("h100-a", {"h1": (0, 1)})},
            want_borrowed={"j1": 0},
        ),
        id="admits within nominal",
    ),
    pytest.param(
        Case(
            pools=(H100,),
            teams=(team("team-a", h100=quota(2, 2)),),
            running=(running("r1", "team-a", "h100", 2),),
            pending=(job("j1", "team-a", 1),),
            want_pending={"j1": {QUOTA}},
        ),
        id="over nominal without cohort waits on quota",
    ),
    pytest.param(
        Case(
            pools=(H100,),
            teams=(team("team-a", h100=quota(2)),),
            pending=(job("j1", "team-a", 2, at=1), job("j2", "team-a", 1, at=2)),
            want_admitted={"j1": ("h100-a", {"h1": (0, 1)})},
            want_pending={"j2": {QUOTA}},
        ),
        id="later decisions see earlier admissions",
    ),
    pytest.param(
        Case(
            pools=(H100,),
            teams=(RESEARCH_A, RESEARCH_B),
            pending=(job("j1", "team-a", 4),),
            want_admitted={"j1": ("h100-a", {"h1": (0, 1, 2, 3)})},
            want_borrowed={"j1": 2},
        ),
        id="borrows idle h100 from cohort",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(
                team("team-a", "research", h100=quota(2, 1)),
                team("team-b", "research", h100=quota(6)),
            ),
            pending=(job("j1", "team-a", 4),),
            want_pending={"j1": {QUOTA}},
        ),
        id="borrowing limit caps borrowing",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(
                team("team-a", "research"),
                team("team-b", "research", h100=quota(4, lend=1)),
            ),
            pending=(job("j1", "team-a", 2, at=1), job("j2", "team-a", 1, at=2)),
            want_admitted={"j2": ("h100-a", {"h1": (0,)})},
            want_pending={"j1": {COHORT}},
            want_borrowed={"j2": 1},
        ),
        id="lending limit caps what a member lends; no quota entry still borrows",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(RESEARCH_A, RESEARCH_B),
            running=(running("r1", "team-b", "h100", 2),),
            pending=(job("j1", "team-a", 3),),
            want_pending={"j1": {COHORT}},
        ),
        id="cohort with nothing idle",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(RESEARCH_A, RESEARCH_B, team("team-c", "research", h100=quota(0, 4))),
            running=(running("r1", "team-c", "h100", 2),),
            pending=(job("j1", "team-a", 3),),
            want_pending={"j1": {COHORT}},
        ),
        id="idle quota already lent is not lent twice",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(RESEARCH_A, team("team-x", "other", h100=quota(8))),
            pending=(job("j1", "team-a", 3),),
            want_pending={"j1": {COHORT}},
        ),
        id="another cohort lends nothing",
    ),
    pytest.param(
        Case(
            pools=(pool("cpu-a", "cpu", node("c1", 0, cpus=8)),),
            teams=(),
            pending=(job("j1", "team-z", 0, cpus=4),),
            want_admitted={"j1": ("cpu-a", {"c1": ()})},
        ),
        id="cpu-only job fits quota trivially",
    ),
]

CAPACITY_CASES = [
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2))),),
            teams=(team("team-a", h100=quota(4)),),
            pending=(job("j1", "team-a", 2),),
            want_pending={"j1": {CAPACITY}},
        ),
        id="quota fine but no room",
    ),
    pytest.param(
        Case(
            pools=(
                pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2, 3))),
                pool("t4-a", "t4", node("t1", 4)),
            ),
            teams=(team("team-a", h100=quota(4), t4=quota(4)),),
            pending=(job("j1", "team-a", 2, types=("h100", "t4")),),
            want_admitted={"j1": ("t4-a", {"t1": (0, 1)})},
        ),
        id="spills over from full h100 to t4",
    ),
    pytest.param(
        Case(
            pools=(
                pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2, 3))),
                pool("t4-a", "t4", node("t1", 4)),
            ),
            teams=(team("team-a", h100=quota(4), t4=quota(4)),),
            pending=(job("j1", "team-a", 2, types=("h100",)),),
            want_pending={"j1": {CAPACITY}},
        ),
        id="job asking only for h100 waits while h100 is full",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4)), pool("t4-a", "t4", node("t1", 4))),
            teams=(team("team-a", h100=quota(4), t4=quota(4)),),
            pending=(job("j1", "team-a", 1),),
            policy=Policy(gpu_type_order=("t4", "h100")),
            want_admitted={"j1": ("t4-a", {"t1": (0,)})},
        ),
        id="any gpu type follows the policy order",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4)), pool("t4-a", "t4", node("t1", 4))),
            teams=(team("team-a", t4=quota(4)),),
            pending=(job("j1", "team-a", 1),),
            want_admitted={"j1": ("t4-a", {"t1": (0,)})},
        ),
        id="any gpu type tries types by name after the policy order",
    ),
    pytest.param(
        Case(
            pools=(
                pool("h100-b", "h100", node("h1", 4), dedicated_to="team-b"),
                pool("t4-a", "t4", node("t1", 4), dedicated_to="team-a"),
            ),
            teams=(team("team-a", h100=quota(4), t4=quota(4)), team("team-b", h100=quota(4))),
            pending=(
                job("a1", "team-a", 1, types=("h100", "t4")),
                job("b1", "team-b", 1, types=("h100", "t4")),
            ),
            want_admitted={"a1": ("t4-a", {"t1": (0,)}), "b1": ("h100-b", {"h1": (0,)})},
        ),
        id="dedicated pools serve only their team",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-b", "h100", node("h1", 4), dedicated_to="team-b"),),
            teams=(team("team-a", h100=quota(4)),),
            pending=(job("j1", "team-a", 1), job("j2", "team-a", 1, types=("a100",))),
            want_pending={"j1": {NO_POOL}, "j2": {NO_POOL}},
        ),
        id="no pool the team may use",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4), node("h2", 4)),),
            teams=(team("team-a", h100=quota(64)),),
            pending=(
                job("wide", "team-a", 8),
                job("many", "team-a", 1, nodes=3),
                job("fat", "team-a", 1, memory_gb=1000),
            ),
            want_pending={"wide": {TOO_LARGE}, "many": {TOO_LARGE}, "fat": {TOO_LARGE}},
        ),
        id="too large for any node or gang",
    ),
    pytest.param(
        Case(
            pools=(
                pool(
                    "h100-a",
                    "h100",
                    node("h1", 4),
                    node("h2", 4, used=(0, 1)),
                    node("h3", 4, used=(0, 1)),
                ),
            ),
            teams=(team("team-a", h100=quota(8)),),
            pending=(job("j1", "team-a", 1),),
            want_admitted={"j1": ("h100-a", {"h2": (2,)})},
        ),
        id="packs onto the most allocated node, then by name",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 2))),),
            teams=(team("team-a", h100=quota(8)),),
            pending=(job("j1", "team-a", 1, at=1), job("j2", "team-a", 1, at=2)),
            want_admitted={"j1": ("h100-a", {"h1": (1,)}), "j2": ("h100-a", {"h1": (3,)})},
        ),
        id="lowest free devices, never twice",
    ),
    pytest.param(
        Case(
            pools=(
                pool(
                    "h100-a",
                    "h100",
                    node("h1", 4, used=(0,)),
                    node("h2", 4),
                    node("h3", 4),
                    node("h4", 4, memory_gb=16),
                ),
            ),
            teams=(team("team-a", h100=quota(16)),),
            pending=(job("gang", "team-a", 4, nodes=2, memory_gb=64),),
            want_admitted={"gang": ("h100-a", {"h2": (0, 1, 2, 3), "h3": (0, 1, 2, 3)})},
        ),
        id="gang takes whole nodes with room for every member",
    ),
    pytest.param(
        Case(
            pools=(
                pool("h100-a", "h100", node("h1", 4), node("h1b", 4, used=(0, 1, 2, 3))),
                pool("h100-b", "h100", node("h2", 4, used=(0,)), node("h2b", 4)),
            ),
            teams=(team("team-a", h100=quota(16)),),
            pending=(job("gang", "team-a", 4, nodes=2, at=1), job("small", "team-a", 2, at=2)),
            want_admitted={"small": ("h100-b", {"h2": (1, 2)})},
            want_pending={"gang": {CAPACITY}},
        ),
        id="gang never spans pools and takes nothing when it cannot fit",
    ),
    pytest.param(
        Case(
            pools=(
                pool("h100-a", "h100", node("h1", 8)),
                pool("h100-b", "h100", node("h2", 8, used=(0, 1, 2, 3, 4, 5))),
            ),
            teams=(team("team-a", h100=quota(16)),),
            pending=(job("j1", "team-a", 2),),
            want_admitted={"j1": ("h100-b", {"h2": (6, 7)})},
        ),
        id="prefers the pool where the job packs best",
    ),
    pytest.param(
        Case(
            pools=(
                pool(
                    "h100-a",
                    "h100",
                    node("h1", 4, used=(0, 1, 2), used_cpus=30),
                    node("h2", 4, used=(0,)),
                ),
            ),
            teams=(team("team-a", h100=quota(16)),),
            pending=(job("j1", "team-a", 1, cpus=4),),
            want_admitted={"j1": ("h100-a", {"h2": (1,)})},
        ),
        id="a node without cpus to spare is skipped",
    ),
]

ORDER_CASES = [
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2))),),
            teams=(team("team-a", h100=quota(4)),),
            pending=(job("big", "team-a", 4, at=1), job("small", "team-a", 1, at=2)),
            want_admitted={"small": ("h100-a", {"h1": (3,)})},
            want_pending={"big": {CAPACITY}},
        ),
        id="best-effort FIFO: a head that does not fit does not block a small job",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2))),),
            teams=(team("team-a", h100=quota(4)), team("team-b", h100=quota(4))),
            pending=(
                job("big", "team-a", 4, at=1),
                job("small", "team-a", 1, at=2),
                job("other", "team-b", 1, at=3),
            ),
            policy=Policy(queueing=Queueing.STRICT_FIFO),
            want_admitted={"other": ("h100-a", {"h1": (3,)})},
            want_pending={"big": {CAPACITY}, "small": {ReasonCode.BLOCKED}},
        ),
        id="strict FIFO: a waiting head blocks its own team only",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2))),),
            teams=(team("team-a", h100=quota(4)),),
            pending=(
                job("early-low", "team-a", 1, at=1, priority=0),
                job("late-high", "team-a", 1, at=5, priority=10),
            ),
            want_admitted={"late-high": ("h100-a", {"h1": (3,)})},
            want_pending={"early-low": {CAPACITY}},
        ),
        id="priority first within a team",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2))),),
            teams=(team("team-a", h100=quota(4)),),
            pending=(job("j2", "team-a", 1, at=1), job("j1", "team-a", 1, at=1)),
            want_admitted={"j1": ("h100-a", {"h1": (3,)})},
            want_pending={"j2": {CAPACITY}},
        ),
        id="equal priority and submit time fall back to the id",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8, used=(0, 1, 2, 3, 4, 5, 6))),),
            teams=(RESEARCH_A, RESEARCH_B, team("team-c", "research", h100=quota(8))),
            running=(running("r1", "team-a", "h100", 3),),
            pending=(
                job("a1", "team-a", 1, at=0, priority=100),
                job("b1", "team-b", 1, at=9, priority=0),
            ),
            want_admitted={"b1": ("h100-a", {"h1": (7,)})},
            want_pending={"a1": {CAPACITY}},
        ),
        id="heads within nominal go before borrowing heads",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8, used=(0, 1, 2, 3, 4, 5, 6))),),
            teams=(
                team("team-a", "research", h100=quota(0)),
                team("team-b", "research", h100=quota(0)),
                team("team-c", "research", h100=quota(8)),
            ),
            running=(running("r1", "team-a", "h100", 3), running("r2", "team-b", "h100", 1)),
            pending=(
                job("a1", "team-a", 1, at=0, priority=100),
                job("b1", "team-b", 1, at=9, priority=0),
            ),
            want_admitted={"b1": ("h100-a", {"h1": (7,)})},
            want_pending={"a1": {CAPACITY}},
            want_borrowed={"b1": 1},
        ),
        id="lower dominant share goes first",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8, used=(0, 1, 2, 3, 4, 5, 6))),),
            teams=(
                team("team-a", "research", 4.0, h100=quota(0)),
                team("team-b", "research", h100=quota(0)),
                team("team-c", "research", h100=quota(8)),
            ),
            running=(running("r1", "team-a", "h100", 3), running("r2", "team-b", "h100", 1)),
            pending=(job("a1", "team-a", 1, at=9), job("b1", "team-b", 1, at=0)),
            want_admitted={"a1": ("h100-a", {"h1": (7,)})},
            want_pending={"b1": {CAPACITY}},
        ),
        id="weight divides the share",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(team("team-a", h100=quota(8)), team("team-b", h100=quota(8))),
            pending=(
                job("a1", "team-a", 1, at=1),
                job("a2", "team-a", 1, at=2),
                job("b1", "team-b", 1, at=0, priority=5),
            ),
            want_admitted={
                "b1": ("h100-a", {"h1": (0,)}),
                "a1": ("h100-a", {"h1": (1,)}),
                "a2": ("h100-a", {"h1": (2,)}),
            },
            want_order=("b1", "a1", "a2"),
        ),
        id="equal teams go by priority then submit time",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(team("team-a", h100=quota(8)),),
            pending=(
                job("j1", "team-a", at=1),
                job("j2", "team-a", at=2),
                job("j3", "team-a", at=3),
            ),
            policy=Policy(max_admissions=1),
            want_admitted={"j1": ("h100-a", {"h1": (0,)})},
        ),
        id="admission bound stops the cycle without reasons for the rest",
    ),
]


@pytest.mark.parametrize("case", QUOTA_CASES + CAPACITY_CASES + ORDER_CASES)
def test_run_cycle(case: Case) -> None:
    snapshot = case.snapshot()
    result = run_cycle(snapshot, case.policy)
    check(case, result)
    assert run_cycle(snapshot, case.policy) == result


# --- explanations, tie-breaks, determinism ------------------------------------------------------


def test_quota_reason_explains_numbers() -> None:
    case = Case(
        pools=(H100,),
        teams=(team("team-a", h100=quota(2, 0)),),
        running=(running("r1", "team-a", "h100", 2),),
        pending=(job("j1", "team-a", 1),),
    )
    (reason,) = run_cycle(case.snapshot(), Policy()).pending["j1"]
    assert reason.gpu_type == "h100"
    assert reason.message == (
        "team-a uses 2 h100 GPUs (nominal 2, borrowing limit 0); the job needs 1, "
        "1 above nominal, and the team has no cohort to borrow from"
    )


def test_cohort_reason_names_the_cohort_and_idle() -> None:
    case = Case(
        pools=(pool("h100-a", "h100", node("h1", 8)),),
        teams=(RESEARCH_A, team("team-b", "research", h100=quota(4, lend=1))),
        running=(running("r1", "team-a", "h100", 2),),
        pending=(job("j1", "team-a", 2),),
    )
    (reason,) = run_cycle(case.snapshot(), Policy()).pending["j1"]
    assert reason.code is ReasonCode.COHORT
    assert "cohort research has only 1 idle h100 GPU to lend" in reason.message


def test_reason_per_gpu_type_tried() -> None:
    case = Case(
        pools=(pool("h100-a", "h100", node("h1", 4, used=(0, 1, 2, 3))),),
        teams=(team("team-a", h100=quota(4)),),
        pending=(job("j1", "team-a", 1, types=("h100", "a100")),),
    )
    reasons = run_cycle(case.snapshot(), Policy()).pending["j1"]
    assert [(r.gpu_type, r.code) for r in reasons] == [
        ("h100", ReasonCode.CAPACITY),
        ("a100", ReasonCode.NO_POOL),
    ]


def test_no_pool_at_all() -> None:
    snapshot = Snapshot(now=0, pools=(), teams={}, pending=(job("j1", "team-a"),))
    (reason,) = run_cycle(snapshot, Policy()).pending["j1"]
    assert reason.code is ReasonCode.NO_POOL


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
def test_the_cyclic_collector_is_as_the_caller_left_it(enabled: bool) -> None:
    snapshot = Snapshot(now=0, pools=(H100,), teams={}, pending=(job("j1", "team-a"),))
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        run_cycle(snapshot, Policy())
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_equivalent_pools_tie_break_by_rendezvous_hash() -> None:
    pools = tuple(pool(f"h100-{c}", "h100", node(f"{c}1", 4)) for c in "abcd")
    chosen = set()
    for i in range(40):
        snapshot = Snapshot(
            now=0,
            pools=pools,
            teams={"team-a": team("team-a", h100=quota(8))},
            pending=(job(f"job-{i}", "team-a"),),
        )
        (admission,) = run_cycle(snapshot, Policy()).admissions
        want = rendezvous_order(f"job-{i}", [(p.name, 4.0) for p in pools])[0]
        assert admission.pool == want
        chosen.add(admission.pool)
    assert len(chosen) > 1  # ties spread over the pools


def _busy_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    pools = tuple(
        pool(
            f"{gpu_type}-{p}",
            gpu_type,
            *(
                node(f"{gpu_type}-{p}-n{n}", 4, used=tuple(range(rng.randint(0, 4))))
                for n in range(4)
            ),
        )
        for gpu_type in ("h100", "t4")
        for p in range(2)
    )
    teams = tuple(
        team(f"team-{t}", "research" if t < 3 else None, h100=quota(4, 4), t4=quota(8))
        for t in range(4)
    )
    pending = tuple(
        job(
            f"job-{i}",
            f"team-{rng.randrange(4)}",
            rng.randint(1, 4),
            nodes=rng.randint(1, 2),
            priority=rng.randrange(3),
            at=float(rng.randrange(10)),
            types=rng.choice([(), ("h100",), ("t4", "h100")]),
        )
        for i in range(60)
    )
    return Snapshot(now=0, pools=pools, teams={t.name: t for t in teams}, pending=pending)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_input_order_does_not_matter(seed: int) -> None:
    snapshot = _busy_snapshot(seed)
    rng = random.Random(seed)
    shuffled = replace(
        snapshot,
        pools=tuple(
            replace(p, nodes=tuple(rng.sample(p.nodes, len(p.nodes))))
            for p in rng.sample(snapshot.pools, len(snapshot.pools))
        ),
        teams=dict(rng.sample(list(snapshot.teams.items()), len(snapshot.teams))),
        pending=tuple(rng.sample(snapshot.pending, len(snapshot.pending))),
    )
    assert run_cycle(shuffled, Policy()) == run_cycle(snapshot, Policy())


def test_many_pending_jobs_on_many_nodes() -> None:
    """A sanity run at a size where quadratic work would show; no timing asserted."""
    rng = random.Random(7)
    pools = tuple(
        pool(f"{t}-{p}", t, *(node(f"{t}-{p}-{n:03}", 8) for n in range(50)))
        for t in ("h100", "a100")
        for p in range(2)
    )
    teams = {
        f"team-{t}": team(f"team-{t}", "research", h100=quota(100), a100=quota(100))
        for t in range(10)
    }
    pending = tuple(
        job(
            f"job-{i:04}",
            f"team-{rng.randrange(10)}",
            rng.choice([1, 2, 4, 8]),
            nodes=rng.choice([1, 1, 1, 2]),
            priority=rng.randrange(3),
            at=float(i),
        )
        for i in range(2000)
    )
    result = run_cycle(Snapshot(now=0, pools=pools, teams=teams, pending=pending), Policy())
    assert len(result.admissions) + len(result.pending) == 2000
    assert sum(len(p.devices) for a in result.admissions for p in a.placements) <= 200 * 8
    assert result.admissions
