"""Where a user's POSIX identity comes from (``auth.posix``): the configuration, the directory
file, the token's claims; and platform admins by group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupool.auth.directory import Directory, read_entries
from gpupool.auth.oidc import OidcValidator
from gpupool.auth.posix import ClaimNames, PosixId, PosixIdError, from_claims, parse
from gpupool.auth.principal import principal_for
from gpupool.config import OidcSettings
from gpupool.spec.models import ClusterConfig, GpuType, Team, User
from unit.auth.test_oidc_validator import AUDIENCE, ISSUER, LocalKeys, signed

NAMES = ClaimNames("uidNumber", "gidNumber", "gidNumbers")


@pytest.mark.parametrize(
    ("uid", "gid", "groups", "want"),
    [
        pytest.param(10010, 10010, None, PosixId(10010, 10010), id="numbers"),
        pytest.param("10010", "20001", "30001 30002", PosixId(10010, 20001, (30001, 30002)),
                     id="digit strings; groups space-separated"),
        pytest.param(10010, 10010, [30001, 30001], PosixId(10010, 10010, (30001,)),
                     id="a group listed twice is kept once"),
    ],
)  # fmt: skip
def test_parse(uid: object, gid: object, groups: object, want: PosixId) -> None:
    assert parse(uid, gid, groups) == want


@pytest.mark.parametrize(
    ("uid", "gid", "groups", "field"),
    [
        pytest.param(0, 10010, None, "uid: 0 is outside", id="root"),
        pytest.param(10010, 100, None, "gid: 100 is outside", id="a system group"),
        pytest.param(10010, 10010, [0], "groups: 0 is outside", id="root's group as an extra"),
        pytest.param(True, 10010, None, "uid: expected a number", id="a boolean"),
        pytest.param("-5", 10010, None, "uid: expected a number", id="a negative string"),
        pytest.param(2**40, 10010, None, "uid: 1099511627776 is outside", id="too large"),
    ],
)
def test_parse_refuses(uid: object, gid: object, groups: object, field: str) -> None:
    with pytest.raises(PosixIdError, match=field):
        parse(uid, gid, groups, where="users.dave")


def test_claims_give_an_identity_only_when_named_and_sound() -> None:
    claims: dict[str, Any] = {"uidNumber": "10010", "gidNumber": 10010, "gidNumbers": [30001]}
    assert from_claims(claims, NAMES) == PosixId(10010, 10010, (30001,))
    assert from_claims(claims, ClaimNames()) is None  # the server reads no identity claims
    assert from_claims({"uidNumber": 10010}, NAMES) is None  # no gid
    assert from_claims({**claims, "uidNumber": 0}, NAMES) is None  # never root from a token


def test_the_validator_reads_the_identity_claims() -> None:
    settings = OidcSettings(
        issuer=ISSUER, audience=AUDIENCE, uid_claim="uidNumber", gid_claim="gidNumber"
    )
    token = signed(uidNumber=10010, gidNumber=10011)
    identity = OidcValidator(settings, keys=LocalKeys()).validate(token)
    assert identity.posix == PosixId(10010, 10011)
    plain = OidcSettings(issuer=ISSUER, audience=AUDIENCE)
    assert OidcValidator(plain, keys=LocalKeys()).validate(token).posix is None


def test_the_directory_file_may_hold_identities(tmp_path: Path) -> None:
    path = tmp_path / "directory.yaml"
    path.write_text(
        "groups:\n  TeamA: [alice, dave]\n"
        "users:\n  dave: {uid: 10010, gid: 10010, groups: [30001]}\n"
    )
    directory = Directory(path)
    assert directory.groups_of("dave") == frozenset({"TeamA"})
    assert directory.identity_of("dave") == PosixId(10010, 10010, (30001,))
    assert directory.identity_of("alice") is None
    # The flat form still works, and a group may be called "groups" in it.
    assert read_entries({"groups": ["carol"]}).groups_of == {"carol": frozenset({"groups"})}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"groups": {}, "users": {"dave": {"uid": 0, "gid": 10010}}},
                     "users.dave.uid: 0 is outside", id="root"),
        pytest.param({"groups": {}, "users": {"dave": {"uid": 10010, "gid": 10010, "home": "/"}}},
                     "users.dave: expected", id="an unknown key"),
        pytest.param({"groups": {}, "users": ["dave"]}, "users: expected a mapping", id="a list"),
    ],
)  # fmt: skip
def test_a_bad_identity_is_named(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_entries(data)


def test_a_bad_directory_file_grants_nothing(tmp_path: Path) -> None:
    path = tmp_path / "directory.yaml"
    path.write_text("groups: {TeamA: [dave]}\nusers: {dave: {uid: 0, gid: 0}}\n")
    directory = Directory(path)
    assert directory.groups_of("dave") == frozenset()  # fail closed: the whole file
    assert directory.identity_of("dave") is None


CONFIG = ClusterConfig(
    gpu_types={"h100": GpuType()},
    teams={"team-a": Team(groups=["TeamA"])},
    users={"alice": User(uid=10001, gid=10001)},
    platform_admin_groups=["gpu-admins"],
)


def test_users_in_the_configuration_win_over_other_sources() -> None:
    other = PosixId(20000, 20000)
    alice = principal_for(CONFIG, "alice", "t", frozenset({"TeamA"}), other, "token")
    assert alice.posix is None and alice.posix_source == ""  # users: decides, at dispatch
    dave = principal_for(CONFIG, "dave", "t", frozenset({"TeamA"}), other, "directory")
    assert (dave.posix, dave.posix_source, dave.roles) == (other, "directory", {"team-a": "member"})


def test_a_member_of_a_platform_admin_group_is_a_platform_admin() -> None:
    assert principal_for(CONFIG, "erin", "t", frozenset({"gpu-admins"})).platform_admin
    assert not principal_for(CONFIG, "erin", "t", frozenset({"TeamA"})).platform_admin


def test_identity_claims_are_named_in_pairs() -> None:
    from gpupool.config import load_oidc
    from gpupool.core.errors import ConfigInvalid

    base = {"GPUPOOL_OIDC_ISSUER": ISSUER, "GPUPOOL_OIDC_AUDIENCE": AUDIENCE}
    settings = load_oidc({**base, "GPUPOOL_OIDC_UID_CLAIM": "uidNumber",
                          "GPUPOOL_OIDC_GID_CLAIM": "gidNumber"})  # fmt: skip
    assert settings is not None and (settings.uid_claim, settings.gid_claim) == (
        "uidNumber",
        "gidNumber",
    )
    with pytest.raises(ConfigInvalid, match="GPUPOOL_OIDC_GID_CLAIM"):
        load_oidc({**base, "GPUPOOL_OIDC_UID_CLAIM": "uidNumber"})
