"""Nominated preemptors (issue 10, M3) as named cases: the room a preemption frees goes to its
preemptor, before any other decision, and nothing else is admitted onto what it counts on.

The cluster: one node of 4 h100 GPUs. Team-a and team-b lend each other in the cohort
``research`` (nominal 2 each); team-b's usage history is higher, so when both teams are owed
their guarantee team-a is decided first: that is what gave the freed room back to the requeued
victim, a job of team-a, before nominations existed. Other cases use team-x and team-c, in no
cohort, so that a job of another team competes for room only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from gpupool.controller.parking import Parking, groups_of
from gpupool.scheduler import (
    Nomination,
    PendingJob,
    Placement,
    Policy,
    RunningJob,
    Snapshot,
    run_cycle,
)
from gpupool.scheduler.snapshot import QuotaView, ReasonCode
from support.scheduler_cases import job, node, occupied, pool, quota, run, team

NODE = (pool("h100-a", "h100", node("h1", 4)),)
TEAMS = (
    team("team-a", "research", h100=quota(2)),
    team("team-b", "research", history=100.0, h100=quota(2)),
)
# team-x (nominal 4) and team-c (nominal 1) are in no cohort: team-c competes for room only.
OWN = (team("team-x", history=100.0, h100=quota(4)), team("team-c", h100=quota(1)))
PREEMPTING, CAPACITY = ReasonCode.PREEMPTING, ReasonCode.CAPACITY
COHORT, QUOTA = ReasonCode.COHORT, ReasonCode.QUOTA


@dataclass(frozen=True)
class Case:
    teams: tuple
    running: tuple
    pending: tuple
    nominations: tuple[Nomination, ...] = ()
    want_admitted: dict[str, tuple[int, ...]] = field(default_factory=dict)  # job -> devices
    want_preempted: dict[str, str] = field(default_factory=dict)  # victim -> preemptor
    want_pending: dict[str, set[ReasonCode]] = field(default_factory=dict)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now=100.0,
            pools=occupied(NODE, self.running),
            teams={t.name: t for t in self.teams},
            running=self.running,
            pending=self.pending,
            nominations=self.nominations,
        )


# team-a ran a1 and v (2 GPUs, borrowing 1); p of team-b reclaimed v, which has ended and is
# queued again with its old submit time. a3 makes team-a owed its guarantee too.
VICTIM_ENDED = dict(
    teams=TEAMS,
    running=(run("a1", "team-a", "h1", (0,)), run("b1", "team-b", "h1", (3,))),
    pending=(
        job("v", "team-a", 2, at=0.0, requeued_at=99.0),
        job("a3", "team-a", 1, at=10.0),
        job("p", "team-b", 1, at=50.0),
    ),
)
# p (priority 10) of team-x preempted v, still ending; p needs 2 GPUs: v's and the free device 3,
# which c1 of team-c (owed its guarantee, so decided first) could take.
VICTIM_ENDING = dict(
    teams=OWN,
    running=(
        run("x1", "team-x", "h1", (0,), started=10.0),
        run("x2", "team-x", "h1", (1,), started=40.0),
        run("v", "team-x", "h1", (2,), started=50.0, terminating=True),
    ),
    pending=(job("p", "team-x", 2, priority=10, at=50.0), job("c1", "team-c", 1, at=60.0)),
)

# p (priority 10) of team-b preempted its teammate v to run 3 GPUs, borrowing one from team-a's
# unused nominal; a1 of team-a, within its nominal, has taken that quota back since (a team
# within nominal is never refused by the cohort). v has ended and is queued again.
LENDER_CAME_BACK = dict(
    teams=(team("team-a", "research", h100=quota(1)), team("team-b", "research", h100=quota(2))),
    running=(run("a1", "team-a", "h1", (0,)),),
    pending=(
        job("v", "team-b", 1, at=0.0, requeued_at=99.0),
        job("p", "team-b", 3, priority=10, at=50.0),
    ),
)
# p, GPU-less (8 CPUs), preempted v of team-c for CPUs of h1; g, a GPU-less job of p's team-x,
# now holds what is left of team-x's cap of 8 CPUs. c1 of team-c wants the 4 free CPUs.


def _gpuless_run(
    job_id: str, team_name: str, cpus: float, terminating: bool = False, node_name: str = "h1"
) -> RunningJob:
    placements = (Placement(node_name, ()),)
    return RunningJob(
        job_id, team_name, 0, "h100", "h100-a", placements, cpus, 0.0, 10.0, terminating
    )


def _gpuless(
    job_id: str, team_name: str, cpus: float, priority: int = 0, at: float = 50.0
) -> PendingJob:
    return PendingJob(job_id, team_name, priority, at, 0, cpus=cpus)


GPULESS_CAPPED = dict(
    teams=(
        team("team-x", h100=QuotaView(4, cpus=8.0)),
        team("team-c", h100=quota(1)),
    ),
    running=(
        _gpuless_run("g", "team-x", 4.0),
        _gpuless_run("o", "team-c", 20.0),
        _gpuless_run("v", "team-c", 4.0, terminating=True),
    ),
    pending=(_gpuless("p", "team-x", 8.0, priority=10), _gpuless("c1", "team-c", 4.0)),
    nominations=(Nomination("p", ("v",), "h100-a", (Placement("h1", ()),)),),
)

CASES = [
    pytest.param(
        Case(
            **VICTIM_ENDED,
            want_admitted={"v": (1, 2)},
            want_preempted={"a1": "p"},
            want_pending={"a3": {COHORT}, "p": {PREEMPTING}},
        ),
        id="without a nomination the requeued victim takes its room back (the livelock)",
    ),
    pytest.param(
        Case(
            **VICTIM_ENDED,
            nominations=(Nomination("p", ("v",)),),
            want_admitted={"p": (1,), "a3": (2,)},
            want_pending={"v": {COHORT}},
        ),
        id="the room a victim freed goes to its preemptor, not back to the victim",
    ),
    pytest.param(
        Case(
            **VICTIM_ENDING,
            want_admitted={"c1": (3,)},
            want_preempted={"x2": "p"},
            want_pending={"p": {PREEMPTING}},
        ),
        id="without a nomination another job takes the free room and the preemptor "
        "picks a new victim",
    ),
    pytest.param(
        Case(
            **VICTIM_ENDING,
            nominations=(Nomination("p", ("v",)),),
            want_pending={"p": {PREEMPTING}, "c1": {CAPACITY}},
        ),
        id="while its victim ends the preemptor holds the free room it counts on, and "
        "preempts no one new",
    ),
    pytest.param(
        Case(
            teams=OWN,
            running=(
                *VICTIM_ENDING["running"],
                run("c0", "team-c", "h1", (3,)),
            ),
            pending=(job("p", "team-x", 2, priority=10, at=50.0),),
            nominations=(Nomination("p", ("v",)),),
            want_preempted={"x2": "p"},
            want_pending={"p": {PREEMPTING}},
        ),
        id="a nomination that cannot make its preemptor fit lapses: decided as any job",
    ),
    pytest.param(
        Case(
            **VICTIM_ENDED,
            nominations=(Nomination("gone", ("v",)),),
            want_admitted={"v": (1, 2)},
            want_preempted={"a1": "p"},
            want_pending={"a3": {COHORT}, "p": {PREEMPTING}},
        ),
        id="the nomination of a job no longer queued changes nothing",
    ),
    pytest.param(
        Case(
            teams=TEAMS,
            running=(
                run("a1", "team-a", "h1", (0,)),
                run("v", "team-a", "h1", (1, 2), started=50.0),
            ),
            pending=(job("p", "team-b", 2, at=50.0),),
            nominations=(Nomination("p", ("v",)),),
            want_preempted={"v": "p"},
            want_pending={"p": {PREEMPTING}},
        ),
        id="a victim that was never signalled is not waited on: it is preempted now",
    ),
    pytest.param(
        Case(
            **LENDER_CAME_BACK,
            want_admitted={"v": (1,)},
            want_pending={"p": {COHORT}},
        ),
        id="without a nomination the victim takes its room back once a lender took its "
        "quota back (the preemptor would preempt it again)",
    ),
    pytest.param(
        Case(
            **LENDER_CAME_BACK,
            nominations=(Nomination("p", ("v",), "h100-a", (Placement("h1", (1, 2, 3)),)),),
            want_admitted={"p": (1, 2, 3)},
            want_pending={"v": {COHORT}},
        ),
        id="a lender that took back the quota a preemptor borrows does not void its "
        "preemption: it starts on the room its victim freed",
    ),
    pytest.param(
        Case(
            **GPULESS_CAPPED,
            want_admitted={"c1": ()},
            want_pending={"p": {QUOTA}},
        ),
        id="a GPU-less preemptor its team's cap now stops holds no room: the nomination lapses",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_nominations(case: Case) -> None:
    snapshot = case.snapshot()
    result = run_cycle(snapshot, Policy())
    got = {a.job_id: tuple(d for p in a.placements for d in p.devices) for a in result.admissions}
    assert got == case.want_admitted
    assert {p.job_id: p.preemptor_id for p in result.preemptions} == case.want_preempted
    assert {j: {r.code for r in why} for j, why in result.pending.items()} == case.want_pending
    # Parking is only a saving: the same result with it (a cycle with nominations parks nothing).
    lot = Parking()
    assert lot.cycle(snapshot, Policy(), groups_of(snapshot.pending)) == result
    assert not lot.teams


def test_a_nomination_not_considered_for_the_admission_bound_stands() -> None:
    """``max_admissions`` reached before a nominated preemptor's turn: the cycle decides nothing
    more, and the nomination is listed again as it was (dropped, the next cycle would decide
    the preemptor as any job, free to preempt again)."""
    case = Case(**VICTIM_ENDED, nominations=())
    first, second = Nomination("q", ("w",)), Nomination("p", ("v",), "h100-a")
    snapshot = replace(
        case.snapshot(),
        pending=(*case.pending, job("q", "team-b", 1, at=40.0)),
        nominations=(first, second),
    )
    result = run_cycle(snapshot, Policy(max_admissions=1))
    assert [a.job_id for a in result.admissions] == ["q"]
    assert result.nominations == (second,)


def test_nominated_preemptors_go_in_the_order_they_were_decided() -> None:
    """Two preemptors owed room that fits one of them: the earlier nomination wins."""
    case = Case(**VICTIM_ENDED, nominations=())
    snapshot = replace(
        case.snapshot(),
        pending=(job("p", "team-b", 2, at=50.0), job("q", "team-b", 2, at=40.0)),
    )
    for first, second in (("p", "q"), ("q", "p")):
        nominated = replace(
            snapshot, nominations=(Nomination(first, ("v",)), Nomination(second, ("w",)))
        )
        result = run_cycle(nominated, Policy())
        assert [a.job_id for a in result.admissions] == [first]


def test_a_gpuless_preemptor_keeps_its_share_of_the_cap() -> None:
    """A GPU-less preemptor's claim counts against its team's cap at once: another GPU-less
    job of the team cannot take the share it counts on while its victim ends (that would void
    the preemption, and the preemptor preempt again later)."""
    pools = occupied(
        (pool("h100-a", "h100", node("h1", cpus=32), node("h2", cpus=32)),),
        running := (
            RunningJob("v", "team-c", 0, "h100", "h100-a", (Placement("h1", (0,)),), 28.0),
            _gpuless_run("w", "team-z", 28.0, node_name="h2"),
        ),
    )
    snapshot = Snapshot(
        now=100.0,
        pools=pools,
        teams={
            "team-x": team("team-x", "research", h100=QuotaView(4, cpus=8.0)),
            "team-c": team("team-c", "research", h100=quota(0)),
        },
        running=running,
        pending=(_gpuless("p", "team-x", 8.0, at=10.0), _gpuless("g", "team-x", 4.0, at=20.0)),
    )
    result = run_cycle(snapshot, Policy())
    assert {p.job_id: p.preemptor_id for p in result.preemptions} == {"v": "p"}
    assert result.admissions == ()
    assert {r.code for r in result.pending["g"]} == {QUOTA}
