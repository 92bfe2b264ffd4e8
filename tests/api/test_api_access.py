"""Who may see and do what: 401 without a token, 403 across teams and for viewers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from support.apikit import Api


@dataclass
class Access:
    user: str | None
    method: str
    path: str  # {alice_job} is replaced by a job of alice (team-a)
    want_status: int


CASES = [
    pytest.param(Access("bob", "GET", "/v1/jobs/{alice_job}", 403), id="other team reads a job"),
    pytest.param(Access("bob", "GET", "/v1/jobs/{alice_job}/logs", 403), id="other team logs"),
    pytest.param(Access("bob", "GET", "/v1/jobs/{alice_job}/why", 403), id="other team why"),
    pytest.param(
        Access("bob", "POST", "/v1/jobs/{alice_job}/cancel", 403), id="other team cancels"
    ),
    pytest.param(Access("bob", "GET", "/v1/teams/team-a", 403), id="other team detail"),
    pytest.param(Access("bob", "GET", "/v1/jobs?team=team-a", 403), id="other team list"),
    pytest.param(Access("vera", "POST", "/v1/jobs/{alice_job}/cancel", 403), id="viewer cancels"),
    pytest.param(Access("vera", "GET", "/v1/jobs/{alice_job}", 200), id="viewer reads"),
    pytest.param(Access("vera", "GET", "/v1/teams/team-a", 200), id="viewer reads team"),
    pytest.param(
        Access("carol", "POST", "/v1/jobs/{alice_job}/cancel", 200), id="team admin cancels"
    ),
    pytest.param(Access("admin", "GET", "/v1/jobs/{alice_job}", 200), id="platform admin reads"),
    pytest.param(Access(None, "GET", "/v1/jobs", 401), id="no token"),
    pytest.param(Access(None, "GET", "/v1/jobs/{alice_job}", 401), id="no token on a job"),
    pytest.param(Access(None, "GET", "/healthz", 200), id="health needs no token"),
    pytest.param(Access("bob", "GET", "/v1/jobs/j-missing", 404), id="missing job"),
]


@pytest.mark.parametrize("case", CASES)
def test_access(api: Api, case: Access) -> None:
    alice_job = api.submit("alice")["id"]
    path = case.path.format(alice_job=alice_job)
    response = api.client.request(case.method, path, headers=api.as_(case.user))
    assert response.status_code == case.want_status, response.text
    if case.want_status >= 400:
        assert set(response.json()["error"]) == {"code", "message", "details"}


def test_viewer_cannot_submit(api: Api) -> None:
    response = api.client.post(
        "/v1/jobs", json={"command": ["true"], "team": "team-a"}, headers=api.as_("vera")
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_bad_and_revoked_tokens_are_401(api: Api) -> None:
    from gpupool.auth.tokens import revoke_token

    bad = api.client.get("/v1/jobs", headers={"Authorization": "Bearer gpt_nope_nope"})
    assert bad.status_code == 401
    token_id = api.tokens["bob"].split("_")[1]
    with api.runtime.sessions.begin() as session:
        revoke_token(session, token_id, api.runtime.clock.now())
    revoked = api.client.get("/v1/jobs", headers=api.as_("bob"))
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["error"]["message"]


def test_lists_show_only_readable_teams(api: Api) -> None:
    api.submit("alice")
    api.submit("bob")
    alice_sees = api.client.get("/v1/jobs", headers=api.as_("alice")).json()["items"]
    admin_sees = api.client.get("/v1/jobs", headers=api.as_("admin")).json()["items"]
    assert {j["team"] for j in alice_sees} == {"team-a"}
    assert {j["team"] for j in admin_sees} == {"team-a", "team-b"}
    teams = api.client.get("/v1/teams", headers=api.as_("bob")).json()["items"]
    assert [t["name"] for t in teams] == ["team-b"]


@pytest.mark.parametrize(
    ("bearer", "want_message"),
    [
        pytest.param("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "OIDC is not set up", id="jwt"),
        pytest.param("gpt_abc_not-the-secret", "invalid API token", id="wrong secret"),
        pytest.param("hunter2", "invalid API token", id="not a token at all"),
    ],
)
def test_bad_bearers_say_why_and_are_not_echoed(api: Api, bearer: str, want_message: str) -> None:
    response = api.client.get("/v1/jobs", headers={"Authorization": f"Bearer {bearer}"})
    assert response.status_code == 401
    assert want_message in response.json()["error"]["message"]
    assert bearer not in response.text
