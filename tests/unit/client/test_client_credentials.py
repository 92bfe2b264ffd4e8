"""The credentials `gpupool login` keeps: per server, private from creation, replaced whole."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpupool.client import credentials
from gpupool.client.credentials import Credential
from gpupool.client.errors import Unauthenticated
from gpupool.client.settings import credentials_file, resolve

A = "http://gpupool-a:8080"
B = "http://gpupool-b:8080"


def credential(server_url: str = A, access: str = "access-a", **fields: object) -> Credential:
    values: dict[str, object] = {
        "issuer": "http://idp",
        "client_id": "cli",
        "token_endpoint": "http://idp/token",
        "refresh_token": "refresh-a",
        "expires_at": 2_000_000_000.0,
        **fields,
    }
    return Credential(server_url=server_url, access_token=access, **values)  # type: ignore[arg-type]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_saved_credential_is_found_by_its_server_only(tmp_path: Path) -> None:
    path = tmp_path / "gpupool" / "credentials.json"
    credentials.save(path, credential(A, "access-a"))
    credentials.save(path, credential(B, "access-b"))
    assert credentials.load(path, A) == credential(A, "access-a")
    assert credentials.load(path, B) == credential(B, "access-b")
    assert credentials.load(path, "http://gpupool-a:8081") is None


def test_the_file_and_directory_are_private_and_no_temporary_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "config" / "gpupool" / "credentials.json"
    credentials.save(path, credential())
    credentials.save(path, credential(access="access-2"))
    assert (mode(path), mode(path.parent)) == (0o600, 0o700)
    assert [p.name for p in path.parent.iterdir()] == ["credentials.json"]


def test_a_wider_directory_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "gpupool" / "credentials.json"
    path.parent.mkdir(mode=0o755)
    path.parent.chmod(0o755)
    credentials.save(path, credential())
    assert mode(path.parent) == 0o700


def test_remove_forgets_one_server_and_the_file_goes_with_the_last(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    credentials.save(path, credential(A))
    credentials.save(path, credential(B))
    assert credentials.remove(path, A) is True
    assert credentials.load(path, A) is None and credentials.load(path, B) is not None
    assert credentials.remove(path, A) is False
    assert credentials.remove(path, B) is True
    assert not path.exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("{not json", "not JSON (line 1)", id="not json"),
        pytest.param('{"servers": []}', 'no "servers" object', id="wrong shape"),
        pytest.param("{\xff}", "not UTF-8 text", id="not text"),
        pytest.param(
            json.dumps({"servers": {A: {"issuer": "x"}}}),
            f"the entry for {A} is incomplete or has unknown fields",
            id="incomplete entry",
        ),
    ],
)
def test_an_unreadable_file_names_itself_and_the_fix(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "credentials.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(Unauthenticated) as caught:
        credentials.load(path, A)
    assert str(path) in caught.value.message and why in caught.value.message
    assert "gpupool login" in caught.value.message


def test_repr_hides_the_tokens() -> None:
    shown = repr(credential(access="sekret-access", refresh_token="sekret-refresh"))
    assert "sekret" not in shown and A in shown


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        pytest.param({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/gpupool/credentials.json"),
        pytest.param({"HOME": "/h"}, "/h/.config/gpupool/credentials.json", id="home"),
        pytest.param(
            {"XDG_CONFIG_HOME": "rel", "HOME": "/h"},
            "/h/.config/gpupool/credentials.json",
            id="a relative XDG_CONFIG_HOME is ignored",
        ),
        pytest.param({}, None, id="neither"),
    ],
)
def test_credentials_file(environ: dict[str, str], want: str | None) -> None:
    found = credentials_file(environ)
    assert (str(found) if found else None) == want


def test_resolve_uses_the_stored_token_of_that_server_unless_one_is_given(tmp_path: Path) -> None:
    credentials.save(tmp_path / "gpupool" / "credentials.json", credential(A, "stored"))
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert resolve(A, None, env).token == "stored"
    assert resolve(f"{A}/", None, env).token == "stored"
    assert resolve(B, None, env).token is None
    assert resolve(A, "explicit", env).token == "explicit"
    assert resolve(A, None, {**env, "GPUPOOL_TOKEN": "from-env"}).token == "from-env"
