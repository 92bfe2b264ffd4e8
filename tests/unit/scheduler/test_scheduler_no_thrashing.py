"""Guarantees kept and no thrashing (Q3, Q9, Q10) as named cases: minimum run time and the cap on
preemptions per job (both overridden by a reclaim of a guarantee), victims chosen to waste the
least work on the nodes cheapest to free, a reclaim past the cycle's budget, reservations that
never block a guarantee, and the `why` of each rule.

Running jobs sit on real nodes (``support.scheduler_cases``), so a victim frees exactly the room
it holds.
"""

from __future__ import annotations

import pytest

from gpupool.scheduler import Policy, PoolView, run_cycle
from gpupool.scheduler.reservations import Reservations
from gpupool.scheduler.snapshot import ReasonCode, RunningJob
from gpupool.scheduler.workspace import Workspace
from support.scheduler_cases import Case, check, job, node, pool, quota, team
from support.scheduler_cases import run as ran

PREEMPTING, PREEMPTION = ReasonCode.PREEMPTING, ReasonCode.PREEMPTION
ALL4 = (0, 1, 2, 3)
ALL8 = tuple(range(8))
TWO_NODES = (pool("h100-a", "h100", node("h1"), node("h2")),)
EIGHT: tuple[PoolView, ...] = (pool("h100-a", "h100", node("h1", 8)),)

NOW = 100.0
YOUNG = {0: 60.0}  # priority 0 runs at least 60 s before it may be preempted
# team-a's nominal is idle: team-b borrows all of it, in one job per node.
LENT = (
    team("team-a", "research", h100=quota(4, 4)),
    team("team-b", "research", h100=quota(4, 4)),
)


CASES = [
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(team("team-a", h100=quota(8)),),
            running=(ran("low", "team-a", "h1", ALL8, started=NOW - 10),),
            pending=(job("j", "team-a", 8, priority=10),),
            policy=Policy(min_runtime_s=YOUNG),
            want_pending={"j": {PREEMPTION}},
        ),
        id="a job younger than its minimum run time is not preempted for priority",
    ),
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(team("team-a", h100=quota(8)),),
            running=(ran("low", "team-a", "h1", ALL8, started=NOW - 60),),
            pending=(job("j", "team-a", 8, priority=10),),
            policy=Policy(min_runtime_s=YOUNG),
            want_preempted={"low": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="once it ran its minimum run time it may be",
    ),
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(team("team-a", h100=quota(8)),),
            running=(ran("low", "team-a", "h1", ALL8, preempted=3),),
            pending=(job("j", "team-a", 8, priority=10),),
            want_pending={"j": {PREEMPTION}},
        ),
        id="a job preempted max_preemptions_per_job times is not preempted for priority",
    ),
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(team("team-a", h100=quota(8)),),
            running=(ran("low", "team-a", "h1", ALL8, preempted=3),),
            pending=(job("j", "team-a", 8, priority=10),),
            policy=Policy(max_preemptions_per_job=None),
            want_preempted={"low": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="no cap: it may be",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=LENT,
            running=(
                ran("b1", "team-b", "h1", ALL4, started=NOW - 1, preempted=5),
                ran("b2", "team-b", "h2", ALL4, started=NOW - 1),
            ),
            pending=(job("a1", "team-a", 4),),
            policy=Policy(min_runtime_s=YOUNG),
            want_preempted={"b1": "a1"},
            want_pending={"a1": {PREEMPTING}},
        ),
        id="a reclaim of the guarantee overrides the minimum run time and the cap",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(8)),),
            running=(
                ran("long", "team-a", "h1", ALL4, started=NOW - 50),
                ran("short", "team-a", "h2", ALL4, started=NOW - 5),
            ),
            pending=(job("j", "team-a", 4, priority=10),),
            want_preempted={"short": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="among equals the victim that ran least (wastes the least work)",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8), node("h2", 8)),),
            teams=(
                team("team-a", "research", h100=quota(8, 0)),
                team("team-b", "research", h100=quota(0)),
            ),
            # team-b borrows 12: four 1-GPU jobs spread on h1 and one 8-GPU job on h2.
            running=(
                *(ran(f"s{i}", "team-b", "h1", (i,), started=NOW - 1) for i in range(4)),
                ran("whole", "team-b", "h2", tuple(range(8)), started=NOW - 90),
            ),
            pending=(job("a", "team-a", 8),),
            want_preempted={"whole": "a"},
            want_pending={"a": {PREEMPTING}},
        ),
        id="a whole-node reclaim takes the one job that frees a whole node",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8), node("h2", 8)),),
            teams=(
                team("team-a", "research", h100=quota(16, 0)),
                team("team-b", "research", h100=quota(0)),
            ),
            running=(
                *(ran(f"b{i}", "team-b", "h1", (i,)) for i in range(8)),
                *(ran(f"c{i}", "team-b", "h2", (i,)) for i in range(8)),
            ),
            pending=(job("gang", "team-a", 8, nodes=2),),
            policy=Policy(preemption_budget=4),
            want_preempted={
                **{f"b{i}": "gang" for i in range(8)},
                **{f"c{i}": "gang" for i in range(8)},
            },
            want_pending={"gang": {PREEMPTING}},
        ),
        id="a gang's reclaim within nominal may take more victims than the cycle's budget",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1", 8)),),
            teams=(team("team-a", h100=quota(8)),),
            running=tuple(ran(f"low{i}", "team-a", "h1", (i,)) for i in range(8)),
            pending=(job("j", "team-a", 8, priority=10),),
            policy=Policy(preemption_budget=4),
            want_pending={"j": {PREEMPTION}},
        ),
        id="preempting for priority keeps to the budget",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_run_cycle(case: Case) -> None:
    check(case, run_cycle(case.snapshot(), case.policy))


