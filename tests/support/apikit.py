"""An in-process server on the demo configuration, driven tick by tick (the ``api`` fixture)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpupool.auth.tokens import create_token
from gpupool.config import Settings, sqlite_url
from gpupool.server.app import create_app
from gpupool.server.runtime import Runtime, build_runtime
from gpupool.spec.load import load_config

USERS = ("alice", "bob", "vera", "carol", "admin")


@dataclass
class Api:
    runtime: Runtime
    client: TestClient
    tokens: dict[str, str]

    def as_(self, user: str | None) -> dict[str, str]:
        return {} if user is None else {"Authorization": f"Bearer {self.tokens[user]}"}

    def submit(self, user: str, **body: object) -> dict[str, object]:
        body.setdefault("command", ["true"])
        response = self.client.post("/v1/jobs", json=body, headers=self.as_(user))
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]

    def job(self, user: str, job_id: str) -> dict[str, object]:
        response = self.client.get(f"/v1/jobs/{job_id}", headers=self.as_(user))
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def tick_until(
        self, check: Callable[[], bool], timeout: float = 15.0, what: str = "condition"
    ) -> None:
        """Run controller ticks (and let dispatch threads finish) until ``check()``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.runtime.controller.tick()
            if check():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def status(self, job_id: str) -> str:
        return str(self.job("admin", job_id)["status"])


def make_api(
    home: Path, config_path: Path, database_url: str | None = None, **settings_fields: Any
) -> Api:
    """An in-process API; ``settings_fields`` are further :class:`Settings` fields."""
    settings = Settings(home=home, database_url=database_url or sqlite_url(home), **settings_fields)
    runtime = build_runtime(settings, load_config(config_path))
    with runtime.sessions.begin() as session:
        tokens = {
            u: create_token(session, u, runtime.clock.now()).secret for u in runtime.config.users
        }
    return Api(runtime, TestClient(create_app(runtime)), tokens)


@pytest.fixture
def api(tmp_path: Path, demo_path: Path) -> Iterator[Api]:
    built = make_api(tmp_path / "home", demo_path)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()
