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

from gpupool.scheduler import Nomination, Parking, Policy, Snapshot, run_cycle
from gpupool.scheduler.snapshot import ReasonCode
from unit.scheduler.test_scheduler_preemption import job, node, occupied, pool, quota, run, team

NODE = (pool("h100-a", "h100", node("h1", 4)),)
TEAMS = (
    team("team-a", "research", h100=quota(2)),
    team("team-b", "research", history=100.0, h100=quota(2)),
)
# team-x (nominal 4) and team-c (nominal 1) are in no cohort: team-c competes for room only.
OWN = (team("team-x", history=100.0, h100=quota(4)), team("team-c", h100=quota(1)))
PREEMPTING, CAPACITY = ReasonCode.PREEMPTING, ReasonCode.CAPACITY
COHORT = ReasonCode.COHORT


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
    assert run_cycle(snapshot, Policy(), Parking()) == result


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
