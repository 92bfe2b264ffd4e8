"""OIDC against a real identity provider started locally (scripts/oidc/up.sh): tokens come
from the provider's own token endpoint, groups map to teams, bad tokens are refused with a
reason and never echoed back. API tokens keep working beside OIDC."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gpupool.config import OidcSettings
from support.apikit import Api, make_api

ROOT = Path(__file__).resolve().parents[2]
AUDIENCE = "gpupool"
HOW = "run scripts/oidc/up.sh (needs node >= 20 and npm from the registry, or root to install)"


@dataclass(frozen=True)
class Provider:
    issuer: str
    users_file: Path

    def set_users(self, groups: dict[str, list[str]]) -> None:
        users = {name: {"password": f"pw-{name}", "groups": g} for name, g in groups.items()}
        self.users_file.write_text(json.dumps(users))

    def token(self, **form: str) -> str:
        endpoint = httpx.get(f"{self.issuer}/.well-known/openid-configuration").json()
        answer = httpx.post(endpoint["token_endpoint"], data=form, timeout=10)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def sign_in(self, user: str) -> str:
        """A user's access token through the password grant."""
        return self.token(
            grant_type="password", username=user, password=f"pw-{user}", client_id="gpupool-cli"
        )


@pytest.fixture(scope="session")
def provider() -> Provider:
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "oidc" / "up.sh")], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no OIDC provider ({HOW}): {exc}")
    if done.returncode != 0:
        pytest.skip(f"no OIDC provider ({HOW}): {done.stderr.strip()[-400:]}")
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Provider(values["issuer"], Path(values["users"]))


@pytest.fixture
def api(tmp_path: Path, demo_path: Path, provider: Provider) -> Iterator[Api]:
    oidc = OidcSettings(issuer=provider.issuer, audience=AUDIENCE)
    built = make_api(tmp_path / "home", demo_path, oidc=oidc)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Case:
    groups: dict[str, list[str]]  # the provider's users and their groups
    user: str
    path: str  # {job} is a job of alice (team-a)
    want_status: int
    method: str = "GET"
    want: dict[str, object] = field(default_factory=dict)  # fields of the answer


CASES = [
    pytest.param(
        Case(
            {"dave": ["TeamA", "Staff"]},
            "dave",
            "/v1/whoami",
            200,
            want={"user": "dave", "teams": {"team-a": "member"}},
        ),
        id="groups claim makes a team member",
    ),
    pytest.param(Case({"dave": ["TeamA"]}, "dave", "/v1/jobs/{job}", 200), id="group member reads"),
    pytest.param(
        Case({"dave": ["TeamB"]}, "dave", "/v1/jobs/{job}", 403), id="other team's group: 403"
    ),
    pytest.param(
        Case({"dave": ["TeamA"]}, "dave", "/v1/jobs/{job}/cancel", 200, "POST"),
        id="group member mutates",
    ),
    pytest.param(
        Case({"vera": ["TeamA"]}, "vera", "/v1/jobs/{job}/cancel", 403, "POST"),
        id="explicit viewer entry wins over the group",
    ),
    pytest.param(
        Case(
            {"admin": []},
            "admin",
            "/v1/whoami",
            200,
            want={"user": "admin", "platform_admin": True},
        ),
        id="a configured user signs in through the provider",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_provider_tokens(api: Api, provider: Provider, case: Case) -> None:
    job = api.submit("alice")["id"]
    provider.set_users(case.groups)
    token = provider.sign_in(case.user)
    response = api.client.request(case.method, case.path.format(job=job), headers=bearer(token))
    assert response.status_code == case.want_status, response.text
    body = response.json()
    assert {k: body[k] for k in case.want} == case.want


def test_removal_from_the_group_revokes_at_the_next_token(api: Api, provider: Provider) -> None:
    job = api.submit("alice")["id"]
    provider.set_users({"dave": ["TeamA"]})
    before = provider.sign_in("dave")
    provider.set_users({"dave": []})
    after = provider.sign_in("dave")
    assert api.client.get(f"/v1/jobs/{job}", headers=bearer(before)).status_code == 200
    assert api.client.get(f"/v1/jobs/{job}", headers=bearer(after)).status_code == 403


@dataclass
class Submit:
    user: str
    groups: list[str]
    want_status: int
    want_outcome: str


SUBMITS = [
    pytest.param(Submit("alice", [], 201, "ok"), id="configured user submits"),
    pytest.param(
        Submit("dave", ["TeamA"], 403, "forbidden"),
        id="group member without a POSIX identity may not submit",
    ),
]


@pytest.mark.parametrize("case", SUBMITS)
def test_submits_by_oidc_users_are_audited(api: Api, provider: Provider, case: Submit) -> None:
    provider.set_users({case.user: case.groups})
    response = api.client.post(
        "/v1/jobs",
        json={"command": ["true"], "team": "team-a"},
        headers=bearer(provider.sign_in(case.user)),
    )
    assert response.status_code == case.want_status, response.text
    entry = api.client.get("/v1/audit", headers=api.as_("admin")).json()["items"][0]
    assert (entry["actor"], entry["team"], entry["outcome"]) == (
        case.user,
        "team-a",
        case.want_outcome,
    )
    assert entry["token_id"].startswith("jwt:")


def tampered(token: str) -> str:
    head, payload, signature = token.split(".")
    return ".".join([head, payload, ("A" if signature[0] != "A" else "B") + signature[1:]])


@dataclass
class Refused:
    token: str  # how to get it: "wrong-audience", "service", "tampered", "api-token-shaped"
    want_message: str


REFUSED = [
    pytest.param(Refused("wrong-audience", "not meant for this server"), id="wrong audience"),
    pytest.param(Refused("service", "names no user"), id="service token without a user"),
    pytest.param(Refused("tampered", "invalid OIDC token"), id="tampered signature"),
]


@pytest.mark.parametrize("case", REFUSED)
def test_bad_tokens_are_refused_without_echo(api: Api, provider: Provider, case: Refused) -> None:
    provider.set_users({"dave": ["TeamA"]})
    token = {
        "wrong-audience": lambda: provider.token(
            grant_type="client_credentials", client_id="svc", aud="another-app"
        ),
        "service": lambda: provider.token(grant_type="client_credentials", client_id="svc"),
        "tampered": lambda: tampered(provider.sign_in("dave")),
    }[case.token]()
    response = api.client.get("/v1/jobs", headers=bearer(token))
    assert response.status_code == 401
    assert case.want_message in response.json()["error"]["message"]
    for part in token.split("."):
        assert part not in response.text


def test_api_tokens_work_beside_oidc(api: Api) -> None:
    assert api.client.get("/v1/whoami", headers=api.as_("alice")).json()["user"] == "alice"
