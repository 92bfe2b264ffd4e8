"""The scrape-time gauges: built from one cycle's view, they must add up (module docstring of
``gpupool.server.metrics.gauges``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from gpupool.controller.observer import CycleSeen
from gpupool.scheduler import (
    CycleResult,
    NodeView,
    PendingJob,
    PendingReason,
    Placement,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.scheduler.snapshot import ReasonCode
from gpupool.server.metrics import catalog
from gpupool.server.metrics.catalog import MetricSpec
from gpupool.server.metrics.gauges import AdmittedNow, PendingCache, Published, state_samples


def pending(job_id: str, team: str, *types: str) -> PendingJob:
    return PendingJob(job_id, team, 0, 0.0, 1, gpu_types=types)


def running(job_id: str, team: str, gpus: int, node: str = "p-0", pool: str = "p") -> RunningJob:
    devices = tuple(range(gpus))
    return RunningJob(job_id, team, 0, "h100", pool, (Placement(node, devices),))


def pool(name: str = "p", gpus: int = 8, used: int = 0) -> PoolView:
    node = NodeView(f"{name}-0", gpus, 64, 256, used_devices=frozenset(range(used)))
    return PoolView(name, "h100", "local", (node,))


@dataclass
class View:
    """A cycle's view, built up by the cases (defaults: one pool of 8 GPUs, one team)."""

    teams: dict[str, TeamView] = field(
        default_factory=lambda: {"a": TeamView("a", quota={"h100": QuotaView(4)})}
    )
    pools: tuple[PoolView, ...] = (pool(),)
    running: tuple[RunningJob, ...] = ()
    queued: dict[str, tuple[PendingJob, ...]] = field(default_factory=dict)
    reasons: dict[str, tuple[PendingReason, ...]] = field(default_factory=dict)
    started: frozenset[str] = frozenset()

    def seen(self) -> CycleSeen:
        snapshot = Snapshot(0.0, self.pools, self.teams, self.running)
        return CycleSeen(
            0.0,
            0.0,
            snapshot,
            self.queued,
            CycleResult(),
            self.reasons.get,
            self.started.__contains__,
            lambda _id: None,
        )


def samples(
    view: View,
    admitted: tuple[AdmittedNow, ...] = (),
    down: frozenset[str] = frozenset(),
) -> Mapping[MetricSpec, Mapping[tuple[str, ...], float]]:
    return state_samples(view.seen(), admitted, lambda name: name not in down)


QUOTA = PendingReason("h100", ReasonCode.QUOTA, "used up")
CAPACITY = PendingReason("t4", ReasonCode.CAPACITY, "full")


def test_each_queued_job_counts_once_under_its_first_reason() -> None:
    view = View(
        queued={
            "a": (pending("j1", "a", "h100"), pending("j2", "a", "t4", "h100"), pending("j3", "a")),
            "b": (pending("j4", "b", "t4"),),
        },
        reasons={"j1": (QUOTA,), "j2": (CAPACITY, QUOTA), "j4": (CAPACITY,)},
    )
    assert samples(view)[catalog.PENDING] == {
        ("a", "h100", "quota"): 1,
        ("a", "t4", "capacity"): 1,
        ("a", "any", "undecided"): 1,  # no reason yet, and it takes any gpu type
        ("b", "t4", "capacity"): 1,
    }


def test_a_job_admitted_by_the_last_cycle_is_admitted_not_pending() -> None:
    view = View(queued={"a": (pending("j1", "a", "h100"), pending("j2", "a", "h100"))})
    got = samples(view, (AdmittedNow("j1", "a", "h100", "p", 2),))
    assert got[catalog.PENDING] == {("a", "h100", "undecided"): 1}
    assert got[catalog.ADMITTED] == {("a", "h100"): 1}
    assert got[catalog.USED][("a", "h100")] == 2
    assert got[catalog.POOL_ALLOCATED][("p", "h100")] == 2


def test_active_jobs_are_running_once_started_else_admitted() -> None:
    view = View(
        running=(running("r1", "a", 1), running("r2", "a", 2), running("r3", "a", 1)),
        started=frozenset({"r1", "r3"}),
    )
    got = samples(view)
    assert got[catalog.RUNNING] == {("a", "h100"): 2}
    assert got[catalog.ADMITTED] == {("a", "h100"): 1}


