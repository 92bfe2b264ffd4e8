"""Local grants: what a signed URL allows, what it refuses and why; the key's file."""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from gpupool.backends.base import JobSpec, contract_env
from gpupool.data.grants.base import ENV_NAMES, scope_for
from gpupool.data.grants.local import GrantDenied, LocalMinter, Signer, signing_key

NOW = datetime(2030, 1, 1, tzinfo=UTC)
KEY = b"k" * 32
SCOPE = "shared/datasets/x"


def params(
    method: str = "GET", scope: str = SCOPE, expires: int | None = None, user: str = "alice"
) -> dict[str, str]:
    at = int((NOW + timedelta(hours=1)).timestamp()) if expires is None else expires
    query = Signer(KEY).query(method, "team-a", user, scope, at)  # type: ignore[arg-type]
    return dict(parse_qsl(query))


@dataclass(frozen=True)
class Case:
    method: str = "GET"
    path: str = SCOPE
    team: str = "team-a"
    params: dict[str, str] = field(default_factory=params)
    edit: dict[str, str] = field(default_factory=dict)
    key: bytes = KEY
    denied: str = ""  # "": allowed


CASES = [
    pytest.param(Case(), id="GET of the input itself"),
    pytest.param(Case(path=SCOPE + "/part-0.csv"), id="GET below a directory input"),
    pytest.param(Case(method="PUT", params=params("PUT"), path=SCOPE + "/a"), id="PUT below"),
    pytest.param(Case(method="PUT", denied="allows GET only"), id="PUT with a read URL"),
    pytest.param(
        Case(method="GET", params=params("PUT"), path=SCOPE + "/a", denied="allows PUT only"),
        id="GET with a write URL",
    ),
    pytest.param(
        Case(method="PUT", params=params("PUT"), denied="outside this URL's scope"),
        id="PUT of the prefix itself",
    ),
    pytest.param(Case(path="shared/datasets/y", denied="outside"), id="another path"),
    pytest.param(Case(path="shared/datasets/xy", denied="outside"), id="a sibling prefix"),
    pytest.param(Case(team="team-b", denied="signature does not match"), id="another team"),
    pytest.param(
        Case(edit={"gp_scope": "shared"}, path="shared/y", denied="signature does not match"),
        id="widened scope",
    ),
    pytest.param(
        Case(edit={"gp_exp": "4102444800"}, denied="signature does not match"),
        id="extended expiry",
    ),
    pytest.param(
        Case(edit={"gp_m": "PUT"}, method="PUT", path=SCOPE + "/a", denied="does not match"),
        id="method swapped",
    ),
    pytest.param(Case(key=b"o" * 32, denied="signature does not match"), id="other key"),
    pytest.param(
        Case(params=params(expires=int(NOW.timestamp())), denied="expired at 2030-01-01"),
        id="expired",
    ),
    pytest.param(
        Case(params={}, denied="missing gp_m, gp_scope, gp_user, gp_exp, gp_sig"), id="unsigned"
    ),
    pytest.param(
        Case(edit={"gp_user": "carol"}, denied="signature does not match"),
        id="made out to another user",
    ),
    pytest.param(
        Case(
            params={k: v for k, v in params().items() if k != "gp_user"}, denied="missing gp_user"
        ),
        id="a URL without a user (signature version 1)",
    ),
    pytest.param(
        Case(
            params=params(user='eve"\n,"x'), edit={"gp_user": 'eve",\n"x'}, denied="does not match"
        ),
        id="a user name that tries to shift the signed fields",
    ),
    pytest.param(Case(edit={"gp_exp": "soon"}, denied="not a number"), id="garbled expiry"),
]


@pytest.mark.parametrize("case", CASES)
def test_signed_url_rules(case: Case) -> None:
    query = {**case.params, **case.edit}
    check = Signer(case.key).check
    if not case.denied:
        assert check(case.method, case.team, case.path, query, NOW) == query["gp_user"]
        return
    with pytest.raises(GrantDenied) as info:
        check(case.method, case.team, case.path, query, NOW)
    assert case.denied in str(info.value)
    if query.get("gp_sig"):
        assert query["gp_sig"] not in str(info.value)


