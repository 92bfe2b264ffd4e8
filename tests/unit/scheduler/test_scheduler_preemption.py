"""Preemption, starvation reservations and fair-share history as named cases (docs/architecture.md
§5.5-5.6).

Running jobs here sit on real nodes: the builders derive each node's ``used_*`` from the jobs
placed on it, so a victim frees exactly the room it holds.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.scheduler import (
    Policy,
    run_cycle,
)
from gpupool.scheduler.snapshot import (
    BorrowWithinCohort,
    PreemptionPolicy,
    ReasonCode,
    Reclaim,
    WithinTeam,
)
from support.scheduler_cases import Case, check, job, node, pool, quota, run, team

# --- builders -----------------------------------------------------------------------------------


def research(**kinds: PreemptionPolicy) -> Policy:
    return Policy(preemption={"research": kinds["policy"]})


PREEMPTING, PREEMPTION = ReasonCode.PREEMPTING, ReasonCode.PREEMPTION
QUOTA, CAPACITY, RESERVED = ReasonCode.QUOTA, ReasonCode.CAPACITY, ReasonCode.RESERVED
TWO_NODES = (pool("h100-a", "h100", node("h1"), node("h2")),)
EIGHT = (pool("h100-a", "h100", node("h1", 8)),)
ALL4 = (0, 1, 2, 3)

# team-b borrows 4 of team-a's idle nominal h100 GPUs: b1 and b2 fill both nodes.
A_LENDS_TO_B = dict(
    pools=TWO_NODES,
    teams=(
        team("team-a", "research", h100=quota(4, 4)),
        team("team-b", "research", h100=quota(4, 4)),
    ),
    running=(
        run("b1", "team-b", "h1", ALL4, priority=0, started=10),
        run("b2", "team-b", "h2", ALL4, priority=100, started=20),
    ),
)

PREEMPTION_CASES = [
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(8)),),
            running=(
                run("old", "team-a", "h1", ALL4, started=10),
                run("new", "team-a", "h2", ALL4, started=20),
            ),
            pending=(job("j", "team-a", 4, priority=10),),
            want_preempted={"new": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="preempts the newest lower-priority job of the same team, and waits for it",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(8)),),
            running=(
                run("same", "team-a", "h1", ALL4, priority=10),
                run("higher", "team-a", "h2", ALL4, priority=20),
            ),
            pending=(job("j", "team-a", 4, priority=10),),
            want_pending={"j": {QUOTA}},
        ),
        id="never preempts equal or higher priority of the same team",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(8)),),
            running=(run("low", "team-a", "h1", ALL4), run("low2", "team-a", "h2", ALL4)),
            pending=(job("j", "team-a", 4, priority=10),),
            policy=Policy(default_preemption=PreemptionPolicy(within_team=WithinTeam.NEVER)),
            want_pending={"j": {PREEMPTION}},
        ),
        id="within_team=never explains what would have to be preempted",
    ),
    pytest.param(
        Case(
            **{
                **A_LENDS_TO_B,
                "running": (
                    run("b1", "team-b", "h1", ALL4, priority=80, started=10),
                    run("b2", "team-b", "h2", ALL4, priority=100, started=20),
                ),
            },
            pending=(job("j", "team-a", 4, priority=50),),
            want_preempted={"b1": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="reclaim=any takes back lent quota even from a higher priority job",
    ),
    pytest.param(
        Case(
            **A_LENDS_TO_B,
            pending=(job("j", "team-a", 4, priority=50),),
            policy=research(policy=PreemptionPolicy(reclaim=Reclaim.LOWER_PRIORITY)),
            want_preempted={"b1": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="reclaim=lower_priority takes only a lower-priority borrower",
    ),
    pytest.param(
        Case(
            **A_LENDS_TO_B,
            pending=(job("j", "team-a", 4, priority=0),),
            policy=research(policy=PreemptionPolicy(reclaim=Reclaim.LOWER_PRIORITY)),
            want_pending={"j": {PREEMPTION}},
        ),
        id="reclaim=lower_priority with no lower-priority borrower explains",
    ),
    pytest.param(
        Case(
            **A_LENDS_TO_B,
            pending=(job("j", "team-a", 4, priority=50),),
            policy=research(policy=PreemptionPolicy(reclaim=Reclaim.NEVER)),
            want_pending={"j": {PREEMPTION}},
        ),
        id="reclaim=never explains what would have to be preempted",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(
                team("team-a", "research", h100=quota(0, 8)),
                team("team-b", "research", h100=quota(0, 8)),
                team("team-c", "research", h100=quota(8)),
            ),
            running=(
                run("b-low", "team-b", "h1", ALL4, priority=0),
                run("b-mid", "team-b", "h2", ALL4, priority=7, started=50),
            ),
            pending=(job("j", "team-a", 4, priority=50),),
            policy=research(
                policy=PreemptionPolicy(
                    borrow_within_cohort=BorrowWithinCohort.LOWER_PRIORITY,
                    borrow_max_priority_threshold=5,
                )
            ),
            want_preempted={"b-low": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="borrowing within cohort preempts a lower-priority borrower up to the threshold",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(
                team("team-a", "research", h100=quota(0, 8)),
                team("team-b", "research", h100=quota(0, 8)),
                team("team-c", "research", h100=quota(8)),
            ),
            running=(
                run("b-mid", "team-b", "h1", ALL4, priority=7),
                run("b-high", "team-b", "h2", ALL4, priority=70),
            ),
            pending=(job("j", "team-a", 4, priority=50),),
            policy=research(
                policy=PreemptionPolicy(
                    borrow_within_cohort=BorrowWithinCohort.LOWER_PRIORITY,
                    borrow_max_priority_threshold=5,
                )
            ),
            want_pending={"j": {PREEMPTION}},
        ),
        id="borrowers above the threshold are not preempted",
    ),
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(
                team("team-a", "research", h100=quota(4, 4)),
                team("team-b", "research", h100=quota(2, 4)),
                team("team-c", "research", h100=quota(2)),
            ),
            running=(
                run("a-low", "team-a", "h1", (0, 1), priority=0),
                run("b-old", "team-b", "h1", (2, 3, 4, 5), priority=100, started=10),
                run("b-new", "team-b", "h1", (6, 7), priority=100, started=20),
            ),
            pending=(job("j", "team-a", 2, priority=10),),
            want_preempted={"b-new": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="borrowed jobs go before the team's own lower-priority jobs; newest first",
    ),
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(
                team("team-a", "research", h100=quota(4, 4)),
                team("team-b", "research", h100=quota(2, 4)),
                team("team-c", "research", h100=quota(2)),
            ),
            running=(
                run("a-low", "team-a", "h1", (0, 1), priority=0),
                run("a-mid", "team-a", "h1", (2, 3), priority=5),
                run("b-old", "team-b", "h1", (4, 5), priority=9, started=10),
                run("b-new", "team-b", "h1", (6, 7), priority=9, started=20),
            ),
            pending=(job("j", "team-a", 2, priority=10),),
            # Greedy: b-new (borrowed) frees room but a stays at nominal; b-old is skipped (b
            # no longer borrows); a-low makes it fit. Minimality puts b-new back.
            want_preempted={"a-low": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="minimal set drops a victim that is no longer needed",
    ),
    pytest.param(
        Case(
            pools=(
                pool("h100-a", "h100", node("h1"), node("h2")),
                pool("h100-b", "h100", node("h3")),
            ),
            teams=(team("team-a", h100=quota(24)),),
            running=(
                run("low", "team-a", "h1", ALL4),
                run("high", "team-a", "h2", ALL4, priority=99),
                run("low-b", "team-a", "h3", ALL4, pool_name="h100-b"),
            ),
            pending=(job("gang", "team-a", 4, nodes=2, priority=10),),
            want_pending={"gang": {CAPACITY}},
        ),
        id="never preempts when even every candidate would not make a gang fit in one pool",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(8)),),
            running=(
                run("low1", "team-a", "h1", ALL4, started=10),
                run("low2", "team-a", "h2", ALL4, started=20),
            ),
            pending=(
                job("j1", "team-a", 4, priority=10, at=1),
                job("j2", "team-a", 4, priority=10, at=2),
            ),
            policy=Policy(preemption_budget=1),
            want_preempted={"low2": "j1"},
            want_pending={"j1": {PREEMPTING}, "j2": {QUOTA, PREEMPTION}},
        ),
        id="the budget caps preemptions per cycle",
    ),
    pytest.param(
        Case(
            pools=EIGHT,
            teams=(team("team-a", h100=quota(16)),),
            running=(run("low1", "team-a", "h1", ALL4), run("low2", "team-a", "h1", (4, 5, 6, 7))),
            pending=(job("j", "team-a", 8, priority=10),),
            policy=Policy(preemption_budget=1),
            want_pending={"j": {PREEMPTION}},
        ),
        id="a set larger than the budget left is not preempted",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(8)),),
            running=(
                run("low1", "team-a", "h1", ALL4, started=10),
                run("low2", "team-a", "h2", ALL4, started=20, terminating=True),
            ),
            pending=(job("j", "team-a", 4, priority=10),),
            want_pending={"j": {PREEMPTING}},
        ),
        id="waits for terminating jobs instead of preempting more",
    ),
    pytest.param(
        Case(
            pools=TWO_NODES,
            teams=(team("team-a", h100=quota(16)),),
            running=(run("low1", "team-a", "h1", ALL4), run("low2", "team-a", "h2", ALL4)),
            pending=(
                job("j1", "team-a", 4, priority=10, at=1),
                job("j2", "team-a", 4, priority=10, at=2),
                job("small", "team-a", 1, priority=1, at=3),
            ),
            want_preempted={"low1": "j1", "low2": "j2"},
            want_pending={"j1": {PREEMPTING}, "j2": {PREEMPTING}, "small": {CAPACITY}},
        ),
        id="two preemptors never count the same room; freed room is not handed out",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1")), pool("t4-a", "t4", node("t1"))),
            teams=(team("team-a", h100=quota(8), t4=quota(8)),),
            running=(run("low", "team-a", "h1", ALL4),),
            pending=(job("j", "team-a", 4, priority=10, types=("h100", "t4")),),
            want_admitted={"j": {"t1": ALL4}},
        ),
        id="spill-over to a free type is preferred over preemption",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1")), pool("t4-a", "t4", node("t1"))),
            teams=(team("team-a", h100=quota(8), t4=quota(8)),),
            running=(
                run("high", "team-a", "h1", ALL4, priority=20),
                run("low", "team-a", "t1", ALL4, pool_name="t4-a", gpu_type="t4"),
            ),
            pending=(job("j", "team-a", 4, priority=10, types=("h100", "t4")),),
            want_preempted={"low": "j"},
            want_pending={"j": {PREEMPTING}},
        ),
        id="preempts on the first type where preemption makes it fit",
    ),
]

# h1 frees at 200, h2 at 300: a starving 4-GPU job reserves h1's free GPUs until 200.
STARVING = dict(
    pools=TWO_NODES,
    teams=(team("team-a", h100=quota(8)), team("team-b", h100=quota(8))),
    running=(
        run("r1", "team-c", "h1", (0, 1), priority=100, ends_by=200),
        run("r2", "team-c", "h2", ALL4, priority=100, ends_by=300),
    ),
)

ORDER_CASES = [
    pytest.param(
        Case(
            **STARVING,
            pending=(
                job("big", "team-a", 4, at=0),
                job("small", "team-b", 1, priority=10, at=90),
                job("backfill", "team-b", 1, priority=10, at=91, runtime=50),
            ),
            policy=Policy(starvation_after_s=60),
            want_admitted={"backfill": {"h1": (2,)}},
            want_pending={"big": {CAPACITY}, "small": {RESERVED}},
        ),
        id="a reservation blocks a later job but lets a short one backfill",
    ),
    pytest.param(
        Case(
            **STARVING,
            pending=(
                job("big", "team-a", 4, at=0),
                job("small", "team-b", 1, priority=10, at=90),
                job("long", "team-b", 1, priority=10, at=91, runtime=500),
            ),
            policy=Policy(starvation_after_s=60),
            want_pending={"big": {CAPACITY}, "small": {RESERVED}, "long": {RESERVED}},
        ),
        id="a job running past the due time may not backfill",
    ),
    pytest.param(
        Case(
            **STARVING,
            pending=(job("big", "team-a", 4, at=0), job("small", "team-b", 1, priority=10)),
            want_admitted={"small": {"h1": (2,)}},
            want_pending={"big": {CAPACITY}},
        ),
        id="without starvation protection the small job takes the room",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1")),),
            teams=(team("team-a", h100=quota(8)), team("team-b", h100=quota(8))),
            running=(run("r1", "team-c", "h1", (0, 1, 2)),),
            pending=(job("old", "team-a", 1, at=0), job("urgent", "team-b", 1, priority=9, at=80)),
            policy=Policy(starvation_after_s=60),
            want_admitted={"old": {"h1": (3,)}},
            want_pending={"urgent": {CAPACITY}},
        ),
        id="a starving head goes before other teams' heads",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1")),),
            teams=(
                team("team-a", "research", h100=quota(0)),
                team("team-b", "research", h100=quota(8)),
            ),
            running=(run("r1", "team-c", "h1", (0, 1, 2)),),
            pending=(
                job("victim", "team-a", 1, at=0, requeued_at=95),
                job("reclaimer", "team-b", 1, at=80),
            ),
            policy=Policy(starvation_after_s=60),
            want_admitted={"reclaimer": {"h1": (3,)}},
            want_pending={"victim": {CAPACITY}},
        ),
        id="a requeued victim keeps its submit time but starts waiting again",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1")),),
            teams=(
                team("team-a", history=1000.0, h100=quota(4)),
                team("team-b", history=10.0, h100=quota(4)),
            ),
            running=(run("r1", "team-c", "h1", (0, 1, 2)),),
            pending=(job("a1", "team-a", 1, at=0), job("b1", "team-b", 1, at=5)),
            want_admitted={"b1": {"h1": (3,)}},
            want_pending={"a1": {CAPACITY}},
        ),
        id="equal shares go to the team with less decayed history",
    ),
    pytest.param(
        Case(
            pools=(pool("h100-a", "h100", node("h1")),),
            teams=(
                team("team-a", weight=100.0, history=1000.0, h100=quota(4)),
                team("team-b", history=50.0, h100=quota(4)),
            ),
            running=(run("r1", "team-c", "h1", (0, 1, 2)),),
            pending=(job("a1", "team-a", 1, at=5), job("b1", "team-b", 1, at=0)),
            want_admitted={"a1": {"h1": (3,)}},
            want_pending={"b1": {CAPACITY}},
        ),
        id="history is divided by the weight",
    ),
]


@pytest.mark.parametrize("case", PREEMPTION_CASES + ORDER_CASES)
def test_run_cycle(case: Case) -> None:
    snapshot = case.snapshot()
    result = run_cycle(snapshot, case.policy)
    check(case, result)
    assert run_cycle(snapshot, case.policy) == result


# --- explanations -------------------------------------------------------------------------------


def test_not_allowed_names_the_victims_and_the_rule() -> None:
    case = Case(
        **{
            **A_LENDS_TO_B,
            "running": (
                run("b1", "team-b", "h1", ALL4, priority=500),
                run("b2", "team-b", "h2", ALL4, priority=600),
            ),
        },
        pending=(job("j", "team-a", 4, priority=500),),
        policy=research(policy=PreemptionPolicy(reclaim=Reclaim.LOWER_PRIORITY)),
    )
    (reason,) = run_cycle(case.snapshot(), case.policy).pending["j"]
    assert reason.code is PREEMPTION
    assert reason.message == (
        "h100: would fit by preempting 1 job of team-b (priority 500), but team-a's policy "
        "does not allow reclaiming from priority ≥ 500"
    )


def test_preemption_and_waiting_say_why() -> None:
    case = Case(**A_LENDS_TO_B, pending=(job("j", "team-a", 4, priority=50),))
    result = run_cycle(case.snapshot(), case.policy)
    (preemption,) = result.preemptions
    assert (preemption.job_id, preemption.preemptor_id) == ("b1", "j")
    assert "team-b runs above its nominal h100 quota" in preemption.reason
    assert "team-a reclaims it" in preemption.reason
    (reason,) = result.pending["j"]
    assert reason.message == "waiting for 1 preempted job to end on h100"


def test_reservation_reasons_name_node_job_and_due_time() -> None:
    case = Case(
        **STARVING,
        pending=(job("big", "team-a", 4, at=0), job("small", "team-b", 1, at=90)),
        policy=Policy(starvation_after_s=60),
    )
    result = run_cycle(case.snapshot(), case.policy)
    assert result.pending["small"][0].message == (
        "h100 GPUs on node h1 are reserved for job big (waiting since 0) until 200"
    )
    assert "held for it until 200" in result.pending["big"][-1].message


def test_next_cycle_waits_for_the_victims_without_new_preemptions() -> None:
    case = Case(
        pools=TWO_NODES,
        teams=(team("team-a", h100=quota(8)),),
        running=(run("low1", "team-a", "h1", ALL4), run("low2", "team-a", "h2", ALL4)),
        pending=(job("j", "team-a", 4, priority=10),),
    )
    first = run_cycle(case.snapshot(), case.policy)
    (preemption,) = first.preemptions
    ending = tuple(
        replace(r, terminating=True) if r.id == preemption.job_id else r for r in case.running
    )
    for _ in range(3):  # the victim takes a while to end: still no storm
        again = run_cycle(replace(case, running=ending).snapshot(), case.policy)
        assert again.preemptions == ()
        assert {r.code for r in again.pending["j"]} == {PREEMPTING}
