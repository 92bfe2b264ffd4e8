"""The device flow's client side against a scripted provider: what it sends, how it paces its
polls, how each answer ends it, and how a stored credential is renewed."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest

from gpupool.client import credentials, signin
from gpupool.client.credentials import Credential
from gpupool.client.signin import DEVICE_GRANT, DeviceCode, Provider, SignInFailed

ISSUER = "http://idp.test"
PROVIDER = Provider(ISSUER, f"{ISSUER}/device", f"{ISSUER}/token")


def oauth_error(error: str) -> httpx.Response:
    return httpx.Response(400, json={"error": error, "error_description": f"{error} said"})


def tokens(access: str = "new-access", refresh: str | None = "new-refresh") -> httpx.Response:
    body: dict[str, object] = {"access_token": access, "token_type": "Bearer", "expires_in": 60}
    if refresh:
        body["refresh_token"] = refresh
    return httpx.Response(200, json=body)


class Script:
    """A provider that answers the token endpoint from a list, recording each form sent."""

    def __init__(self, answers: list[httpx.Response]) -> None:
        self.answers = answers
        self.forms: list[dict[str, str]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
        self.forms.append(form)
        return self.answers.pop(0)

    def http(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def code(expires_in: float = 600, interval: float = 1) -> DeviceCode:
    return DeviceCode("dev-code", "ABCD-EFGH", f"{ISSUER}/verify", None, expires_in, interval)


@pytest.mark.parametrize(
    ("error", "want"),
    [
        pytest.param("authorization_pending", 2.0, id="pending keeps the interval"),
        pytest.param("slow_down", 7.0, id="slow_down adds 5 s"),
    ],
)
def test_after_poll_waits(error: str, want: float) -> None:
    assert signin.after_poll(error, "", 2.0) == want


@pytest.mark.parametrize(
    ("error", "want"),
    [
        pytest.param("access_denied", "denied", id="denied"),
        pytest.param("expired_token", "expired", id="expired"),
        pytest.param("invalid_client", "refused the sign-in: invalid_client (why)", id="other"),
    ],
)
def test_after_poll_ends(error: str, want: str) -> None:
    with pytest.raises(SignInFailed) as caught:
        signin.after_poll(error, "why", 2.0)
    assert want in caught.value.message


def test_poll_honours_interval_and_slow_down_until_the_tokens_come() -> None:
    script = Script(
        [
            oauth_error("authorization_pending"),
            oauth_error("slow_down"),
            oauth_error("authorization_pending"),
            tokens(),
        ]
    )
    clock = FakeTime()
    with script.http() as http:
        got = signin.poll(http, PROVIDER, "cli", code(interval=1), clock.sleep, clock.clock)
    assert clock.sleeps == [1, 1, 6, 6]
    assert (got.access_token, got.refresh_token) == ("new-access", "new-refresh")
    assert script.forms[0] == {
        "grant_type": DEVICE_GRANT,
        "device_code": "dev-code",
        "client_id": "cli",
    }


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        pytest.param(oauth_error("access_denied"), "denied", id="denied"),
        pytest.param(oauth_error("expired_token"), "expired", id="expired at the provider"),
    ],
)
def test_poll_ends_on_the_providers_answer(answer: httpx.Response, want: str) -> None:
    script = Script([oauth_error("authorization_pending"), answer])
    clock = FakeTime()
    with script.http() as http, pytest.raises(SignInFailed) as caught:
        signin.poll(http, PROVIDER, "cli", code(), clock.sleep, clock.clock)
    assert want in caught.value.message and len(script.forms) == 2


def test_poll_stops_when_the_code_has_expired_locally() -> None:
    script = Script([oauth_error("authorization_pending")] * 10)
    clock = FakeTime()
    with pytest.raises(SignInFailed) as caught:
        signin.poll(
            script.http(),
            PROVIDER,
            "cli",
            code(expires_in=3.5, interval=1),
            clock.sleep,
            clock.clock,
        )
    assert "expired" in caught.value.message
    assert len(script.forms) == 3 and clock.now <= 3.5


def discovery(document: dict[str, object]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(200, json=document)))


def test_discovery_finds_the_endpoints() -> None:
    doc = {
        "issuer": ISSUER,
        "token_endpoint": f"{ISSUER}/t",
        "device_authorization_endpoint": f"{ISSUER}/d",
    }
    assert signin.discover(discovery(doc), ISSUER + "/") == Provider(
        ISSUER, f"{ISSUER}/d", f"{ISSUER}/t"
    )


def test_discovery_refuses_another_issuer() -> None:
    with pytest.raises(SignInFailed) as caught:
        signin.discover(discovery({"issuer": "http://evil", "token_endpoint": "x"}), ISSUER)
    assert "names another issuer" in caught.value.message


def test_a_provider_without_the_device_flow_is_named_with_the_client() -> None:
    provider = signin.discover(discovery({"issuer": ISSUER, "token_endpoint": "t"}), ISSUER)
    with pytest.raises(SignInFailed) as caught:
        signin.start(discovery({}), provider, "gpupool-cli", "openid")
    assert "no device_authorization_endpoint" in caught.value.message
    assert "'gpupool-cli'" in caught.value.message


def test_start_sends_client_and_scope_and_reads_the_codes() -> None:
    sent: list[dict[str, list[str]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(parse_qs(request.content.decode()))
        # verification_url: the early drafts' name, still used by some providers.
        return httpx.Response(
            200,
            json={
                "device_code": "d",
                "user_code": "U",
                "verification_url": "http://v",
                "expires_in": 9,
            },
        )

    with httpx.Client(transport=httpx.MockTransport(handler)) as http:
        got = signin.start(http, PROVIDER, "cli", "openid offline_access")
    assert sent == [{"client_id": ["cli"], "scope": ["openid offline_access"]}]
    assert got == DeviceCode("d", "U", "http://v", None, 9.0, signin.DEFAULT_INTERVAL_S)


SERVER = "http://gpupool.test"


def stored(path: Path, **fields: object) -> None:
    values: dict[str, object] = {
        "issuer": ISSUER,
        "client_id": "cli",
        "token_endpoint": f"{ISSUER}/token",
        "access_token": "old-access",
        "refresh_token": "old-refresh",
        "expires_at": 1000.0,
        **fields,
    }
    credentials.save(path, Credential(server_url=SERVER, **values))  # type: ignore[arg-type]


def renew(path: Path, script: Script, now: float) -> str | None:
    transport = httpx.MockTransport(script.handler)
    return signin.stored_token(path, SERVER, now=lambda: now, transport=transport)


def test_a_fresh_credential_is_used_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    stored(path)
    script = Script([])
    assert renew(path, script, now=900.0) == "old-access" and script.forms == []


@pytest.mark.parametrize(
    ("answer", "want_refresh"),
    [
        pytest.param(tokens("new-access", "new-refresh"), "new-refresh", id="rotated"),
        pytest.param(tokens("new-access", None), "old-refresh", id="not rotated: kept"),
    ],
)
def test_an_expired_credential_is_renewed_and_stored(
    tmp_path: Path, answer: httpx.Response, want_refresh: str
) -> None:
    path = tmp_path / "c.json"
    stored(path)
    script = Script([answer])
    assert renew(path, script, now=990.0) == "new-access"  # within the leeway of expiry
    assert script.forms == [
        {"grant_type": "refresh_token", "refresh_token": "old-refresh", "client_id": "cli"}
    ]
    again = credentials.load(path, SERVER)
    assert again is not None
    assert (again.access_token, again.refresh_token) == ("new-access", want_refresh)
    assert again.expires_at is not None and again.expires_at > 1000.0


@pytest.mark.parametrize(
    ("fields", "answers", "want"),
    [
        pytest.param({"refresh_token": None}, [], "gave no refresh token", id="no refresh token"),
        pytest.param(
            {},
            [oauth_error("invalid_grant")],
            "could not be renewed (the identity provider answered invalid_grant)",
            id="refresh refused",
        ),
    ],
)
def test_an_expired_credential_that_cannot_be_renewed_says_to_sign_in_again(
    tmp_path: Path, fields: dict[str, object], answers: list[httpx.Response], want: str
) -> None:
    path = tmp_path / "c.json"
    stored(path, **fields)
    with pytest.raises(SignInFailed) as caught:
        renew(path, Script(answers), now=2000.0)
    assert want in caught.value.message and "run `gpupool login` again" in caught.value.message
    assert "old-access" not in caught.value.message and "old-refresh" not in caught.value.message


def test_an_unreachable_provider_is_named(tmp_path: Path) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    path = tmp_path / "c.json"
    stored(path)
    with pytest.raises(SignInFailed) as caught:
        signin.stored_token(path, SERVER, now=lambda: 2000.0, transport=httpx.MockTransport(down))
    assert f"the identity provider at {ISSUER} cannot be reached" in caught.value.message


def test_a_jwt_without_expires_in_expires_at_its_exp() -> None:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    jwt = f"{part({'alg': 'RS256'})}.{part({'exp': 1234})}.sig"
    script = Script([httpx.Response(200, json={"access_token": jwt})])
    clock = FakeTime()
    got = signin.poll(script.http(), PROVIDER, "cli", code(), clock.sleep, clock.clock)
    assert got.expires_at == 1234.0 and got.refresh_token is None