def test_minted_urls_cover_inputs_and_each_attempt_prefix() -> None:
    scope = scope_for(
        team="team-a",
        user="alice",
        job_id="j-1",
        attempt=2,
        inputs=["shared/in"],
        outputs=["home/alice/ckpt"],
        now=NOW,
        max_runtime_s=3600,
        default_runtime_s=86400,
        margin_s=600,
    )
    grant = LocalMinter(Signer(KEY), "http://api:8080/").mint(scope, ["home/alice/ckpt"])
    read = urlsplit(grant.inputs["shared/in"])
    assert read.path == "/v1/artifacts/team-a/shared/in"
    query = dict(parse_qsl(read.query))
    assert query["gp_m"] == "GET"
    assert int(query["gp_exp"]) == int((NOW + timedelta(seconds=4200)).timestamp())
    write = urlsplit(grant.outputs["home/alice/ckpt"].url)
    assert write.path == "/v1/artifacts/team-a/home/alice/ckpt/attempt-2"
    assert query["gp_user"] == "alice"
    assert (
        Signer(KEY).check(
            "PUT", "team-a", "home/alice/ckpt/attempt-2/model.pt", dict(parse_qsl(write.query)), NOW
        )
        == "alice"
    )
    assert "gp_sig" not in repr(grant)
    assert grant.summary() == {
        "kind": "local",
        "reads": ["shared/in"],
        "writes": ["home/alice/ckpt/attempt-2"],
        "expires_at": "2030-01-01T01:10:00+00:00",
    }


def test_key_file_is_made_once_and_private(tmp_path: Path) -> None:
    first = signing_key(tmp_path / "home")
    assert len(first) == 32
    assert signing_key(tmp_path / "home") == first
    mode = stat.S_IMODE((tmp_path / "home" / "grant.key").stat().st_mode)
    assert mode == 0o600


def test_configured_key_wins_and_must_be_long(tmp_path: Path) -> None:
    assert signing_key(tmp_path, "x" * 40) == b"x" * 40
    assert not (tmp_path / "grant.key").exists()
    with pytest.raises(ValueError, match="GPUPOOL_GRANT_KEY is too short"):
        signing_key(tmp_path, "short")


def test_the_job_gets_the_grant_as_contract_variables_only() -> None:
    scope = scope_for(
        team="team-a",
        user="alice",
        job_id="j-1",
        attempt=1,
        inputs=["shared/in"],
        outputs=["shared/out", "home/alice/logs"],
        now=NOW,
        max_runtime_s=None,
        default_runtime_s=3600,
        margin_s=0,
    )
    grant = LocalMinter(Signer(KEY), "http://api").mint(scope, ["shared/out", "home/alice/logs"])
    spec = JobSpec("j-1", 1, "team-a", "alice", ("true",), "p", "t4", 1, grant=grant)
    env = contract_env(spec, "/w", "/i", "/o")
    assert set(ENV_NAMES) <= set(env)
    assert env["GPUPOOL_GRANT_KIND"] == "local"
    assert env["GPUPOOL_GRANT_EXPIRES_AT"] == "2030-01-01T01:00:00+00:00"
    assert json.loads(env["GPUPOOL_INPUT_URLS"]) == dict(grant.inputs)
    outputs = json.loads(env["GPUPOOL_OUTPUT_URLS"])
    assert list(outputs) == ["home/alice/logs", "shared/out"]
    assert outputs["shared/out"]["method"] == "PUT"
    assert env["GPUPOOL_OUTPUT_URL"] == grant.outputs["shared/out"].url  # the first declared
    assert "gp_sig" not in repr(spec)
    assert "GPUPOOL_INPUT_URLS" not in contract_env(
        JobSpec("j-1", 1, "team-a", "alice", ("true",), "p", "t4", 1), "/w", "/i", "/o"
    )
