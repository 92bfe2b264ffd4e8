"""Dashboard sign-in through the real local OIDC provider (scripts/oidc/up.sh): authorization
code with PKCE, the provider's own sign-in form, groups that make team roles, and the
refusals: a forged state, a code replayed, a wrong password."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from gpupool.config import OidcSettings
from support.apikit import Api, make_api
from support.oidc_provider import Provider, start_provider


@pytest.fixture
def provider() -> Provider:
    return start_provider()


@pytest.fixture
def api(tmp_path: Path, demo_path: Path, provider: Provider) -> Iterator[Api]:
    oidc = OidcSettings(issuer=provider.issuer, audience="gpupool", client_id="gpupool-web")
    built = make_api(tmp_path / "home", demo_path, oidc=oidc)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def start(client: TestClient) -> str:
    """The provider's authorization URL the dashboard sends the browser to."""
    answer = client.get("/ui/oidc/start?next=/ui/teams", follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"])


def provider_sign_in(authorize_url: str, user: str, password: str) -> httpx.Response:
    """What the user does on the provider's page: fill in the form and send it."""
    page = httpx.get(authorize_url, timeout=10)
    assert page.status_code == 200, page.text
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    form.update(username=user, password=password)
    base = f"{urlsplit(authorize_url).scheme}://{urlsplit(authorize_url).netloc}"
    return httpx.post(f"{base}/authorize", data=form, timeout=10)


def callback_path(redirect: httpx.Response) -> str:
    assert redirect.status_code == 303, redirect.text
    target = urlsplit(redirect.headers["location"])
    return f"{target.path}?{target.query}"


def test_sign_in_with_pkce_makes_a_session_with_the_groups_roles(
    api: Api, provider: Provider
) -> None:
    provider.set_users("dave", groups=["TeamA"])
    client = TestClient(api.client.app)
    url = start(client)
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["client_id"] == ["gpupool-web"]
    back = callback_path(provider_sign_in(url, "dave", "pw-dave"))
    signed_in = client.get(back, follow_redirects=False)
    assert signed_in.status_code == 200, signed_in.text
    assert 'http-equiv="refresh" content="0;url=/ui/teams"' in signed_in.text
    teams = client.get("/ui/teams")
    assert teams.status_code == 200
    assert 'id="team-team-a"' in teams.text and 'id="team-team-b"' not in teams.text
    assert 'id="whoami">dave<' in teams.text


@dataclass
class Refusal:
    what: str  # "state": a forged state; "password": a wrong password at the provider
    want_status: int
    want_text: str


REFUSALS = [
    pytest.param(Refusal("state", 403, "was not started here"), id="forged state"),
    pytest.param(Refusal("password", 401, "Unknown user or bad password"), id="wrong password"),
    pytest.param(Refusal("replay", 401, "refused the sign-in"), id="code used twice"),
]


@pytest.mark.parametrize("case", REFUSALS)
def test_sign_in_refusals(api: Api, provider: Provider, case: Refusal) -> None:
    provider.set_users("dave", groups=["TeamA"])
    client = TestClient(api.client.app)
    url = start(client)
    if case.what == "password":
        answer = provider_sign_in(url, "dave", "wrong")
        assert answer.status_code == case.want_status
        assert case.want_text in answer.text
        return
    back = callback_path(provider_sign_in(url, "dave", "pw-dave"))
    if case.what == "state":
        back = re.sub(r"state=[^&]+", "state=forged", back)
    else:
        assert client.get(back, follow_redirects=False).status_code == 200
        client.cookies.clear()
        client = TestClient(api.client.app)
        state = parse_qs(urlsplit(start(client)).query)["state"][0]
        back = re.sub(r"state=[^&]+", f"state={state}", back)
    answer = client.get(back, follow_redirects=False)
    assert answer.status_code == case.want_status, answer.text
    assert case.want_text in answer.text
    assert client.get("/ui/", follow_redirects=False).status_code == 303
