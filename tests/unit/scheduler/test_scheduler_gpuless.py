"""GPU-less jobs against their team's cap on CPUs and memory (issue 10, M1).

A job with ``gpus: 0`` needs none of the GPU quota; ``QuotaView.cpus`` and ``memory_gb`` cap what
a team's GPU-less jobs hold on a gpu type's pools at once (cpus x nodes, memory x nodes, each node
at least one CPU). Named cases first, then properties over random clusters: the cap is never
exceeded, and parking stays exact with caps and GPU-less jobs in play.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.controller.parking import Parking, groups_of
from gpupool.core.quota import MIN_CPUS_CHARGED, gpuless_charge
from gpupool.scheduler import (
    CycleResult,
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    run_cycle,
)
from gpupool.scheduler.snapshot import PreemptionPolicy, ReasonCode, WithinTeam
from support.scheduler_inputs import GPU_TYPES, plain_policies, snapshots

# --- builders -----------------------------------------------------------------------------------


def pool(
    name: str, gpu_type: str, nodes: int = 1, *, cpus: float = 16, used: float = 0
) -> PoolView:
    views = tuple(NodeView(f"{name}-{i}", 4, cpus, 64.0, used_cpus=used) for i in range(nodes))
    return PoolView(name, gpu_type, "local", views)


def team(name: str, **quotas: QuotaView) -> TeamView:
    return TeamView(name, quota=dict(quotas))


def cap(cpus: float | None, memory_gb: float | None = None, nominal: int = 2) -> QuotaView:
    return QuotaView(nominal, cpus=cpus, memory_gb=memory_gb)


def gpuless(
    job_id: str,
    team_name: str = "team-a",
    *,
    cpus: float = 1.0,
    memory_gb: float = 1.0,
    nodes: int = 1,
    types: tuple[str, ...] = ("h100",),
    priority: int = 0,
    at: float = 0.0,
) -> PendingJob:
    return PendingJob(job_id, team_name, priority, at, 0, nodes, cpus, memory_gb, types)


def holding(
    job_id: str,
    team_name: str = "team-a",
    gpu_type: str = "h100",
    *,
    cpus: float = 1.0,
    memory_gb: float = 1.0,
    nodes: int = 1,
    priority: int = 0,
    terminating: bool = False,
    ends_by: float | None = None,
) -> RunningJob:
    """A running GPU-less job on pool ``<gpu_type>-pool`` (its room is in the NodeViews)."""
    placements = tuple(Placement(f"{gpu_type}-pool-{i}", ()) for i in range(nodes))
    return RunningJob(
        job_id,
        team_name,
        priority,
        gpu_type,
        f"{gpu_type}-pool",
        placements,
        cpus,
        memory_gb,
        terminating=terminating,
        ends_by=ends_by,
    )


NO_PREEMPTION = Policy(preemption_budget=0)


@dataclass(frozen=True)
class Case:
    teams: tuple[TeamView, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    pools: tuple[PoolView, ...] = (pool("h100-pool", "h100"), pool("t4-pool", "t4"))
    policy: Policy = NO_PREEMPTION
    want_admitted: dict[str, str] = field(default_factory=dict)  # job -> gpu type
    # job -> a phrase of its reason (per gpu type) that must appear; unlisted jobs must be admitted
    want_waiting: dict[str, str] = field(default_factory=dict)
    want_preempted: tuple[str, ...] = ()


CASES = [
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(3)),),
            pending=tuple(gpuless(f"j{i}") for i in range(5)),
            want_admitted={"j0": "h100", "j1": "h100", "j2": "h100"},
            want_waiting={"j3": "3 of 3 CPUs in use", "j4": "3 of 3 CPUs in use"},
        ),
        id="GPU-less jobs stop at the team's CPU cap",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(3)),),
            pending=tuple(gpuless(f"j{i}", cpus=0.001) for i in range(5)),
            want_admitted={"j0": "h100", "j1": "h100", "j2": "h100"},
            want_waiting={"j3": "counts at least 1 CPU", "j4": "counts at least 1 CPU"},
        ),
        id="tiny CPU requests count one CPU each",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(4)),),
            pools=(pool("h100-pool", "h100", nodes=2),),
            pending=(gpuless("j0", nodes=2), gpuless("j1", nodes=2), gpuless("j2", nodes=2)),
            want_admitted={"j0": "h100", "j1": "h100"},
            want_waiting={"j2": "4 of 4 CPUs in use and the job needs 2"},
        ),
        id="a gang counts its CPUs on every node",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(10, memory_gb=4)),),
            pending=(gpuless("j0", memory_gb=3), gpuless("j1", memory_gb=3)),
            want_admitted={"j0": "h100"},
            want_waiting={"j1": "3 of 4 GB memory in use and the job needs 3"},
        ),
        id="memory is capped too",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(3)),),
            running=(holding("r0"), holding("r1", terminating=True)),
            pending=(gpuless("j0"), gpuless("j1")),
            want_admitted={"j0": "h100"},
            want_waiting={"j1": "3 of 3 CPUs in use"},
        ),
        id="running GPU-less jobs count, terminating ones too",
    ),
    pytest.param(
        Case(
            teams=(
                team("team-a", h100=cap(2), t4=cap(8)),
                team("team-b", h100=cap(8)),
            ),
            running=(holding("r0", gpu_type="t4", cpus=8), holding("r1", "team-b", cpus=8)),
            pending=(gpuless("j0"), gpuless("j1"), gpuless("j2")),
            want_admitted={"j0": "h100", "j1": "h100"},
            want_waiting={"j2": "2 of 2 CPUs in use"},
        ),
        id="another gpu type's and another team's GPU-less jobs do not count",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(0, 0)),),
            pending=(PendingJob("g0", "team-a", 0, 0.0, 1, 1, 16.0, 64.0, ("h100",)),),
            want_admitted={"g0": "h100"},
        ),
        id="jobs with GPUs are not capped",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(0)),),
            pending=(gpuless("j0"),),
            want_waiting={"j0": "team-a may run no GPU-less jobs on h100"},
        ),
        id="a zero cap allows no GPU-less work on the type",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(1), t4=cap(2)),),
            pending=tuple(gpuless(f"j{i}", types=("h100", "t4")) for i in range(4)),
            want_admitted={"j0": "h100", "j1": "t4", "j2": "t4"},
            want_waiting={"j3": "1 of 1 CPUs in use"},
        ),
        id="capped on the first gpu type, a job spills over to the next",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=QuotaView(2)),),
            pending=tuple(gpuless(f"j{i}", cpus=0.001) for i in range(20)),
            want_admitted={f"j{i}": "h100" for i in range(20)},
        ),
        id="without a cap (a scheduler-level None) only room bounds GPU-less jobs",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(1)),),
            pools=(pool("h100-pool", "h100", cpus=1, used=1),),
            running=(holding("low", priority=0),),
            pending=(gpuless("high", priority=5),),
            policy=Policy(default_preemption=PreemptionPolicy(WithinTeam.LOWER_PRIORITY)),
            want_waiting={"high": "1 of 1 CPUs in use"},
        ),
        id="a GPU-less job over its cap preempts nothing",
    ),
    pytest.param(
        Case(
            teams=(team("team-a", h100=cap(1)), team("team-b", h100=QuotaView(4))),
            pools=(pool("h100-pool", "h100", cpus=2, used=1),),
            running=(holding("r0", ends_by=200.0),),
            pending=(
                gpuless("starving", at=0.0),
                PendingJob("gpu", "team-b", 0, 90.0, 1, 1, 1.0, 1.0, ("h100",)),
            ),
            policy=Policy(preemption_budget=0, starvation_after_s=10.0),
            want_admitted={"gpu": "h100"},
            want_waiting={"starving": "1 of 1 CPUs in use"},
        ),
        id="a starving GPU-less job over its cap holds no room",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_gpuless_cap(case: Case) -> None:
    snapshot = Snapshot(
        100.0, case.pools, {t.name: t for t in case.teams}, case.running, case.pending
    )
    result = run_cycle(snapshot, case.policy)
    assert {a.job_id: a.gpu_type for a in result.admissions} == case.want_admitted
    assert set(result.pending) == set(case.want_waiting)
    for job_id, phrase in case.want_waiting.items():
        reasons = result.pending[job_id]
        assert any(phrase in r.message for r in reasons), reasons
        assert all(r.code is not ReasonCode.CAPACITY for r in reasons), reasons
    assert tuple(p.job_id for p in result.preemptions) == case.want_preempted


def test_the_reason_names_team_type_cap_and_numbers() -> None:
    snapshot = Snapshot(
        0.0,
        (pool("h100-pool", "h100"),),
        {"team-a": team("team-a", h100=cap(8, 32))},
        tuple(holding(f"r{i}", cpus=0.5) for i in range(8)),
        (gpuless("j0", cpus=0.001),),
    )
    (reason,) = run_cycle(snapshot, NO_PREEMPTION).pending["j0"]
    assert (reason.gpu_type, reason.code) == ("h100", ReasonCode.QUOTA)
    assert reason.message == (
        "team-a's limit for GPU-less jobs on h100 (8 CPUs and 32 GB memory, from its h100 "
        "quota) is used up: 8 of 8 CPUs in use and the job needs 1 (each node of a GPU-less "
        "job counts at least 1 CPU)"
    )


# --- properties ---------------------------------------------------------------------------------

CPU_CAPS = st.sampled_from([None, 0.0, 1.0, 2.5, 4.0, 8.0])
MEMORY_CAPS = st.sampled_from([None, 0.0, 2.0, 8.0, 32.0])


@st.composite
def capped(draw: st.DrawFn) -> Snapshot:
    """A random small cluster (:func:`snapshots`) whose teams have GPU-less caps on every gpu
    type, with running GPU-less jobs and more GPU-less jobs pending."""
    snapshot = draw(snapshots(roomy=draw(st.booleans())))
    teams = {
        name: replace(
            view,
            quota={
                f: replace(
                    view.quota.get(f, QuotaView()), cpus=draw(CPU_CAPS), memory_gb=draw(MEMORY_CAPS)
                )
                for f in GPU_TYPES
            },
        )
        for name, view in snapshot.teams.items()
    }
    names = sorted(teams)
    running = list(snapshot.running)
    for p in snapshot.pools:
        for n in p.nodes:
            for k in range(draw(st.integers(0, 2))):
                running.append(
                    RunningJob(
                        f"g-{n.name}-{k}",
                        draw(st.sampled_from(names)),
                        draw(st.integers(0, 2)),
                        p.gpu_type,
                        p.name,
                        (Placement(n.name, ()),),
                        draw(st.sampled_from([0.001, 0.5, 1.0, 2.0])),
                        draw(st.sampled_from([0.0, 1.0, 4.0])),
                        terminating=draw(st.booleans()),
                    )
                )
    pending = list(snapshot.pending)
    for i in range(draw(st.integers(0, 8))):
        pending.append(new_gpuless(f"gl-{i}", draw, names, snapshot.now))
    return replace(snapshot, teams=teams, running=tuple(running), pending=tuple(pending))


def new_gpuless(job_id: str, draw: st.DrawFn, names: list[str], now: float) -> PendingJob:
    return PendingJob(
        job_id,
        draw(st.sampled_from(names)),
        draw(st.integers(0, 2)),
        now,
        0,
        draw(st.sampled_from([1, 1, 2])),
        draw(st.sampled_from([0.001, 0.5, 1.0, 3.0])),
        draw(st.sampled_from([0.0, 1.0, 3.0])),
        tuple(draw(st.permutations(GPU_TYPES))[: draw(st.integers(0, 3))]),
    )


def gpuless_usage(snapshot: Snapshot) -> dict[tuple[str, str], tuple[float, float]]:
    """What the running GPU-less jobs count, recomputed here from the formula."""
    used: dict[tuple[str, str], tuple[float, float]] = {}
    for job in snapshot.running:
        if not any(p.devices for p in job.placements):
            cpus, memory = used.get((job.team, job.gpu_type), (0.0, 0.0))
            used[(job.team, job.gpu_type)] = (
                cpus + max(job.cpus, MIN_CPUS_CHARGED) * len(job.placements),
                memory + job.memory_gb * len(job.placements),
            )
    return used


def check_caps(snapshot: Snapshot, result: CycleResult) -> None:
    """Wherever a GPU-less job was admitted, its team's GPU-less jobs on that type now hold at
    most the cap (running ones that already held more, after a cap was lowered, admit none)."""
    used = gpuless_usage(snapshot)
    jobs = {job.id: job for job in snapshot.pending}
    for admission in result.admissions:
        job = jobs[admission.job_id]
        if job.gpus:
            continue
        key = (job.team, admission.gpu_type)
        cpus, memory = used.get(key, (0.0, 0.0))
        more = gpuless_charge(job.cpus, job.memory_gb, job.nodes)
        used[key] = (cpus + more[0], memory + more[1])
        q = snapshot.teams[job.team].quota[admission.gpu_type]
        assert q.cpus is None or used[key][0] <= q.cpus + 1e-6, (key, used[key], q)
        assert q.memory_gb is None or used[key][1] <= q.memory_gb + 1e-6, (key, used[key], q)


preempting_policies = st.builds(
    Policy,
    preemption_budget=st.none() | st.integers(0, 3),
    starvation_after_s=st.none() | st.just(0.0),
)


@settings(max_examples=150, deadline=None)
@given(snapshot=capped(), policy=st.one_of(plain_policies, preempting_policies))
def test_gpuless_jobs_never_exceed_their_teams_cap(snapshot: Snapshot, policy: Policy) -> None:
    check_caps(snapshot, run_cycle(snapshot, policy))


SUBMITTED = itertools.count()


def applied(snapshot: Snapshot, result: CycleResult) -> Snapshot:
    """The next snapshot once the admissions run (their room taken on their nodes)."""
    jobs = {job.id: job for job in snapshot.pending}
    taken: dict[str, tuple[set[int], float, float]] = {}
    running = list(snapshot.running)
    for a in result.admissions:
        job = jobs[a.job_id]
        running.append(
            RunningJob(
                job.id,
                job.team,
                job.priority,
                a.gpu_type,
                a.pool,
                a.placements,
                job.cpus,
                job.memory_gb,
            )
        )
        for p in a.placements:
            devices, cpus, memory = taken.get(p.node, (set(), 0.0, 0.0))
            taken[p.node] = (devices | set(p.devices), cpus + job.cpus, memory + job.memory_gb)
    pools = tuple(
        replace(
            p,
            nodes=tuple(
                n
                if n.name not in taken
                else replace(
                    n,
                    used_devices=n.used_devices | taken[n.name][0],
                    used_cpus=n.used_cpus + taken[n.name][1],
                    used_memory_gb=n.used_memory_gb + taken[n.name][2],
                )
                for n in p.nodes
            ),
        )
        for p in snapshot.pools
    )
    admitted = {a.job_id for a in result.admissions}
    pending = tuple(job for job in snapshot.pending if job.id not in admitted)
    return replace(snapshot, pools=pools, running=tuple(running), pending=pending)


def by_team(snapshot: Snapshot) -> Snapshot:
    """Pending jobs team by team, as the controller lists them (so teams may be parked)."""
    return replace(snapshot, pending=tuple(sorted(snapshot.pending, key=lambda j: j.team)))


@settings(max_examples=100, deadline=None)
@given(snapshot=capped(), policy=plain_policies, data=st.data())
def test_over_cycles_caps_hold_and_parking_decides_as_a_full_cycle(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    """Admissions run, GPU-less jobs end and arrive: every cycle keeps the caps, and a cycle
    handed the last one's parking returns what a full cycle returns."""
    lot = Parking()
    snapshot = by_team(snapshot)
    names = sorted(snapshot.teams)
    for _ in range(5):
        result = lot.cycle(snapshot, policy, groups_of(snapshot.pending))
        result = replace(result, pending={**lot.parked_reasons(), **result.pending})
        assert result == run_cycle(snapshot, policy)
        check_caps(snapshot, result)
        action = data.draw(st.sampled_from(["apply", "apply", "end", "submit", "same"]))
        if action == "apply":
            snapshot = applied(snapshot, result)
        elif action == "end":
            ending = [job for job in snapshot.running if job.gpus == 0]
            if ending:
                gone = data.draw(st.sampled_from(ending))
                snapshot = replace(
                    snapshot, running=tuple(j for j in snapshot.running if j is not gone)
                )
        elif action == "submit":
            job = new_gpuless(f"new-{next(SUBMITTED)}", data.draw, names, snapshot.now)
            snapshot = by_team(replace(snapshot, pending=(*snapshot.pending, job)))
