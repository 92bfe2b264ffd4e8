"""API tokens are read from the store once per ``CACHE_S`` window, and a revocation made
elsewhere (another process writing the store) stops the token when the window ends."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from gpupool.auth import tokens as token_auth
from gpupool.core.errors import Unauthenticated
from gpupool.state import tokens as token_rows
from gpupool.state.models import TokenRow
from support.apikit import Api


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(token_auth, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def reads_of_tokens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = token_rows.get

    def get(session: Any, token_id: str) -> TokenRow | None:
        seen.append(token_id)
        return real(session, token_id)

    monkeypatch.setattr(token_rows, "get", get)
    return seen


def revoke_elsewhere(api: Api, user: str) -> None:
    """As another process would: straight into the store, not through this process's code."""
    with api.runtime.sessions.begin() as session:
        row = session.get(TokenRow, api.tokens[user].split("_")[1])
        assert row is not None
        row.revoked_at = api.runtime.clock.now()


def status(api: Api, user: str) -> int:
    return api.client.get("/v1/jobs", headers=api.as_(user)).status_code


def test_a_token_is_read_once_per_window(
    api: Api, clock: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = reads_of_tokens(monkeypatch)
    assert [status(api, "alice") for _ in range(3)] == [200, 200, 200]
    assert len(reads) == 1
    clock.now += token_auth.CACHE_S
    assert status(api, "alice") == 200
    assert len(reads) == 2


def test_a_revocation_elsewhere_stops_the_token_within_the_window(
    api: Api, clock: FakeTime
) -> None:
    assert status(api, "bob") == 200
    revoke_elsewhere(api, "bob")
    clock.now += token_auth.CACHE_S
    response = api.client.get("/v1/jobs", headers=api.as_("bob"))
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]


def test_a_wrong_secret_is_refused_even_while_the_token_is_kept(api: Api, clock: FakeTime) -> None:
    assert status(api, "bob") == 200
    forged = api.tokens["bob"][:-4] + "AAAA"
    response = api.client.get("/v1/jobs", headers={"Authorization": f"Bearer {forged}"})
    assert response.status_code == 401


def test_a_revocation_in_this_process_applies_at_once(api: Api, clock: FakeTime) -> None:
    assert status(api, "bob") == 200
    with api.runtime.sessions.begin() as session:
        token_auth.revoke_token(session, api.tokens["bob"].split("_")[1], api.runtime.clock.now())
    assert status(api, "bob") == 401


def test_the_event_loop_check_needs_the_row_read_within_the_window(
    api: Api, clock: FakeTime
) -> None:
    """``verify_cached_token`` (what the request's event loop runs, no store): None until the
    row was read, then the same verdicts as the store path, and None again once it is old."""
    bearer, now = api.tokens["alice"], api.runtime.clock.now()
    token_auth._cache.clear()
    assert token_auth.verify_cached_token(bearer, now) is None
    assert status(api, "alice") == 200  # read through the store once
    row = token_auth.verify_cached_token(bearer, now)
    assert row is not None and row.user == "alice"
    with pytest.raises(Unauthenticated, match="invalid API token"):
        token_auth.verify_cached_token(bearer[:-4] + "AAAA", now)
    with pytest.raises(Unauthenticated, match="invalid API token"):
        token_auth.verify_cached_token("not-a-token", now)
    clock.now += token_auth.CACHE_S
    assert token_auth.verify_cached_token(bearer, now) is None


def test_an_expired_token_is_refused_from_memory_too(api: Api, clock: FakeTime) -> None:
    assert status(api, "alice") == 200
    row = token_auth.verify_cached_token(api.tokens["alice"], api.runtime.clock.now())
    assert row is not None
    later = api.runtime.clock.now() + timedelta(days=1)
    token_auth._cache[row.id].row.expires_at = later - timedelta(seconds=1)
    with pytest.raises(Unauthenticated, match="expired"):
        token_auth.verify_cached_token(api.tokens["alice"], later)
