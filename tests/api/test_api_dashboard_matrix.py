"""The dashboard's authorization matrix: every /ui route of the app by every role, signed in
with a dashboard session (the bearer routes have theirs in test_api_authz_matrix.py). A route
without an expectation fails, so a new page cannot skip the matrix.

``{job_id}`` is a job of alice (member of team-a), cancelled at once so that its live streams
end; a cancel of it answers as a cancel of a live job would (303 back to its page). Without a
session every page sends the browser to sign in (303). Mutating routes are sent with the
session's CSRF token and must leave an audit entry naming the route and the answer's status;
sent without a session they are refused with 401 and counted, as anonymous API refusals are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Mount

from gpupool.server.app import create_app
from gpupool.server.audit import MUTATING
from gpupool.server.runtime import Runtime
from gpupool.server.ui import live
from support.apikit import Api, make_api

ROLES = {
    "platform admin": "admin",
    "team admin": "carol",
    "member": "alice",
    "viewer": "vera",
    "other team": "bob",
    "auditor": "audra",
    "no session": None,
}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def statuses(
    admin: int, team_admin: int, member: int, viewer: int, other: int, auditor: int, anonymous: int
) -> dict[str, int]:
    return dict(
        zip(ROLES, (admin, team_admin, member, viewer, other, auditor, anonymous), strict=True)
    )


def everyone(status: int) -> dict[str, int]:
    return statuses(*([status] * len(ROLES)))


SIGNED_IN = statuses(200, 200, 200, 200, 200, 200, 303)
READ_TEAM = statuses(200, 200, 200, 200, 403, 403, 303)
MUTATE_TEAM = statuses(303, 303, 303, 403, 403, 403, 401)
ADMINS = statuses(200, 200, 403, 403, 403, 403, 303)


@dataclass(frozen=True)
class Expect:
    want: dict[str, int]


# One entry per (method, path template) under /ui. Add new pages here.
EXPECTED: dict[tuple[str, str], Expect] = {
    ("GET", "/ui"): Expect(SIGNED_IN),
    ("GET", "/ui/"): Expect(SIGNED_IN),
    ("GET", "/ui/teams"): Expect(SIGNED_IN),
    ("GET", "/ui/jobs"): Expect(SIGNED_IN),
    ("GET", "/ui/jobs/{job_id}"): Expect(READ_TEAM),
    ("POST", "/ui/jobs/{job_id}/cancel"): Expect(MUTATE_TEAM),
    ("GET", "/ui/jobs/{job_id}/log/stream"): Expect(READ_TEAM),
    ("GET", "/ui/jobs/{job_id}/status/stream"): Expect(READ_TEAM),
    ("GET", "/ui/live/overview"): Expect(SIGNED_IN),
    ("GET", "/ui/pools"): Expect(SIGNED_IN),
    ("GET", "/ui/usage"): Expect(SIGNED_IN),
    ("GET", "/ui/usage.csv"): Expect(SIGNED_IN),
    ("GET", "/ui/audit"): Expect(ADMINS),
    ("GET", "/ui/login"): Expect(statuses(303, 303, 303, 303, 303, 303, 200)),  # signed in: on
    # The form's own CSRF token is not sent here: refused whoever is signed in.
    ("POST", "/ui/login"): Expect(everyone(403)),
    ("POST", "/ui/logout"): Expect(statuses(303, 303, 303, 303, 303, 303, 401)),
    ("GET", "/ui/oidc/start"): Expect(everyone(404)),  # no OIDC on this server
    ("GET", "/ui/oidc/callback"): Expect(everyone(403)),  # no sign-in was started
}


def ui_routes() -> list[tuple[str, str, str]]:
    """(method, path template, route name) of every dashboard route of the app."""
    app = create_app(cast(Runtime, None))
    found = []
    for route in app.routes:
        if isinstance(route, Mount) or not hasattr(route, "effective_route_contexts"):
            continue  # the static files; the API docs' plain routes
        for context in route.effective_route_contexts():
            path, original = context.path, context.original_route
            if path != "/ui" and not path.startswith("/ui/"):
                continue
            for method in sorted((getattr(original, "methods", None) or set()) - {"HEAD"}):
                found.append((method, path, str(getattr(original, "name", ""))))
    return found


ROUTES = ui_routes()
CASES = [
    pytest.param(method, path, name, role, id=f"{method} {path} as {role}")
    for method, path, name in ROUTES
    for role in ROLES
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
    built = make_api(tmp_path_factory.mktemp("ui-matrix") / "home", demo)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def browser(api: Api, user: str | None) -> TestClient:
    client = TestClient(api.client.app)
    if user is None:
        return client
    form = CSRF.search(client.get("/ui/login").text)
    assert form is not None
    signed = client.post(
        "/ui/login",
        data={"token": api.tokens[user], "csrf": form.group(1)},
        follow_redirects=False,
    )
    assert signed.status_code == 303, signed.text
    return client


def newest_audit(api: Api) -> dict[str, Any]:
    page = api.client.get("/v1/audit", params={"limit": 1}, headers=api.as_("admin")).json()
    return cast(dict[str, Any], page["items"][0] if page["items"] else {"id": 0})


@pytest.mark.parametrize(("method", "path", "name", "role"), CASES)
def test_route_answers_each_role(
    api: Api, monkeypatch: pytest.MonkeyPatch, method: str, path: str, name: str, role: str
) -> None:
    expect = EXPECTED.get((method, path))
    assert expect is not None, (
        f"{method} {path} has no row in EXPECTED: decide who may see it and add one"
    )
    monkeypatch.setattr(live, "OVERVIEW_S", 0.0)  # the overview stream ends at once
    job = str(api.submit("alice")["id"])
    api.client.post(f"/v1/jobs/{job}/cancel", headers=api.as_("alice"))
    client = browser(api, ROLES[role])
    csrf = CSRF.search(client.get("/ui/").text) if ROLES[role] else None
    data = {"csrf": csrf.group(1)} if csrf is not None and path != "/ui/login" else None
    before = newest_audit(api)["id"]
    response = client.request(
        method, path.replace("{job_id}", job), data=data, follow_redirects=False
    )
    assert response.status_code == expect.want[role], response.text
    if response.status_code == 303 and ROLES[role] is None:
        assert response.headers["location"].startswith("/ui/login")
    if method in MUTATING:
        entry = newest_audit(api)
        if ROLES[role] is None or path == "/ui/login":
            assert entry["id"] == before, "a refusal without a session was recorded one by one"
            return
        assert (entry["action"], entry["status"], entry["actor"]) == (
            name,
            response.status_code,
            ROLES[role],
        )


def test_every_expectation_names_a_route() -> None:
    served = {(method, path) for method, path, _ in ROUTES}
    assert set(EXPECTED) - served == set(), "EXPECTED lists pages the app no longer serves"
