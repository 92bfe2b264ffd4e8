"""``gpupool token create|list|revoke`` for oneself, through the API."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi

TOKEN = {
    "id": "0a1b2c3d4e5f",
    "user": "alice",
    "description": "laptop",
    "created_at": "2026-12-01T12:00:00Z",
    "expires_at": "2027-03-01T12:00:00Z",
    "revoked_at": None,
}


def test_token_create_without_a_user_mints_ones_own_through_the_api(
    api: FakeApi, runner: CliRunner
) -> None:
    secret = "gpt_0a1b2c3d4e5f_" + "s" * 43
    api.add("POST", "/v1/tokens", json={**TOKEN, "token": secret}, status=201)

    result = runner.invoke(app, ["token", "create", "--description", "laptop", "--ttl-days", "7"])

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{secret}\n"  # the token alone on stdout, for scripts
    assert json.loads(api.last.content) == {"description": "laptop", "ttl_days": 7.0}


def test_token_list_shows_no_secret(api: FakeApi, runner: CliRunner) -> None:
    revoked = {**TOKEN, "id": "99ff", "revoked_at": "2026-12-02T00:00:00Z"}
    api.add("GET", "/v1/tokens", json={"items": [TOKEN, revoked]})

    table = runner.invoke(app, ["token", "list"], terminal_width=200)
    listed = runner.invoke(app, ["token", "list", "--json"])

    assert table.exit_code == 0, table.output
    assert "0a1b2c3d4e5f" in table.stdout and "active" in table.stdout
    assert "revoked" in table.stdout
    assert [t["id"] for t in json.loads(listed.stdout)["items"]] == ["0a1b2c3d4e5f", "99ff"]


def test_token_revoke_sends_only_the_id_of_the_printed_token(
    api: FakeApi, runner: CliRunner
) -> None:
    secret_part = "s" * 43
    api.add(
        "DELETE",
        "/v1/tokens/0a1b2c3d4e5f",
        json={**TOKEN, "revoked_at": "2026-12-03T00:00:00Z"},
    )

    result = runner.invoke(app, ["token", "revoke", f"gpt_0a1b2c3d4e5f_{secret_part}"])

    assert result.exit_code == 0, result.output
    assert result.stdout == "revoked 0a1b2c3d4e5f\n"
    assert secret_part not in str(api.last.url)
