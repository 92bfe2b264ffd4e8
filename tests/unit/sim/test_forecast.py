"""The forecast: the production scheduler run forward from a snapshot, on tiny clusters whose
answer is known exactly."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpupool.scheduler import (
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.sim.estimate import forecast
from gpupool.sim.forecast import Limits, run_forward
from gpupool.sim.runtimes import DEFAULT_RUNTIME_S, RuntimeModel

NOW = 1_000.0


def node(name: str, gpus: int = 8, used: tuple[int, ...] = ()) -> NodeView:
    return NodeView(name, gpus, 64.0, 512.0, used_devices=frozenset(used))


def running(
    job_id: str,
    devices: tuple[int, ...],
    limit: float | None = None,
    started: float = NOW,
    team: str = "a",
    priority: int = 0,
) -> RunningJob:
    return RunningJob(
        id=job_id,
        team=team,
        priority=priority,
        gpu_type="h100",
        pool="p",
        placements=(Placement("p-0", devices),),
        started_at=started,
        ends_by=None if limit is None else started + limit,
    )


def queued(
    job_id: str, gpus: int, limit: float | None = None, team: str = "a", at: float = 0.0
) -> PendingJob:
    return PendingJob(
        id=job_id, team=team, priority=0, submitted_at=at, gpus=gpus, max_runtime_s=limit
    )


@dataclass
class World:
    """One 8-GPU node of pool p; teams a and b with nominal 8 each (one cohort)."""

    running: list[RunningJob] = field(default_factory=list)
    pending: list[PendingJob] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        used = tuple(d for job in self.running for p in job.placements for d in p.devices)
        teams = {name: TeamView(name, "c", quota={"h100": QuotaView(8)}) for name in ("a", "b")}
        pool = PoolView("p", "h100", "fake", (node("p-0", used=used),))
        return Snapshot(NOW, (pool,), teams, running=tuple(self.running))

    def groups(self) -> dict[str, tuple[PendingJob, ...]]:
        out: dict[str, list[PendingJob]] = {}
        for job in self.pending:
            out.setdefault(job.team, []).append(job)
        return {team: tuple(jobs) for team, jobs in out.items()}


NO_HISTORY = RuntimeModel([])
ALL = tuple(range(8))


@dataclass(frozen=True)
class Case:
    world: World
    job: str
    start: float | None  # seconds after NOW
    method: str
    model: RuntimeModel = NO_HISTORY


CASES = [
    pytest.param(
        Case(
            World([running("r1", ALL, limit=100)], [queued("q1", 8)]), "q1", 100.0, "runtime limits"
        ),
        id="one running job with a 100 s limit holds every GPU: the queued job starts at +100 s",
    ),
    pytest.param(
        Case(World([running("r1", (0, 1, 2, 3), limit=50)], [queued("q1", 4)]), "q1", 0.0, "now"),
        id="room free now: it starts at once",
    ),
    pytest.param(
        Case(
            World(
                [running("r1", (0, 1, 2, 3), limit=100), running("r2", (4, 5, 6, 7), limit=300)],
                [queued("q1", 8, limit=50), queued("q2", 8)],
            ),
            "q2",
            350.0,
            "runtime limits",
        ),
        id="behind another job: the first waits for both ends (300 s), the second for its limit",
    ),
    pytest.param(
        Case(
            World([running("r1", ALL, started=NOW - 600)], [queued("q1", 8)]),
            "q1",
            1800.0 - 600.0,
            "past jobs",
            RuntimeModel([("a", "h100", 8, s) for s in (1200.0, 1800.0, 2400.0)]),
        ),
        id="no limit: the median of similar past jobs longer than it ran, less what it ran",
    ),
    pytest.param(
        Case(
            World([running("r1", ALL)], [queued("q1", 8)]),
            "q1",
            DEFAULT_RUNTIME_S,
            "default runtime",
        ),
        id="no limit and no past job: the default runtime",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_forecast_start(case: Case) -> None:
    world = case.world
    found = forecast(world.snapshot(), world.groups(), Policy(), case.model).of(case.job)
    assert found is not None
    assert found.start == pytest.approx(NOW + case.start)
    assert found.method == case.method
    assert found.earliest is not None and found.earliest <= found.start
    assert found.latest is not None and found.latest >= found.start


def test_range_comes_from_the_spread_of_past_runtimes() -> None:
    world = World([running("r1", ALL, started=NOW)], [queued("q1", 8)])
    model = RuntimeModel([("a", "h100", 8, s) for s in (1000.0, 2000.0, 3000.0, 4000.0, 5000.0)])
    found = forecast(world.snapshot(), world.groups(), Policy(), model).of("q1")
    assert found is not None
    assert (found.earliest, found.start, found.latest) == (NOW + 2000, NOW + 3000, NOW + 4000)
    assert "5 similar past jobs" in found.basis


def test_blockers_and_jobs_ahead() -> None:
    world = World(
        [running("r1", (0, 1, 2, 3), limit=100), running("r2", (4, 5, 6, 7), limit=300)],
        [queued("q1", 8, limit=50, at=1.0), queued("q2", 8, at=2.0)],
    )
    found = forecast(world.snapshot(), world.groups(), Policy(), NO_HISTORY).of("q2")
    assert found is not None
    assert found.waits_for == ("r1", "r2")
    assert found.ahead == ("q1",)


def test_never_starts_when_nothing_frees_room() -> None:
    world = World([], [queued("q1", 16)])  # larger than any node: never fits
    found = forecast(world.snapshot(), world.groups(), Policy(), NO_HISTORY).of("q1")
    assert found is not None and found.start is None
    assert found.method == "none"


def test_horizon_bounds_the_run() -> None:
    world = World([running("r1", ALL, limit=10_000)], [queued("q1", 8)])
    run = run_forward(
        world.snapshot(), world.groups(), Policy(), NO_HISTORY, limits=Limits(horizon_s=1_000)
    )
    assert run.starts == {}
    assert run.until == NOW + 1_000
    assert not run.done and run.cut == "horizon"


def test_inputs_are_not_changed() -> None:
    world = World([running("r1", ALL, limit=100)], [queued("q1", 8), queued("q2", 4)])
    snapshot, groups = world.snapshot(), world.groups()
    before = (snapshot, dict(groups))
    forecast(snapshot, groups, Policy(), NO_HISTORY)
    assert (snapshot, groups) == before


def test_remaining_of_a_job_that_outlived_every_similar_one() -> None:
    model = RuntimeModel([("a", "h100", 8, s) for s in (10.0, 20.0, 30.0)])
    left = model.remaining("a", "h100", 8, elapsed_s=100.0)
    assert (left.seconds, left.low, left.high) == (50.0, 0.0, 100.0)


def test_similarity_widens_when_too_few_samples() -> None:
    samples = [("a", "h100", 8, 100.0), ("b", "h100", 1, 300.0), ("b", "h100", 1, 500.0)]
    model = RuntimeModel(samples)
    # team a has one 8-GPU sample only: the gpu type's three are used
    assert model.estimate("a", "h100", 8).seconds == 300.0
    assert model.estimate("a", "h100", 8).samples == 3


def test_a_spent_budget_stops_after_one_cycle_and_leaves_the_range_unknown() -> None:
    world = World([running("r1", ALL, limit=100)], [queued("q1", 8)])
    made = forecast(world.snapshot(), world.groups(), Policy(), NO_HISTORY, stop=lambda: True)
    assert set(made.runs) == {"seconds"}
    assert made.runs["seconds"].cycles == 1
    found = made.of("q1")
    assert found is not None and found.start is None and found.earliest is None
    assert "time budget" in found.basis


def test_a_starting_job_runs_the_mean_a_running_one_ends_at_the_median() -> None:
    model = RuntimeModel([("a", "h100", 8, s) for s in (100.0, 100.0, 1000.0)])
    found = model.estimate("a", "h100", 8)
    assert (found.seconds, found.low, found.high) == (400.0, 100.0, 550.0)
    left = model.remaining("a", "h100", 8, elapsed_s=50.0)
    assert (left.seconds, left.low, left.high) == (50.0, 50.0, 500.0)


def test_a_job_never_passes_its_teams_earlier_jobs_hidden_by_the_window() -> None:
    ahead = [queued(f"q{i:02d}", 1, limit=100, at=float(i)) for i in range(1, 20)]
    world = World([], [*ahead, queued("q20", 1, limit=100, at=20.0)])
    for window in (3, None):
        run = run_forward(
            world.snapshot(), world.groups(), Policy(), NO_HISTORY, ("q20",), Limits(window=window)
        )
        # eight at a time on the one 8-GPU node: q01-q08 now, q09-q16 at +100, the rest at +200
        assert run.starts["q20"].at == NOW + 200, window


def test_a_window_whose_last_job_starts_is_widened() -> None:
    # team b's eight 1-GPU jobs all fit at once; a window of 2 would start two per cycle
    others = [queued(f"b{i}", 1, limit=100, team="b", at=float(i)) for i in range(6)]
    world = World([], [*others, queued("a1", 4, limit=100, team="a", at=10.0)])
    shown = run_forward(
        world.snapshot(), world.groups(), Policy(), NO_HISTORY, ("a1",), Limits(window=2)
    )
    whole = run_forward(
        world.snapshot(), world.groups(), Policy(), NO_HISTORY, ("a1",), Limits(window=None)
    )
    assert shown.starts == whole.starts
