"""CLI test wiring: commands get an SDK ``Client`` over a ``FakeApi`` through ``make_client``.

``gpupool.cli.context.make_client`` is the CLI's only way to build a client, so replacing it is
all it takes to run real commands against a fake server. URL and token still resolve through
the SDK's settings, so ``--url``/``--token`` and ``GPUPOOL_*`` are exercised too.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpupool.cli import context
from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi


@pytest.fixture(autouse=True)
def _hermetic_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.delenv("GPUPOOL_URL", raising=False)
    monkeypatch.delenv("GPUPOOL_TOKEN", raising=False)
    # No credential of a real `gpupool login` may be picked up.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    # Wide enough that Rich never folds a cell the tests look for.
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()

    def make_client(url: str | None, token: str | None, timeout: float = 30) -> Client:
        return Client(url, token, transport=fake.transport, timeout=timeout)

    monkeypatch.setattr(context, "make_client", make_client)
    return fake


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
