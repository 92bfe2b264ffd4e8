"""The authorization matrix (T3): every route of the app by every role, generated from the
route table. A route without an expectation fails, so a new endpoint cannot skip the matrix.

Resources addressed by path parameters belong to team-a: ``{job_id}`` is a fresh job of
alice (member of team-a), ``{array_id}`` a fresh job array of hers, ``{team}`` is team-a.
Mutating routes must also leave an audit entry naming the route's action and the answer's
status.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from starlette.routing import Mount, Route

from gpupool.server.app import create_app
from gpupool.server.audit import MUTATING
from gpupool.server.runtime import Runtime
from gpupool.state import config_store
from support.apikit import Api, make_api

ROLES = {
    "platform admin": "admin",
    "team admin": "carol",
    "member": "alice",
    "viewer": "vera",
    "other team": "bob",
    "auditor": "audra",
    "no token": None,
}


def statuses(
    admin: int, team_admin: int, member: int, viewer: int, other: int, auditor: int, anonymous: int
) -> dict[str, int]:
    return dict(
        zip(ROLES, (admin, team_admin, member, viewer, other, auditor, anonymous), strict=True)
    )


PUBLIC = statuses(200, 200, 200, 200, 200, 200, 200)
SIGNED_IN = statuses(200, 200, 200, 200, 200, 200, 401)
# The auditor has no team role: a team's jobs are not theirs to read, its usage is.
READ_TEAM = statuses(200, 200, 200, 200, 403, 403, 401)
MUTATE_TEAM = statuses(200, 200, 200, 403, 403, 403, 401)
ADMINS = statuses(200, 200, 403, 403, 403, 403, 401)
PLATFORM_ADMIN = statuses(200, 403, 403, 403, 403, 403, 401)
READ_TEAM_USAGE = statuses(200, 200, 200, 200, 403, 200, 401)
READ_TEAM_BUDGETS = statuses(200, 200, 403, 403, 403, 200, 401)
# The signed URL of a job's grant is the credential; a bearer token is no substitute.
SIGNED_URL_ONLY = statuses(403, 403, 403, 403, 403, 403, 403)


@dataclass(frozen=True)
class Expect:
    want: dict[str, int]  # role -> status
    body: dict[str, Any] | None = None
    query: dict[str, str] = field(default_factory=dict)
    bearer: bool = True  # authenticated by the bearer token, so the audit names the caller


DASHBOARD = "/ui"
DEMO_TEXT = (Path(__file__).resolve().parents[2] / "examples" / "demo.yaml").read_text()
DEMO_VERSION = 1  # the version the server's start seeds from the file it is given

# One entry per (method, path template) of the app. Add new routes here.
EXPECTED: dict[tuple[str, str], Expect] = {
    ("GET", "/openapi.json"): Expect(PUBLIC),
    ("GET", "/docs"): Expect(PUBLIC),
    ("GET", "/docs/oauth2-redirect"): Expect(PUBLIC),
    ("GET", "/redoc"): Expect(PUBLIC),
    ("GET", "/docs/swagger-ui-bundle.js"): Expect(PUBLIC),
    ("GET", "/docs/swagger-ui.css"): Expect(PUBLIC),
    ("GET", "/docs/redoc.standalone.js"): Expect(PUBLIC),
    ("GET", "/docs/favicon.png"): Expect(PUBLIC),
    ("GET", "/healthz"): Expect(PUBLIC),
    ("GET", "/readyz"): Expect(PUBLIC),
    ("GET", "/v1/auth/config"): Expect(PUBLIC),
    ("POST", "/v1/jobs"): Expect(
        {**MUTATE_TEAM, "platform admin": 201, "team admin": 201, "member": 201},
        body={"command": ["true"], "team": "team-a"},
    ),
    ("GET", "/v1/jobs"): Expect(SIGNED_IN),
    ("GET", "/v1/jobs/{job_id}"): Expect(READ_TEAM),
    ("POST", "/v1/jobs/{job_id}/cancel"): Expect(MUTATE_TEAM),
    ("GET", "/v1/jobs/{job_id}/why"): Expect(READ_TEAM),
    ("GET", "/v1/jobs/{job_id}/logs"): Expect(READ_TEAM),
    ("POST", "/v1/arrays"): Expect(
        {**MUTATE_TEAM, "platform admin": 201, "team admin": 201, "member": 201},
        body={"command": ["true"], "team": "team-a", "array": "0-1"},
    ),
    ("GET", "/v1/arrays/{array_id}"): Expect(READ_TEAM),
    ("POST", "/v1/arrays/{array_id}/cancel"): Expect(MUTATE_TEAM),
    ("GET", "/v1/teams"): Expect(SIGNED_IN),
    ("GET", "/v1/teams/{team}"): Expect(READ_TEAM),
    ("GET", "/v1/pools"): Expect(SIGNED_IN),
    ("GET", "/v1/whoami"): Expect(SIGNED_IN),
    ("GET", "/v1/audit"): Expect(ADMINS),
    # Every signed-in user manages their own tokens; {token_id} is one of alice's (the member).
    ("POST", "/v1/tokens"): Expect(
        statuses(201, 201, 201, 201, 201, 201, 401), body={"description": "matrix"}
    ),
    ("GET", "/v1/tokens"): Expect(SIGNED_IN),
    ("DELETE", "/v1/tokens/{token_id}"): Expect(statuses(200, 404, 200, 404, 404, 404, 401)),
    ("GET", "/v1/config"): Expect(PLATFORM_ADMIN),
    ("GET", "/v1/config/versions"): Expect(PLATFORM_ADMIN),
    # The configuration in force, sent back unchanged: a diff and an apply that change nothing.
    ("POST", "/v1/config/diff"): Expect(PLATFORM_ADMIN, body={"yaml": DEMO_TEXT}),
    ("POST", "/v1/config"): Expect(
        PLATFORM_ADMIN, body={"yaml": DEMO_TEXT, "base_version": DEMO_VERSION}
    ),
    ("GET", "/v1/budgets"): Expect(READ_TEAM_BUDGETS, query={"team": "team-a"}),
    ("PUT", "/v1/budgets/{team}/{name}"): Expect(PLATFORM_ADMIN, body={"gpu_hours": 1000}),
    ("GET", "/v1/webhooks/deliveries"): Expect(PLATFORM_ADMIN),
    # Asked for team-a: another team's member is refused; the auditor reads every team.
    ("GET", "/v1/usage"): Expect(READ_TEAM_USAGE, query={"team": "team-a"}),
    ("GET", "/v1/costs"): Expect(READ_TEAM_USAGE, query={"team": "team-a", "format": "csv"}),
    ("GET", "/v1/artifacts/{team}/{path:path}"): Expect(SIGNED_URL_ONLY, bearer=False),
    ("PUT", "/v1/artifacts/{team}/{path:path}"): Expect(SIGNED_URL_ONLY, bearer=False),
}


def app_routes() -> list[tuple[str, str, str]]:
    """(method, path template, route name) of every route the app serves."""
    # The route table does not depend on the runtime, so none is needed to read it.
    app = create_app(cast(Runtime, None))
    found = []
    for route in app.routes:
        # FastAPI keeps included routers as one entry each that expands to its routes with
        # their full paths; plain Starlette routes (the docs pages) stand alone.
        if hasattr(route, "effective_route_contexts"):
            pairs = [(c.path, c.original_route) for c in route.effective_route_contexts()]
        else:
            if isinstance(route, Mount) and route.path == DASHBOARD + "/static":
                continue  # the dashboard's stylesheet, script and icon: public files
            assert isinstance(route, Route), f"unexpected route type {type(route).__name__}"
            pairs = [(route.path, route)]
        for path, original in pairs:
            if path == DASHBOARD or path.startswith(DASHBOARD + "/"):
                continue  # signed in by cookie, not bearer: tests/api/test_api_dashboard_matrix.py
            methods = getattr(original, "methods", None) or set()
            for method in sorted(methods - {"HEAD"}):
                found.append((method, path, str(getattr(original, "name", ""))))
    return found


ROUTES = app_routes()
CASES = [
    pytest.param(method, path, name, role, id=f"{method} {path} as {role}")
    for method, path, name in ROUTES
    for role in ROLES
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
    built = make_api(tmp_path_factory.mktemp("matrix") / "home", demo)
    with built.runtime.sessions.begin() as session:  # what `gpupool server --config` seeds
        config_store.append(
            session,
            base=0,
            text=DEMO_TEXT,
            at=built.runtime.clock.now(),
            applied_by="test",
            source=str(demo),
            summary="first version",
        )
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def fill(path: str, api: Api) -> str:
    params = {
        "job_id": lambda: api.submit("alice", team="team-a")["id"],
        "array_id": lambda: api.client.post(
            "/v1/arrays",
            json={"command": ["true"], "team": "team-a", "array": "0-2"},
            headers=api.as_("alice"),
        ).json()["id"],
        "team": lambda: "team-a",
        "name": lambda: "monthly",
        "token_id": lambda: api.client.post(
            "/v1/tokens", json={"description": "to revoke"}, headers=api.as_("alice")
        ).json()["id"],
        "path:path": lambda: "shared/x",
    }
    for name, value in params.items():
        if "{" + name + "}" in path:
            path = path.replace("{" + name + "}", value())
    assert "{" not in path, f"add a value for the path parameter of {path} to fill()"
    return path


def newest_audit(api: Api) -> dict[str, Any]:
    page = api.client.get("/v1/audit", params={"limit": 1}, headers=api.as_("admin")).json()
    return cast(dict[str, Any], page["items"][0] if page["items"] else {"id": 0})


@pytest.mark.parametrize(("method", "path", "name", "role"), CASES)
def test_route_answers_each_role(api: Api, method: str, path: str, name: str, role: str) -> None:
    expect = EXPECTED.get((method, path))
    assert expect is not None, (
        f"{method} {path} has no row in EXPECTED: decide who may call it and add one"
    )
    filled = fill(path, api)
    before = newest_audit(api)["id"] if method in MUTATING else 0
    response = api.client.request(
        method,
        filled,
        json=expect.body,
        params=expect.query,
        headers=api.as_(ROLES[role]),
    )
    assert response.status_code == expect.want[role], response.text
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"code", "message", "details"}
    if method in MUTATING:
        entry = newest_audit(api)
        actor = (ROLES[role] or "-") if expect.bearer else "-"
        if actor == "-" and response.status_code >= 400:
            # Anonymous refusals are counted into periodic summary rows (server.audit).
            assert entry["id"] == before, "an anonymous refusal was recorded one by one"
            return
        assert (entry["action"], entry["status"]) == (name, response.status_code)
        assert entry["actor"] == actor


def test_every_expectation_names_a_route() -> None:
    served = {(method, path) for method, path, _ in ROUTES}
    assert set(EXPECTED) - served == set(), "EXPECTED lists routes the app no longer serves"
