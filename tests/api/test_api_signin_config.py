"""GET /v1/auth/config: what `gpupool login` needs to sign in, public, never a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.config import DEFAULT_CLI_SCOPE, OidcSettings, load_oidc
from support.apikit import Api, make_api


def test_without_a_provider_every_field_is_null(api: Api) -> None:
    response = api.client.get("/v1/auth/config")
    assert response.status_code == 200
    assert response.json() == {"issuer": None, "audience": None, "client_id": None, "scope": None}


def test_with_a_provider_it_names_issuer_audience_client_and_scope(
    tmp_path: Path, demo_path: Path
) -> None:
    oidc = OidcSettings(issuer="https://idp.example", audience="gpupool", client_id="gpupool-cli")
    built = make_api(tmp_path / "home", demo_path, oidc=oidc)
    try:
        response = built.client.get("/v1/auth/config")  # no token: it is how one gets a token
    finally:
        built.client.close()
        built.runtime.close()
    assert response.status_code == 200
    assert response.json() == {
        "issuer": "https://idp.example",
        "audience": "gpupool",
        "client_id": "gpupool-cli",
        "scope": DEFAULT_CLI_SCOPE,
    }


@pytest.mark.parametrize(
    ("extra", "want_client", "want_scope"),
    [
        pytest.param({}, None, DEFAULT_CLI_SCOPE, id="defaults"),
        pytest.param(
            {"GPUPOOL_OIDC_CLIENT_ID": " cli ", "GPUPOOL_OIDC_CLI_SCOPE": " api://gp/use  openid "},
            "cli",
            "api://gp/use openid",
            id="set, whitespace trimmed",
        ),
    ],
)
def test_the_cli_client_settings(
    extra: dict[str, str], want_client: str | None, want_scope: str
) -> None:
    env = {"GPUPOOL_OIDC_ISSUER": "https://idp", "GPUPOOL_OIDC_AUDIENCE": "gp", **extra}
    oidc = load_oidc(env)
    assert oidc is not None and (oidc.client_id, oidc.cli_scope) == (want_client, want_scope)