@pytest.mark.parametrize(
    ("hungry_team", "want"),
    [
        pytest.param("team-c", ["a1"], id="room held for a borrower goes to the guarantee"),
        pytest.param("team-b", [], id="room held for a job within its own nominal stays held"),
    ],
)
def test_a_borrowers_reservation_never_blocks_a_guarantee(
    hungry_team: str, want: list[str]
) -> None:
    """A starving job holds h2; team-a, within its nominal, fits only there. It takes the room
    when the starving job borrows, and not when that job is owed its own guarantee."""
    teams = (
        team("team-a", "research", h100=quota(4, 0)),
        team("team-b", "research", h100=quota(12)),
        team("team-c", "research", h100=quota(0)),
    )
    running = (ran("b1", "team-b", "h1", ALL4, ends_by=NOW + 500),)
    case = Case(pools=TWO_NODES, teams=teams, running=running, pending=())
    ws = Workspace(case.snapshot())
    held = Reservations(ws, Policy(starvation_after_s=10.0))
    hungry = job("hungry", hungry_team, 4, nodes=2, at=0.0)  # due when b1 ends: it holds h2
    assert held.reserve(hungry, ("h100",)) is not None
    assert held.items[0].guaranteed is (hungry_team == "team-b")
    admitted = held.backfill(job("a1", "team-a", 4, at=NOW), ("h100",))
    assert [a.job_id for a in [admitted] if a is not None] == want


@pytest.mark.parametrize(
    ("running", "policy", "words"),
    [
        pytest.param(
            ran("low", "team-a", "h1", tuple(range(8)), started=NOW - 10),
            Policy(min_runtime_s=YOUNG),
            "have not run their minimum run time yet (the first may be preempted from 150)",
            id="minimum run time",
        ),
        pytest.param(
            ran("low", "team-a", "h1", tuple(range(8)), preempted=3),
            Policy(),
            "were preempted 3 times already (scheduler.max_preemptions_per_job)",
            id="preemption cap",
        ),
    ],
)
def test_why_names_the_protection(running: RunningJob, policy: Policy, words: str) -> None:
    case = Case(
        pools=EIGHT,
        teams=(team("team-a", h100=quota(8)),),
        running=(running,),
        pending=(job("j", "team-a", 8, priority=10),),
        policy=policy,
        now=NOW,
    )
    (reason,) = run_cycle(case.snapshot(), policy).pending["j"]
    assert reason.code is PREEMPTION
    assert "would fit by preempting 1 job of team-a (priority 0)" in reason.message
    assert words in reason.message


@pytest.mark.parametrize(
    ("running", "policy", "want"),
    [
        pytest.param(
            ran("low", "team-a", "h1", ALL8, started=NOW - 10),
            Policy(min_runtime_s=YOUNG),
            NOW + 50,
            id="a young victim: the cycle says when it may be preempted",
        ),
        pytest.param(
            ran("low", "team-a", "h1", ALL8, started=NOW - 10, preempted=3),
            Policy(min_runtime_s=YOUNG),
            None,
            id="a capped victim never becomes preemptible: no time",
        ),
        pytest.param(
            ran("low", "team-a", "h1", ALL8, started=NOW - 60),
            Policy(min_runtime_s=YOUNG),
            None,
            id="an old victim is preempted now: no time",
        ),
    ],
)
def test_the_cycle_says_when_protection_ends(
    running: RunningJob, policy: Policy, want: float | None
) -> None:
    case = Case(
        pools=EIGHT,
        teams=(team("team-a", h100=quota(8)),),
        running=(running,),
        pending=(job("j", "team-a", 8, priority=10),),
        policy=policy,
        now=NOW,
    )
    assert run_cycle(case.snapshot(), policy).protected_until == want
