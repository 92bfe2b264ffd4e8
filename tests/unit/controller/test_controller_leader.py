"""The controller lease on the real PostgreSQL: who leads, epochs, fencing, standby, handover.

Each test gets a database of its own (the lease row is one per store). Times that decide the
lease are the database's; the electors' own monotonic clocks are fakes, so a test can make
one believe it still leads after the database says otherwise (what fencing is for).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from gpupool.auth.tokens import create_token
from gpupool.config import Settings, load_settings
from gpupool.controller.leader import (
    SAFETY,
    LeaseElector,
    LeaseLost,
    LeaseTiming,
    StoreInUse,
    lock_sqlite_store,
)
from gpupool.core.errors import ConfigInvalid
from gpupool.server.app import create_app
from gpupool.server.runtime import build_runtime, grant_signing_key
from gpupool.server.serve import hold_store
from gpupool.spec.load import load_config
from gpupool.state import lease as lease_store
from gpupool.state.db import Sessions, make_engine, session_factory, upgrade
from support.databases import scratch_database

# Long enough that no lease runs out by itself under load; tests end one with expire().
LEASE_S = 5.0
TIMING = LeaseTiming(renew_s=0.1, lease_s=LEASE_S)


class FakeClock:
    """Real wall time (rows' timestamps), a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return self.t


@pytest.fixture
def store_url() -> Iterator[str]:
    with scratch_database() as url:
        yield url


@pytest.fixture
def sessions(store_url: str) -> Iterator[Sessions]:
    engine = make_engine(store_url)
    upgrade(engine)
    yield session_factory(engine)
    engine.dispose()


def electors(sessions: Sessions, *names: str) -> dict[str, LeaseElector]:
    return {n: LeaseElector(sessions, FakeClock(), TIMING, holder=n) for n in names}


def expire(sessions: Sessions) -> None:
    """As if the holder had died ``lease_s`` ago: the lease ends now by the database's clock."""
    with sessions.begin() as session:
        session.execute(text("UPDATE controller_lease SET expires_at = now()"))


def epoch(sessions: Sessions) -> int:
    with sessions() as session:
        seen = lease_store.read(session)
    assert seen is not None
    return seen.epoch


def unhold(sessions: Sessions, *holders: str) -> None:
    current = epoch(sessions)
    with sessions.begin() as session:
        for holder in holders:
            lease_store.release(session, holder, current)


def fence_passes(sessions: Sessions, elector: LeaseElector) -> bool:
    try:
        with sessions.begin() as session:
            elector.fence(session)
    except LeaseLost:
        return False
    return True


@dataclass(frozen=True)
class Case:
    steps: tuple[str, ...]  # "a": a campaigns; "expire": the lease runs out; "release a"
    leader: str
    epoch: int


CASES = [
    pytest.param(Case(("a", "b"), "a", 1), id="the first to campaign leads, the second waits"),
    pytest.param(Case(("a", "a", "a", "b"), "a", 1), id="renewals keep the epoch"),
    pytest.param(
        Case(("a", "b", "expire", "b"), "b", 2), id="an unrenewed lease is taken, new epoch"
    ),
    pytest.param(
        Case(("a", "expire", "b", "a"), "b", 2), id="a deposed leader cannot take it back"
    ),
    pytest.param(
        Case(("a", "expire", "a"), "a", 1), id="a lease nobody else took stays in its epoch"
    ),
    pytest.param(
        Case(("a", "release a", "b"), "b", 2), id="a released lease is taken without waiting"
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_who_leads(sessions: Sessions, case: Case) -> None:
    contenders = electors(sessions, "a", "b")
    for step in case.steps:
        if step == "expire":
            expire(sessions)
        elif step.startswith("release "):
            contenders[step.split()[1]].stop()
        else:
            contenders[step].step()
    with sessions() as session:
        seen = lease_store.read(session)
    assert seen is not None
    assert (seen.holder, seen.epoch) == (case.leader, case.epoch)
    assert contenders[case.leader].epoch == case.epoch
    passing = [n for n, e in contenders.items() if fence_passes(sessions, e)]
    assert passing == [case.leader]


def test_a_deposed_leader_that_still_believes_it_leads_is_fenced(sessions: Sessions) -> None:
    old, new = electors(sessions, "old", "new").values()
    assert old.step()
    expire(sessions)
    assert new.step()
    # Its own clock has not moved: it believes it leads, as a paused process would.
    assert old.is_leader() and old.epoch == 1
    with pytest.raises(LeaseLost, match="held by new \\(epoch 2\\)"), sessions.begin() as s:
        old.fence(s)
    old.deposed("fenced")
    assert not old.is_leader()
    assert fence_passes(sessions, new)


def test_a_leader_that_cannot_renew_stops_before_its_lease_can_expire(
    sessions: Sessions,
) -> None:
    clock = FakeClock()
    leader = LeaseElector(sessions, clock, LeaseTiming(renew_s=1.0, lease_s=10.0), holder="x")
    assert leader.step()
    clock.t += 10.0 * SAFETY - 0.01
    assert leader.is_leader()
    clock.t += 0.02
    assert not leader.is_leader()
    with pytest.raises(LeaseLost), sessions.begin() as session:
        leader.fence(session)


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(0, 2)),
        st.tuples(st.just("release"), st.integers(0, 2)),
        st.tuples(st.just("expire"), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(actions=ACTIONS)
def test_at_most_one_fence_passes_and_epochs_only_grow(
    sessions: Sessions, actions: list[tuple[str, int]]
) -> None:
    unhold(sessions, "p0", "p1", "p2")  # each example starts from an unheld lease
    contenders = list(electors(sessions, "p0", "p1", "p2").values())
    epochs = []
    for action, who in actions:
        if action == "expire":
            expire(sessions)
        elif action == "release":
            contenders[who].stop()
            contenders[who] = LeaseElector(sessions, FakeClock(), TIMING, holder=f"p{who}")
        else:
            contenders[who].step()
        epochs.append(epoch(sessions))
        assert sum(fence_passes(sessions, e) for e in contenders) <= 1
    assert epochs == sorted(epochs)


def test_a_standby_controller_decides_nothing_and_a_deposed_one_writes_nothing(
    store_url: str, tmp_path: Path, demo_path: Path
) -> None:
    clock = FakeClock()
    settings_ = Settings(
        home=tmp_path / "home", database_url=store_url, lease_renew_s=0.1, lease_s=LEASE_S
    )
    runtime = build_runtime(settings_, load_config(demo_path), clock=clock)
    try:
        with runtime.sessions.begin() as session:
            token = create_token(session, "alice", clock.now()).secret
        client = TestClient(create_app(runtime))
        rival = LeaseElector(runtime.sessions, FakeClock(), TIMING, holder="rival")
        assert rival.step()  # the rival leads: this process's controller stands by
        body = {"command": ["true"], "resources": {"gpus": 1, "gpu_types": ["h100"]}}
        headers = {"Authorization": f"Bearer {token}"}
        job = client.post("/v1/jobs", json=body, headers=headers).json()
        runtime.controller.tick()
        assert runtime.controller.leader.epoch is None
        assert client.get(f"/v1/jobs/{job['id']}", headers=headers).json()["status"] == "queued"
        health = client.get("/healthz").json()
        assert health["role"] == "all" and health["controller"]["leading"] is False
        assert health["leader"]["holder"] == "rival" and health["leader"]["expired"] is False

        rival.stop()  # handed over: this controller leads at its next tick...
        clock.t += 1.0
        runtime.controller.tick()
        assert runtime.controller.leader.epoch == 2
        expire(
            runtime.sessions
        )  # ...then, paused past its lease (its own clock stands still), is replaced
        assert rival.step()
        second = client.post("/v1/jobs", json=body, headers=headers).json()
        with pytest.raises(LeaseLost):
            runtime.controller.tick()  # its admission is refused in the same transaction
        assert client.get(f"/v1/jobs/{second['id']}", headers=headers).json()["status"] == (
            "queued"
        )
        with runtime.sessions.begin() as session:  # an admission not submitted yet...
            session.execute(
                text("UPDATE attempts SET status = 'admitted', handle = NULL WHERE job_id = :j"),
                {"j": job["id"]},
            )
        with pytest.raises(LeaseLost):
            runtime.controller.dispatch()  # ...is not submitted by a deposed leader
        client.close()
    finally:
        runtime.close()


def test_api_replicas_share_one_grant_key(store_url: str, tmp_path: Path) -> None:
    engine = make_engine(store_url)
    upgrade(engine)
    sessions = session_factory(engine)
    first_home, second_home = tmp_path / "one", tmp_path / "two"
    first_home.mkdir()
    (first_home / "grant.key").write_text("ab" * 32 + "\n")  # an existing server's key
    try:
        keys = [
            grant_signing_key(Settings(home=h, database_url=store_url), sessions, FakeClock())
            for h in (first_home, second_home)
        ]
        assert keys == [bytes.fromhex("ab" * 32)] * 2  # seeded from the file, then shared
        configured = Settings(home=second_home, database_url=store_url, grant_key="k" * 40)
        assert grant_signing_key(configured, sessions, FakeClock()) == b"k" * 40
    finally:
        engine.dispose()


def test_a_second_server_on_one_sqlite_store_is_refused(tmp_path: Path) -> None:
    held = lock_sqlite_store(tmp_path / "gpupool.db.lock")
    try:
        with pytest.raises(StoreInUse, match=r"pid \d+.*only one server process.*PostgreSQL"):
            lock_sqlite_store(tmp_path / "gpupool.db.lock")
    finally:
        held.close()
    lock_sqlite_store(tmp_path / "gpupool.db.lock").close()  # free again once released


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"GPUPOOL_ROLE": "leader"}, "not one of all, api, controller", id="bad role"),
        pytest.param(
            {"GPUPOOL_LEASE_S": "2", "GPUPOOL_LEASE_RENEW_S": "1"},
            "at least 3 x GPUPOOL_LEASE_RENEW_S",
            id="lease too short for its renewals",
        ),
        pytest.param({"GPUPOOL_LEASE_S": "-1"}, "GPUPOOL_LEASE_S='-1'", id="negative lease"),
        pytest.param(
            {"GPUPOOL_API_WORKERS": "0"}, "GPUPOOL_API_WORKERS='0'.*from 1 to 64", id="no workers"
        ),
        pytest.param(
            {"GPUPOOL_API_WORKERS": "two"}, "not a number of processes", id="workers not a number"
        ),
        pytest.param(
            {"GPUPOOL_API_WORKERS": "2", "GPUPOOL_ROLE": "controller"},
            "needs a role that serves the API",
            id="workers of a controller-only process",
        ),
    ],
)
def test_bad_role_and_lease_settings_are_refused(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigInvalid, match=message):
        load_settings({"GPUPOOL_HOME": str(tmp_path), **env})


def test_split_roles_need_postgresql(tmp_path: Path) -> None:
    settings_ = load_settings({"GPUPOOL_HOME": str(tmp_path)}, role="api")
    with pytest.raises(ConfigInvalid, match="--role api needs PostgreSQL"):
        hold_store(settings_)
