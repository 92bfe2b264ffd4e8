"""TLS settings: ``GPUPOOL_SSL_CERTFILE``/``GPUPOOL_SSL_KEYFILE`` (or ``--ssl-*``), both or
neither, and an HTTPS ``api_url`` for the URLs jobs are given. Serving HTTPS for real is
tested in tests/e2e/test_e2e_operating.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpupool.config import load_settings
from gpupool.core.errors import ConfigInvalid


@dataclass(frozen=True)
class Case:
    env: dict[str, str] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    api_url: str = ""  # expected; "" when refused
    says: str = ""  # in the refusal


CASES = [
    pytest.param(Case(api_url="http://127.0.0.1:8080"), id="neither: plain HTTP"),
    pytest.param(
        Case(
            env={"GPUPOOL_SSL_CERTFILE": "CERT", "GPUPOOL_SSL_KEYFILE": "KEY"},
            api_url="https://127.0.0.1:8080",
        ),
        id="both from the environment: HTTPS",
    ),
    pytest.param(
        Case(
            flags={"ssl_certfile": "CERT", "ssl_keyfile": "KEY"}, api_url="https://127.0.0.1:8080"
        ),
        id="both from flags: HTTPS",
    ),
    pytest.param(
        Case(env={"GPUPOOL_SSL_CERTFILE": "CERT"}, says="GPUPOOL_SSL_KEYFILE (--ssl-keyfile)"),
        id="a certificate without its key is refused, naming the missing one",
    ),
    pytest.param(
        Case(
            env={"GPUPOOL_SSL_CERTFILE": "CERT", "GPUPOOL_SSL_KEYFILE": "MISSING"},
            says="no file at",
        ),
        id="a key file that does not exist is refused",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_tls_settings(case: Case, tmp_path: Path) -> None:
    files = {"CERT": tmp_path / "server.crt", "KEY": tmp_path / "server.key"}
    for path in files.values():
        path.write_text("PEM")

    def real(value: str) -> str:
        return str(files.get(value, tmp_path / value))

    env = {k: real(v) for k, v in case.env.items()}
    flags = {k: real(v) for k, v in case.flags.items()}
    if case.says:
        with pytest.raises(ConfigInvalid, match=re.escape(case.says)):
            load_settings(env, **flags)
        return
    settings = load_settings(env, **flags)
    assert settings.api_url == case.api_url
    assert (settings.tls is not None) == case.api_url.startswith("https")
