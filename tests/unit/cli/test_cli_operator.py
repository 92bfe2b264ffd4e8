"""Operator commands: config validate, server with a bad config, token create/revoke."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.config import Settings, sqlite_url
from gpupool.server.serve import resolve_config
from gpupool.state.db import make_engine, session_factory
from gpupool.state.models import AuditRow, ConfigVersionRow, TokenRow

runner = CliRunner()


def test_validate_accepts_the_demo(demo_path: Path) -> None:
    done = runner.invoke(app, ["config", "validate", str(demo_path)])
    assert done.exit_code == 0 and "ok" in done.output


def test_validate_lists_problems_with_lines_and_exits_5(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "gpu_types: {h100: {}}\npools:\n  - name: p\n    backend: local\n"
        "    gpu_type: a100\n    node: {gpus: 4}\n"
    )
    done = runner.invoke(app, ["config", "validate", str(bad)])
    assert done.exit_code == 5
    assert f"{bad}:5: pools[0].gpu_type" in done.output


def test_server_refuses_a_bad_config_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu_types: {h100: {}}\nteams: {team-a: {cohort: nowhere}}\n")
    home = tmp_path / "home"
    done = runner.invoke(app, ["server", "--config", str(bad), "--home", str(home)])
    assert done.exit_code == 5
    assert "teams.team-a.cohort" in done.output
    assert not (home / "gpupool.db").exists()  # the store was never opened


def test_server_refuses_a_taken_port_before_opening_the_store(
    tmp_path: Path, demo_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        home = tmp_path / "home"
        done = runner.invoke(
            app, ["server", "--config", str(demo_path), "--home", str(home), "--port", str(port)]
        )
    assert done.exit_code == 5, done.output
    assert f"127.0.0.1:{port} is in use" in done.output and "--port" in done.output
    assert "listening on" not in done.output
    assert not (home / "gpupool.db").exists()  # nothing was started on it


@pytest.fixture
def home_with_config(tmp_path: Path, demo_path: Path) -> Path:
    home = tmp_path / "home"
    resolve_config(Settings(home=home, database_url=sqlite_url(home)), demo_path)
    return home


def test_token_create_prints_a_token_and_stores_only_its_hash(home_with_config: Path) -> None:
    done = runner.invoke(app, ["token", "create", "alice", "--home", str(home_with_config)])
    assert done.exit_code == 0, done.output
    token = done.output.strip()
    assert token.startswith("gpt_")
    engine = make_engine(sqlite_url(home_with_config))
    with session_factory(engine)() as session:
        row = session.scalars(select(TokenRow)).one()
        assert row.user == "alice" and token.split("_", 2)[2] not in row.secret_hash
        assert session.scalar(select(func.count()).select_from(ConfigVersionRow)) == 1
    engine.dispose()
    revoked = runner.invoke(app, ["token", "revoke", row.id, "--home", str(home_with_config)])
    assert revoked.exit_code == 0


@pytest.mark.parametrize(
    "form",
    [
        pytest.param(lambda token: token, id="the token as printed"),
        pytest.param(lambda token: "_".join(token.split("_")[:2]), id="gpt_<id>"),
        pytest.param(lambda token: token.split("_")[1], id="the bare id"),
    ],
)
def test_token_revoke_takes_the_token_in_any_form_it_was_shown(
    home_with_config: Path, form: Callable[[str], str]
) -> None:
    created = runner.invoke(app, ["token", "create", "alice", "--home", str(home_with_config)])
    token = created.output.strip()
    revoked = runner.invoke(app, ["token", "revoke", form(token), "--home", str(home_with_config)])
    assert revoked.exit_code == 0, revoked.output
    token_id, secret = token.split("_")[1], token.split("_", 2)[2]
    assert revoked.output.strip() == f"revoked {token_id}" and secret not in revoked.output
    engine = make_engine(sqlite_url(home_with_config))
    with session_factory(engine)() as session:
        assert session.get(TokenRow, token_id).revoked_at is not None  # type: ignore[union-attr]
    engine.dispose()


@pytest.mark.parametrize("command", [["token", "create", "alice"], ["token", "revoke", "gpt_x"]])
def test_token_commands_refuse_a_home_without_a_store_and_create_none(
    tmp_path: Path, command: list[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    done = runner.invoke(app, [*command, "--home", str(elsewhere)])
    assert done.exit_code == 5
    assert f"no gpupool store at {elsewhere / 'gpupool.db'}" in done.output
    assert "pass --home or set GPUPOOL_HOME" in done.output
    assert not (elsewhere / "gpupool.db").exists()


def test_token_create_for_an_unknown_user_fails(home_with_config: Path) -> None:
    done = runner.invoke(app, ["token", "create", "mallory", "--home", str(home_with_config)])
    assert done.exit_code == 5 and "unknown user" in done.output


def test_operator_actions_are_audited(home_with_config: Path) -> None:
    created = runner.invoke(app, ["token", "create", "bob", "--home", str(home_with_config)])
    token_id = created.output.strip().split("_")[1]
    runner.invoke(app, ["token", "revoke", token_id, "--home", str(home_with_config)])
    engine = make_engine(sqlite_url(home_with_config))
    with session_factory(engine)() as session:
        rows = list(session.scalars(select(AuditRow).order_by(AuditRow.id)))
    engine.dispose()
    assert [(r.action, r.outcome) for r in rows] == [
        ("config.apply", "ok"),
        ("token.create", "ok"),
        ("token.revoke", "ok"),
    ]
    assert all(r.actor.startswith("operator:") for r in rows)
    assert rows[1].token_id == rows[2].token_id == token_id
    assert rows[1].target == "user bob"


def test_server_refuses_oidc_settings_without_audience(
    tmp_path: Path, demo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_OIDC_ISSUER", "https://idp.example.com")
    monkeypatch.delenv("GPUPOOL_OIDC_AUDIENCE", raising=False)
    home = tmp_path / "home"
    done = runner.invoke(app, ["server", "--config", str(demo_path), "--home", str(home)])
    assert done.exit_code == 5
    assert "GPUPOOL_OIDC_AUDIENCE" in done.output
