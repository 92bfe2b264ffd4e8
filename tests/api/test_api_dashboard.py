"""The dashboard (/ui) in process: sign-in and its cookie, who sees what, CSRF, cancel and
its 403 for viewers, logout, and that no token ever appears in a page. The same pages in a
real browser: tests/e2e/test_e2e_dashboard.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from gpupool.auth.tokens import revoke_token
from support.apikit import Api

PAGES = ("/ui/", "/ui/teams", "/ui/jobs", "/ui/pools", "/ui/usage", "/ui/usage.csv")
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def sign_in(api: Api, user: str) -> TestClient:
    """A browser-like client of the same app with a session of ``user``."""
    client = TestClient(api.client.app)
    form = client.get("/ui/login")
    csrf = CSRF.search(form.text)
    assert csrf is not None, form.text
    answer = client.post(
        "/ui/login",
        data={"token": api.tokens[user], "csrf": csrf.group(1), "next": "/ui/jobs"},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/jobs"
    return client


def csrf_of(client: TestClient, path: str) -> str:
    found = CSRF.search(client.get(path).text)
    assert found is not None
    return found.group(1)


def test_pages_send_a_browser_without_a_session_to_sign_in(api: Api) -> None:
    answer = api.client.get("/ui/jobs?team=team-a", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fteam%3Dteam-a"


def test_the_session_cookie_is_strict_httponly_and_holds_no_token(api: Api) -> None:
    client = TestClient(api.client.app)
    csrf = CSRF.search(client.get("/ui/login").text)
    assert csrf is not None
    answer = client.post(
        "/ui/login",
        data={"token": api.tokens["alice"], "csrf": csrf.group(1)},
        follow_redirects=False,
    )
    cookie = next(
        c for c in answer.headers.get_list("set-cookie") if c.startswith("gpupool_session=")
    )
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over TLS it is Secure
    secret = api.tokens["alice"].split("_", 2)[2]
    assert secret not in cookie


@dataclass
class SignIn:
    token: str  # "alice": alice's token; anything else is sent as is
    with_csrf: bool
    want_status: int
    want_text: str


SIGN_INS = [
    pytest.param(SignIn("alice", True, 303, ""), id="valid token"),
    pytest.param(SignIn("alice", False, 403, "form expired"), id="no CSRF token"),
    pytest.param(SignIn("gpt_0000_nope", True, 401, "invalid API token"), id="unknown token"),
    pytest.param(SignIn("not-a-token", True, 401, "Paste a gpupool API token"), id="not a token"),
]


@pytest.mark.parametrize("case", SIGN_INS)
def test_sign_in_with_a_token(api: Api, case: SignIn) -> None:
    client = TestClient(api.client.app)
    csrf = CSRF.search(client.get("/ui/login").text)
    assert csrf is not None
    token = api.tokens.get(case.token, case.token)
    form = {"token": token, **({"csrf": csrf.group(1)} if case.with_csrf else {})}
    answer = client.post("/ui/login", data=form, follow_redirects=False)
    assert answer.status_code == case.want_status, answer.text
    assert case.want_text in answer.text
    assert token not in answer.text


def test_a_member_sees_their_teams_jobs_only(api: Api) -> None:
    mine = api.submit("alice", name="alices-job")["id"]
    theirs = api.submit("bob", name="bobs-job")["id"]
    client = sign_in(api, "alice")
    page = client.get("/ui/jobs").text
    assert mine in page and theirs not in page
    assert client.get(f"/ui/jobs/{theirs}").status_code == 403
    assert "team-b" not in client.get("/ui/teams").text
    assert client.get("/ui/jobs?team=team-b").status_code == 403


@dataclass
class Filter:
    query: str
    want: list[str]  # names of the jobs listed


FILTERS = [
    pytest.param(Filter("", ["a-t4", "a-h100", "c-h100"]), id="no filter"),
    pytest.param(Filter("user=carol", ["c-h100"]), id="by user"),
    pytest.param(Filter("gpu_type=t4", ["a-t4"]), id="by requested gpu type"),
    pytest.param(Filter("status=cancelled", ["a-t4"]), id="by status"),
    pytest.param(Filter("team=team-a&user=alice&gpu_type=h100", ["a-h100"]), id="combined"),
]


@pytest.mark.parametrize("case", FILTERS)
def test_the_jobs_list_filters(api: Api, case: Filter) -> None:
    api.submit("carol", name="c-h100", resources={"gpu_types": ["h100"]})
    api.submit("alice", name="a-h100", resources={"gpu_types": ["h100"]})
    cancelled = api.submit("alice", name="a-t4", resources={"gpu_types": ["t4"]})
    api.client.post(f"/v1/jobs/{cancelled['id']}/cancel", headers=api.as_("alice"))
    page = sign_in(api, "admin").get(f"/ui/jobs?{case.query}").text
    listed = re.findall(
        r'<tr class="job" data-team="[^"]+"><td><a [^>]+>[^<]+</a></td><td>([^<]+)', page
    )
    assert listed == case.want


@dataclass
class Cancel:
    user: str
    with_csrf: bool
    want_status: int


CANCELS = [
    pytest.param(Cancel("alice", True, 303), id="member cancels"),
    pytest.param(Cancel("alice", False, 403), id="member without CSRF token: 403"),
    pytest.param(Cancel("vera", True, 403), id="viewer forcing a cancel: 403"),
    pytest.param(Cancel("admin", True, 303), id="platform admin cancels"),
]


@pytest.mark.parametrize("case", CANCELS)
def test_cancel(api: Api, case: Cancel) -> None:
    job = api.submit("alice")["id"]  # no controller runs here: it stays queued
    client = sign_in(api, case.user)
    page = client.get(f"/ui/jobs/{job}").text
    assert ('id="cancel"' in page) == (case.user != "vera")
    form = {"csrf": csrf_of(client, f"/ui/jobs/{job}")} if case.with_csrf else {}
    answer = client.post(f"/ui/jobs/{job}/cancel", data=form, follow_redirects=False)
    assert answer.status_code == case.want_status, answer.text
    assert api.status(job) == ("cancelled" if case.want_status == 303 else "queued")
    entry = api.client.get("/v1/audit", headers=api.as_("admin")).json()["items"][0]
    assert (entry["action"], entry["actor"], entry["status"]) == (
        "ui.job.cancel",
        case.user,
        case.want_status,
    )


def test_logout_ends_the_session_even_for_a_copy_of_the_cookie(api: Api) -> None:
    client = sign_in(api, "alice")
    copy = TestClient(api.client.app, cookies=dict(client.cookies))
    answer = client.post(
        "/ui/logout", data={"csrf": csrf_of(client, "/ui/")}, follow_redirects=False
    )
    assert answer.status_code == 303
    assert copy.get("/ui/", follow_redirects=False).status_code == 303


def test_revoking_the_token_ends_its_sessions(api: Api) -> None:
    client = sign_in(api, "alice")
    assert client.get("/ui/", follow_redirects=False).status_code == 200
    with api.runtime.sessions.begin() as session:
        revoke_token(session, api.tokens["alice"], api.runtime.clock.now())
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_no_page_shows_a_token(api: Api) -> None:
    api.submit("alice", env={"NOTE": "x"})
    client = sign_in(api, "admin")
    secrets = [t.split("_", 2)[2] for t in api.tokens.values()]
    for path in (*PAGES, "/ui/audit", "/ui/login"):
        answer = client.get(path)
        assert answer.status_code == 200, path
        assert not any(s in answer.text for s in secrets), path
        assert "default-src 'self'" in answer.headers["content-security-policy"]


@dataclass
class Audit:
    user: str
    want_status: int


AUDITS = [
    pytest.param(Audit("admin", 200), id="platform admin"),
    pytest.param(Audit("carol", 200), id="team admin"),
    pytest.param(Audit("alice", 403), id="member: 403"),
]


@pytest.mark.parametrize("case", AUDITS)
def test_the_audit_page(api: Api, case: Audit) -> None:
    api.submit("alice")
    client = sign_in(api, case.user)
    answer = client.get("/ui/audit?actor=alice")
    assert answer.status_code == case.want_status
    assert ('href="/ui/audit"' in client.get("/ui/").text) == (case.want_status == 200)
    if case.want_status == 200:
        assert "<td>alice</td><td>job.submit</td>" in answer.text


def test_over_tls_the_session_cookie_is_secure(api: Api) -> None:
    client = TestClient(api.client.app, base_url="https://testserver")
    csrf = CSRF.search(client.get("/ui/login").text)
    assert csrf is not None
    answer = client.post(
        "/ui/login",
        data={"token": api.tokens["alice"], "csrf": csrf.group(1)},
        follow_redirects=False,
    )
    cookies = answer.headers.get_list("set-cookie")
    assert any(c.startswith("gpupool_session=") and "Secure" in c for c in cookies), cookies


def test_the_overview_lists_preemptions_of_the_readers_teams(api: Api) -> None:
    from gpupool.state import jobs

    mine = str(api.submit("alice", name="alices-victim")["id"])
    theirs = str(api.submit("bob", name="bobs-victim")["id"])
    with api.runtime.sessions.begin() as session:
        for job in (mine, theirs):
            jobs.add_event(session, job, api.runtime.clock.now(), "preempting", "yields to j-x")
    page = sign_in(api, "alice").get("/ui/").text
    assert "alices-victim" in page and "bobs-victim" not in page
    assert "yields to j-x" in page


def test_a_finished_jobs_status_stream_says_so_and_ends(api: Api) -> None:
    job = str(api.submit("alice")["id"])
    api.client.post(f"/v1/jobs/{job}/cancel", headers=api.as_("alice"))
    client = sign_in(api, "alice")
    answer = client.get(f"/ui/jobs/{job}/status/stream")
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.text == "event: status\ndata: cancelled\n\nevent: end\ndata: \n\n"
    log = client.get(f"/ui/jobs/{job}/log/stream")
    assert log.headers["content-type"].startswith("text/event-stream")
    assert log.text == "event: end\ndata: \n\n"  # it never ran: no output, and over


def test_live_streams_are_bounded_per_user(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpupool.server.ui import live

    monkeypatch.setattr(live, "OVERVIEW_S", 0.0)  # each stream ends at once
    client = sign_in(api, "alice")
    slots = api.client.app.state.ui_streams  # type: ignore[attr-defined]
    for _ in range(slots.per_user):
        slots.take("alice")  # as many streams as allowed are open
    refused = client.get("/ui/live/overview")
    assert refused.status_code == 429
    assert "GPUPOOL_LOG_FOLLOWERS_PER_USER" in refused.text
    assert sign_in(api, "bob").get("/ui/live/overview").status_code == 200  # per user
    slots.give_back("alice")
    answer = client.get("/ui/live/overview")
    assert answer.status_code == 200 and slots.open("alice") == slots.per_user - 1


def test_a_queued_jobs_page_says_how_many_of_its_team_come_first(api: Api) -> None:
    first = str(api.submit("alice", name="first")["id"])
    urgent = str(api.submit("carol", name="urgent", priority_class="inference")["id"])
    last = str(api.submit("alice", name="last")["id"])
    api.submit("bob", name="other-team")  # another team's queue: not counted
    client = sign_in(api, "alice")
    said = {
        job: re.search(r'<p id="queue-position">([^<]+)</p>', client.get(f"/ui/jobs/{job}").text)
        for job in (first, urgent, last)
    }
    assert {job: m.group(1) if m else None for job, m in said.items()} == {
        urgent: "First in team-a's queue.",
        first: "1 queued job of team-a comes before it (higher priority, or submitted earlier).",
        last: "2 queued jobs of team-a come before it (higher priority, or submitted earlier).",
    }


@pytest.mark.parametrize(
    ("user", "want"),
    [
        pytest.param("alice", ["team-a"], id="member: their team"),
        pytest.param("audra", ["team-a", "team-b", "team-c"], id="auditor: every team"),
    ],
)
def test_the_usage_page_offers_the_teams_whose_usage_one_reads(
    api: Api, user: str, want: list[str]
) -> None:
    page = sign_in(api, user).get("/ui/usage").text
    form = page.split('<select name="team">', 1)[1].split("</select>", 1)[0]
    assert re.findall(r"<option(?: selected)?>([^<]+)</option>", form) == want


def test_pages_redact_what_a_job_was_sent_with(api: Api) -> None:
    signed = "https://acct.blob.core.windows.net/c/x?sv=2024&sig=c2VjcmV0c2lnbmF0dXJl"
    job = str(api.submit("alice", name="fetch", command=["curl", signed])["id"])
    client = sign_in(api, "alice")
    for path in ("/ui/jobs", f"/ui/jobs/{job}"):
        page = client.get(path).text
        assert "c2VjcmV0c2lnbmF0dXJl" not in page, path
    assert "sig=[REDACTED]" in client.get(f"/ui/jobs/{job}").text
