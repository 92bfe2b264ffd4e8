"""Storage root URIs: each team's root, and the messages for URIs that cannot work."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpupool.data.roots import (
    AzureRoot,
    LocalRoot,
    RootProblem,
    S3Root,
    TeamRoot,
    parse_root,
    team_root,
)
from gpupool.spec.checks import check_storage
from gpupool.spec.models import ClusterConfig, Storage, Team

HOME = Path("/var/lib/gpupool")


@dataclass(frozen=True)
class Case:
    storage: Storage
    team: str
    root: TeamRoot


CASES = [
    pytest.param(
        Case(Storage(), "team-a", LocalRoot(HOME / "storage" / "team-a")),
        id="default: local under GPUPOOL_HOME",
    ),
    pytest.param(
        Case(Storage(root="/srv/data"), "team-a", LocalRoot(Path("/srv/data/team-a"))),
        id="local directory",
    ),
    pytest.param(
        Case(Storage(root="az://acct1"), "team-a", AzureRoot("acct1", "team-a")),
        id="azure: a container per team",
    ),
    pytest.param(
        Case(Storage(root="s3://bkt/teams/"), "team-a", S3Root("bkt", "teams/team-a/")),
        id="s3: a prefix per team",
    ),
    pytest.param(
        Case(Storage(root="s3://bkt"), "team-a", S3Root("bkt", "team-a/")),
        id="s3 bucket without prefix",
    ),
    pytest.param(
        Case(
            Storage(root="az://acct1", teams={"team-a": "az://acct2/vault"}),
            "team-a",
            AzureRoot("acct2", "vault"),
        ),
        id="a team's own root wins",
    ),
    pytest.param(
        Case(Storage(teams={"team-a": "s3://bkt/a-data"}), "team-a", S3Root("bkt", "a-data/")),
        id="per-team s3 root",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_team_root(case: Case) -> None:
    assert team_root(case.storage, case.team, HOME) == case.root


@dataclass(frozen=True)
class Bad:
    uri: str
    team: str | None
    message: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Bad("az://Acct", "team-a", "invalid storage account"), id="bad account"),
        pytest.param(
            Bad("az://acct1/c1", "team-a", "put az://<account>/<container> under storage.teams"),
            id="container in a shared azure root",
        ),
        pytest.param(Bad("az://acct1", "ab", "invalid container name 'ab'"), id="short team"),
        pytest.param(Bad("az://acct1/a--b", None, "invalid container name"), id="double dash"),
        pytest.param(Bad("s3://B_kt/x", "team-a", "invalid bucket name"), id="bad bucket"),
        pytest.param(Bad("gs://bkt", "team-a", "unknown storage scheme"), id="unknown scheme"),
        pytest.param(Bad(" ", "team-a", "empty storage root"), id="blank"),
    ],
)
def test_bad_roots(case: Bad) -> None:
    with pytest.raises(RootProblem) as info:
        parse_root(case.uri, case.team)
    assert case.message in str(info.value)


@dataclass(frozen=True)
class Check:
    storage: Storage
    findings: list[tuple[tuple[object, ...], str]] = field(default_factory=list)
    teams: tuple[str, ...] = ("team-a", "team-b")


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Check(Storage(root="az://acct1")), id="valid azure root"),
        pytest.param(
            Check(
                Storage(root="az://acct1"),
                [(("storage", "root"), "team ab: invalid container name 'ab'")],
                teams=("team-a", "ab"),
            ),
            id="a team name that is no container name",
        ),
        pytest.param(
            Check(
                Storage(root="gs://x"),
                [(("storage", "root"), "team team-a: unknown storage scheme")],
            ),
            id="bad shared root",
        ),
        pytest.param(
            Check(
                Storage(teams={"nobody": "/srv/x", "team-a": "az://acct1"}),
                [
                    (("storage", "teams", "nobody"), "unknown team 'nobody'"),
                    (("storage", "teams", "team-a"), "invalid container name ''"),
                ],
            ),
            id="per-team roots",
        ),
    ],
)
def test_check_storage(case: Check) -> None:
    config = ClusterConfig(
        gpu_types={"t4": {}},  # type: ignore[dict-item]
        teams={t: Team() for t in case.teams},
        storage=case.storage,
    )
    found = [(tuple(f.loc), f.message) for f in check_storage(config)]
    assert len(found) == len(case.findings)
    for (path, message), (want_path, want) in zip(found, case.findings, strict=True):
        assert path == want_path
        assert want in message
