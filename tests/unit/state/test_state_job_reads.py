"""The job reads the dashboard adds to state.jobs and state.queue, on SQLite and PostgreSQL:
listing filtered by user and gpu type, a job's events, the newest events of a kind for some
teams, and how many queued jobs of a team come before one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from gpupool.state import jobs, queue
from gpupool.state.db import session_factory
from support.rows import T0, queued_job

# (id, team, user, status, asked types, placed type, priority, seconds after T0)
JOBS = [
    ("j-1", "team-a", "alice", "queued", ["h100"], None, 100, 1),
    ("j-2", "team-a", "alice", "running", ["h100", "t4"], "t4", 100, 2),
    ("j-3", "team-a", "carol", "queued", ["t4"], None, 100, 3),
    ("j-4", "team-b", "bob", "queued", [], None, 100, 4),
    ("j-5", "team-a", "alice", "queued", ["h100"], None, 1000, 5),
    ("j-6", "team-a", "alice", "succeeded", ["a100-80gb"], "a100-80gb", 100, 6),
]


@pytest.fixture
def sessions(store_engine: Engine):  # type: ignore[no-untyped-def]
    factory = session_factory(store_engine)
    with factory.begin() as session:
        for job_id, team, user, status, asked, placed, priority, after in JOBS:
            session.add(
                queued_job(
                    job_id,
                    team=team,
                    user=user,
                    status=status,
                    gpu_types=asked,
                    gpu_type=placed,
                    priority=priority,
                    submitted_at=T0 + timedelta(seconds=after),
                )
            )
    return factory


@dataclass
class Page:
    teams: list[str]
    user: str | None
    gpu_type: str | None
    want: list[str]


PAGES = [
    pytest.param(
        Page(["team-a", "team-b"], None, None, ["j-6", "j-5", "j-4", "j-3", "j-2", "j-1"]), id="all"
    ),
    pytest.param(Page(["team-a"], "alice", None, ["j-6", "j-5", "j-2", "j-1"]), id="by user"),
    pytest.param(Page(["team-a"], None, "h100", ["j-5", "j-1"]), id="h100: asked while queued"),
    pytest.param(Page(["team-a"], None, "t4", ["j-3", "j-2"]), id="t4: placed or asked"),
    pytest.param(Page(["team-a"], None, "a100-80gb", ["j-6"]), id="a type with a dash"),
    pytest.param(Page(["team-b"], None, "h100", []), id="any type asked is not a match"),
]


@pytest.mark.parametrize("case", PAGES)
def test_page_filters(sessions, case: Page) -> None:  # type: ignore[no-untyped-def]
    with sessions() as session:
        rows = jobs.page(
            session, case.teams, None, None, 10, user=case.user, gpu_type=case.gpu_type
        )
        assert [r.id for r in rows] == case.want


def test_events_of_a_job_and_the_newest_of_a_kind(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        jobs.add_event(session, "j-2", T0, "admitted", "attempt 1")
        jobs.add_event(session, "j-2", T0 + timedelta(seconds=1), "preempting", "yields to j-5")
        jobs.add_event(session, "j-4", T0 + timedelta(seconds=2), "preempting", "yields to j-9")
        jobs.add_event(session, "j-3", T0 + timedelta(seconds=3), "preempting", "yields to j-5")
    with sessions() as session:
        assert [(e.kind, e.message) for e in jobs.events(session, "j-2")] == [
            ("admitted", "attempt 1"),
            ("preempting", "yields to j-5"),
        ]
        newest = jobs.recent_events(session, "preempting", ["team-a"], 10)
        assert [(e.job_id, j.team) for e, j in newest] == [("j-3", "team-a"), ("j-2", "team-a")]
        assert len(jobs.recent_events(session, "preempting", ["team-a", "team-b"], 2)) == 2


@pytest.mark.parametrize(
    ("job_id", "want"),
    [
        pytest.param("j-5", 0, id="the highest priority is first"),
        pytest.param("j-1", 1, id="behind a higher priority"),
        pytest.param("j-3", 2, id="behind an earlier job of its priority too"),
        pytest.param("j-4", 0, id="another team's queue"),
    ],
)
def test_ahead_of(sessions, job_id: str, want: int) -> None:  # type: ignore[no-untyped-def]
    with sessions() as session:
        row = jobs.get(session, job_id)
        assert row is not None
        assert queue.ahead_of(session, row) == want
