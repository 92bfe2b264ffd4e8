"""Where the SDK finds its URL and token: arguments, then environment, then default."""

from __future__ import annotations

import pytest

from gpupool.client.sdk import Client
from gpupool.client.settings import DEFAULT_URL, ClientSettings, resolve
from gpupool.client.testing import FakeApi, whoami_json


@pytest.mark.parametrize(
    ("url", "token", "environ", "want"),
    [
        pytest.param(None, None, {}, ClientSettings(DEFAULT_URL, None), id="defaults"),
        pytest.param(
            None,
            None,
            {"GPUPOOL_URL": "http://env:1/", "GPUPOOL_TOKEN": "env-tok"},
            ClientSettings("http://env:1", "env-tok"),
            id="environment, trailing slash dropped",
        ),
        pytest.param(
            "http://arg:2",
            "arg-tok",
            {"GPUPOOL_URL": "http://env:1", "GPUPOOL_TOKEN": "env-tok"},
            ClientSettings("http://arg:2", "arg-tok"),
            id="arguments win over environment",
        ),
        pytest.param(
            None, None, {"GPUPOOL_TOKEN": ""}, ClientSettings(DEFAULT_URL, None), id="empty token"
        ),
    ],
)
def test_resolve(
    url: str | None, token: str | None, environ: dict[str, str], want: ClientSettings
) -> None:
    assert resolve(url, token, environ) == want


def test_settings_repr_hides_the_token() -> None:
    assert "sekret" not in repr(ClientSettings("http://x", "sekret"))


def test_client_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPOOL_URL", "http://from-env:7")
    monkeypatch.setenv("GPUPOOL_TOKEN", "env-tok")
    api = FakeApi()
    api.add("GET", "/v1/whoami", json=whoami_json())

    with Client(transport=api.transport) as sdk:
        sdk.whoami()

    assert str(api.last.url) == "http://from-env:7/v1/whoami"
    assert api.last.headers["Authorization"] == "Bearer env-tok"
