"""Azure grants against Azurite over HTTPS with OAuth: user-delegation SAS scoped to the
team's container allow exactly what they were minted for."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from gpupool.data.grants.base import Grant
from gpupool.data.grants.issuer import GrantIssuer
from gpupool.data.grants.local import Signer
from gpupool.spec.models import ClusterConfig, Storage, Team
from support.azurite import ACCOUNT, Azurite, service, start

INPUT = "shared/in.txt"
OUTPUT = "home/alice/out"


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    found = start()
    if isinstance(found, str):
        pytest.skip(found)
    client = service(found)
    for team in ("team-a", "team-b"):
        container = client.get_container_client(team)
        if not container.exists():
            container.create_container()
        container.upload_blob(INPUT, f"data of {team}".encode(), overwrite=True)
    yield found
    client.close()


def config() -> ClusterConfig:
    return ClusterConfig(
        gpu_types={},
        teams={"team-a": Team(), "team-b": Team()},
        storage=Storage(root=f"az://{ACCOUNT}", grant_margin_s=0),
    )


def mint(azurite: Azurite, tmp_path: Path, now: datetime) -> Grant:
    issuer = GrantIssuer(
        tmp_path,
        Signer(b"k" * 32),
        "http://unused",
        lambda: now,
        azure_service=lambda url: service(azurite, url),
    )
    # The configured endpoint is how a deployment points gpupool at Azurite.
    cfg = config().model_copy(
        update={"storage": config().storage.model_copy(update={"endpoint": azurite.url})}
    )
    return issuer.issue(
        cfg,
        team="team-a",
        user="alice",
        job_id="j-1",
        attempt=1,
        inputs=[INPUT],
        outputs=[OUTPUT],
        max_runtime_s=600,
    )


def in_container(url: str, container: str) -> str:
    """``url`` pointed at another container of the same account, query unchanged."""
    parts = urlsplit(url)
    segments = parts.path.split("/")  # ['', account, container, ...]
    segments[2] = container
    return urlunsplit(parts._replace(path="/".join(segments)))


def below(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return f"{base}/{name}?{query}"


@dataclass(frozen=True)
class Case:
    grant: str  # "read" or "write"
    method: str
    team: str = "team-a"
    name: str = ""  # appended below a write URL; "{new}" becomes a fresh name
    expired: bool = False
    status: int = 200


CASES = [
    pytest.param(Case("read", "GET"), id="read own input"),
    pytest.param(Case("read", "PUT", status=403), id="write with a read grant"),
    pytest.param(Case("read", "GET", team="team-b", status=403), id="read another team's blob"),
    pytest.param(Case("read", "GET", expired=True, status=403), id="expired read grant"),
    pytest.param(Case("write", "PUT", name="{new}", status=201), id="write own output"),
    pytest.param(Case("write", "GET", name="{new}", status=403), id="read with a write grant"),
    pytest.param(
        Case("write", "PUT", team="team-b", name="{new}", status=403),
        id="write into another team's container",
    ),
    pytest.param(
        Case("write", "PUT", name="{new}", expired=True, status=403), id="expired write grant"
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_sas_allows_exactly_its_scope(azurite: Azurite, tmp_path: Path, case: Case) -> None:
    now = datetime.now(UTC) - (timedelta(hours=1) if case.expired else timedelta(0))
    grant = mint(azurite, tmp_path, now)
    if case.grant == "read":
        url = grant.inputs[INPUT]
    else:
        url = below(grant.outputs[OUTPUT].url, case.name.replace("{new}", uuid.uuid4().hex))
    # A well-formed upload, so that a refusal is the grant's and not a malformed request's.
    headers = {"x-ms-blob-type": "BlockBlob"} if case.method == "PUT" else {}
    url = in_container(url, case.team)
    with httpx.Client(verify=ssl.create_default_context(cafile=azurite.ca)) as http:
        response = http.request(case.method, url, content=b"x", headers=headers)
    assert response.status_code == case.status, response.text
    if case.status == 200:
        assert response.content == b"data of team-a"


def test_the_write_grant_cannot_overwrite(azurite: Azurite, tmp_path: Path) -> None:
    target = mint(azurite, tmp_path, datetime.now(UTC)).outputs[OUTPUT]
    url = below(target.url, uuid.uuid4().hex)
    with httpx.Client(verify=ssl.create_default_context(cafile=azurite.ca)) as http:
        assert http.put(url, content=b"first", headers=dict(target.headers)).status_code == 201
        again = http.put(url, content=b"second", headers=dict(target.headers))
    assert again.status_code == 403


def test_grant_scope_and_env_hold_no_account_credential(azurite: Azurite, tmp_path: Path) -> None:
    grant = mint(azurite, tmp_path, datetime.now(UTC))
    assert grant.summary()["writes"] == [f"{OUTPUT}/attempt-1"]
    url = grant.inputs[INPUT]
    assert url.startswith(f"{azurite.url}/team-a/{INPUT}?")
    assert "skoid=" in url and "sig=" in url  # a user-delegation SAS, not an account key
    assert "sig=" not in repr(grant)