@dataclass(frozen=True)
class QuotaCase:
    quotas: dict[str, QuotaView]  # team -> its h100 quota; all in cohort "c"
    used: dict[str, int]  # team -> GPUs its running jobs hold
    borrowed: dict[str, float]
    lent: dict[str, float]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            QuotaCase(
                {"a": QuotaView(4), "b": QuotaView(4)}, {"a": 6}, {"a": 2, "b": 0}, {"a": 0, "b": 2}
            ),
            id="one lender lends what the other borrows",
        ),
        pytest.param(
            QuotaCase(
                {"a": QuotaView(0), "b": QuotaView(4), "c": QuotaView(2)},
                {"a": 3},
                {"a": 3, "b": 0, "c": 0},
                {"a": 0, "b": 2, "c": 1},
            ),
            id="two lenders share the borrowing in proportion to what each may lend",
        ),
        pytest.param(
            QuotaCase(
                {"a": QuotaView(0), "b": QuotaView(4, lending_limit=1), "c": QuotaView(2)},
                {"a": 3},
                {"a": 3, "b": 0, "c": 0},
                {"a": 0, "b": 1, "c": 2},
            ),
            id="a lending limit caps what a team lends",
        ),
        pytest.param(
            QuotaCase(
                {"a": QuotaView(2), "b": QuotaView(2)},
                {"a": 2, "b": 1},
                {"a": 0, "b": 0},
                {"a": 0, "b": 0},
            ),
            id="nobody borrows: nobody lends",
        ),
    ],
)
def test_borrowed_and_lent_gpus_of_a_cohort_add_up(case: QuotaCase) -> None:
    teams = {name: TeamView(name, cohort="c", quota={"h100": q}) for name, q in case.quotas.items()}
    jobs = tuple(running(f"{team}-job", team, gpus) for team, gpus in case.used.items())
    got = samples(View(teams=teams, running=jobs, pools=(pool(gpus=16),)))
    assert {k[0]: v for k, v in got[catalog.BORROWED].items()} == case.borrowed
    assert {k[0]: v for k, v in got[catalog.LENT].items()} == case.lent
    assert sum(got[catalog.BORROWED].values()) == pytest.approx(sum(got[catalog.LENT].values()))


def test_quota_limits_are_absent_when_unlimited() -> None:
    teams = {
        "a": TeamView("a", quota={"h100": QuotaView(2, borrowing_limit=0, lending_limit=1)}),
        "b": TeamView("b", quota={"h100": QuotaView(3)}),
    }
    got = samples(View(teams=teams))
    assert got[catalog.NOMINAL] == {("a", "h100"): 2, ("b", "h100"): 3}
    assert got[catalog.BORROWING_LIMIT] == {("a", "h100"): 0}
    assert got[catalog.LENDING_LIMIT] == {("a", "h100"): 1}


def test_pools_report_capacity_allocation_and_availability() -> None:
    view = View(pools=(pool("p", gpus=8, used=3), pool("q", gpus=4)))
    got = samples(view, (AdmittedNow("j", "a", "h100", "q", 4),), down=frozenset({"p"}))
    assert got[catalog.POOL_CAPACITY] == {("p", "h100", "local"): 8, ("q", "h100", "local"): 4}
    assert got[catalog.POOL_ALLOCATED] == {("p", "h100"): 3, ("q", "h100"): 4}
    assert got[catalog.POOL_IDLE] == {("p", "h100"): 5, ("q", "h100"): 0}
    assert got[catalog.POOL_AVAILABLE] == {("p", "local"): 0.0, ("q", "local"): 1.0}


def test_the_pending_cache_recounts_a_team_only_when_a_cycle_decided_it() -> None:
    jobs = (pending("j1", "a", "h100"), pending("j2", "a", "h100"))
    reasons: dict[str, tuple[PendingReason, ...]] = {"j1": (QUOTA,), "j2": (QUOTA,)}
    view = View(queued={"a": jobs}, reasons=reasons)
    cache = PendingCache()

    def scrape(cycle: int, decided_at: int, queue: tuple[PendingJob, ...] = jobs) -> object:
        seen = replace(view.seen(), queued={"a": queue})
        return dict(cache.counts(Published(seen, (), cycle, {"a": decided_at})))

    assert scrape(1, decided_at=1) == {("a", "h100", "quota"): 2}
    reasons["j2"] = (CAPACITY,)  # as if a cycle had changed it, yet the team is parked: kept
    assert scrape(2, decided_at=1) == {("a", "h100", "quota"): 2}
    assert scrape(3, decided_at=3) == {("a", "h100", "quota"): 1, ("a", "t4", "capacity"): 1}
    assert scrape(4, decided_at=3, queue=jobs[:1]) == {("a", "h100", "quota"): 1}  # new queue


def test_cached_and_fresh_pending_counts_agree() -> None:
    view = View(
        queued={"a": (pending("j1", "a", "h100"),), "b": (pending("j2", "b"),)},
        reasons={"j1": (QUOTA,)},
    )
    seen = view.seen()
    fresh = state_samples(seen, (), lambda _pool: True)[catalog.PENDING]
    assert dict(PendingCache().counts(Published(seen, (), 1, {}))) == fresh
