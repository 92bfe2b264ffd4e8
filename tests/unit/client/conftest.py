"""Fixtures for SDK tests: a FakeApi and a Client wired to it, hermetic from the environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi

URL = "http://gpupool.test"
TOKEN = "tok-s3cret-value"


@pytest.fixture(autouse=True)
def _no_gpupool_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.delenv("GPUPOOL_URL", raising=False)
    monkeypatch.delenv("GPUPOOL_TOKEN", raising=False)
    # No credential of a real `gpupool login` may be picked up.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def client(api: FakeApi) -> Iterator[Client]:
    with Client(URL, TOKEN, transport=api.transport) as sdk:
        yield sdk
