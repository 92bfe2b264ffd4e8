"""`gpupool login` / `logout` before any provider is involved: what the server's sign-in
configuration lacks is said plainly, and logout forgets exactly the current server."""

from __future__ import annotations

import os

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli import login
from gpupool.cli.main import app
from gpupool.client import credentials
from gpupool.client.credentials import Credential
from gpupool.client.settings import credentials_file
from gpupool.client.signin import DeviceCode, Provider, SignInConfig, Tokens
from gpupool.client.testing import FakeApi, whoami_json

URL = "http://gpupool.test"


def serve_config(monkeypatch: pytest.MonkeyPatch, config: SignInConfig) -> list[str]:
    asked: list[str] = []

    def server_config(http: httpx.Client, url: str) -> SignInConfig:
        asked.append(url)
        return config

    monkeypatch.setattr(login.signin, "server_config", server_config)
    return asked


@pytest.mark.parametrize(
    ("config", "want"),
    [
        pytest.param(
            SignInConfig(),
            f"the server at {URL} accepts API tokens only",
            id="no provider on the server",
        ),
        pytest.param(
            SignInConfig(issuer="http://idp", audience="gp"),
            "names no client to sign in as (GPUPOOL_OIDC_CLIENT_ID); pass --client-id",
            id="no client id",
        ),
    ],
)
def test_login_says_what_is_missing(
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    config: SignInConfig,
    want: str,
) -> None:
    asked = serve_config(monkeypatch, config)
    result = runner.invoke(app, ["--url", URL, "login"])
    assert result.exit_code == 4
    assert want in " ".join(result.output.split())
    assert asked == [URL]


def test_logout_forgets_only_the_current_server(runner: CliRunner) -> None:
    path = credentials_file(os.environ)
    assert path is not None
    for url in (URL, "http://other.test"):
        credentials.save(path, Credential(url, "http://idp", "cli", "http://idp/t", "tok"))

    result = runner.invoke(app, ["--url", URL, "logout"])
    assert result.exit_code == 0 and f"Signed out of {URL}." in result.output
    assert credentials.load(path, URL) is None
    assert credentials.load(path, "http://other.test") is not None

    again = runner.invoke(app, ["--url", URL, "logout"])
    assert again.exit_code == 0 and f"Not signed in to {URL}" in again.output


def test_a_stored_credential_is_sent_as_the_bearer(runner: CliRunner, api: FakeApi) -> None:
    api.add("GET", "/v1/whoami", json=whoami_json())
    path = credentials_file(os.environ)
    assert path is not None
    credentials.save(path, Credential(URL, "http://idp", "cli", "http://idp/t", "stored-tok"))
    result = runner.invoke(app, ["--url", URL, "whoami"])
    assert result.exit_code == 0, result.output
    assert api.last.headers["Authorization"] == "Bearer stored-tok"


def test_a_token_the_server_refuses_is_not_kept(
    runner: CliRunner, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_config(monkeypatch, SignInConfig(issuer="http://idp", client_id="cli"))
    provider = Provider("http://idp", "http://idp/device", "http://idp/token")
    code = DeviceCode("dev", "ABCD-EFGH", "http://idp/device", None, 60, 1)
    monkeypatch.setattr(login.signin, "discover", lambda http, issuer: provider)
    monkeypatch.setattr(login.signin, "start", lambda http, p, client, scope: code)
    monkeypatch.setattr(login.signin, "poll", lambda http, p, client, c: Tokens("new-tok"))
    refusal = "the OIDC token is not meant for this server: its audience is not 'gpupool'"
    api.add(
        "GET",
        "/v1/whoami",
        status=401,
        json={"error": {"code": "unauthenticated", "message": refusal}},
    )

    result = runner.invoke(app, ["--url", URL, "login"])

    assert result.exit_code == 4
    said = " ".join(result.output.split())
    assert "enter the code ABCD-EFGH" in said
    assert f"signed in at the identity provider, but the server at {URL} refuses the token" in said
    assert refusal in said
    assert api.last.headers["Authorization"] == "Bearer new-tok"
    path = credentials_file(os.environ)
    assert path is not None and not path.exists()
