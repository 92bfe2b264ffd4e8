"""Membership sync from a directory file (T1): group changes apply at the next request,
to API tokens already issued too; explicit members win; a broken file grants nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpupool.auth.tokens import create_token
from support.apikit import Api, make_api


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "directory.yaml"


@pytest.fixture
def api(tmp_path: Path, demo_path: Path, directory: Path) -> Iterator[Api]:
    write(directory, {"TeamA": ["dave"]})
    built = make_api(tmp_path / "home", demo_path, directory_file=directory)
    with built.runtime.sessions.begin() as session:
        # dave is in no team's members: only the directory says who he is.
        built.tokens["dave"] = create_token(session, "dave", built.runtime.clock.now()).secret
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def write(path: Path, groups: dict[str, list[str]] | str) -> None:
    path.write_text(groups if isinstance(groups, str) else yaml.safe_dump(groups))
    # A second write within the file system's timestamp granularity must still be seen.
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


@dataclass
class Step:
    groups: dict[str, list[str]] | str  # the directory file at this step
    user: str
    method: str
    path: str  # {job} is a job of alice (team-a)
    want_status: int


CASES = [
    pytest.param(
        [Step({"TeamA": ["dave"]}, "dave", "GET", "/v1/jobs/{job}", 200)],
        id="group member reads the team's job",
    ),
    pytest.param(
        [Step({"TeamA": ["dave"]}, "dave", "POST", "/v1/jobs/{job}/cancel", 200)],
        id="group membership is the member role",
    ),
    pytest.param(
        [
            Step({"TeamA": ["dave"]}, "dave", "GET", "/v1/teams/team-a", 200),
            Step({"TeamA": [], "TeamB": ["dave"]}, "dave", "GET", "/v1/teams/team-a", 403),
            Step({"TeamA": [], "TeamB": ["dave"]}, "dave", "GET", "/v1/teams/team-b", 200),
        ],
        id="removal revokes at the next request with the same token",
    ),
    pytest.param(
        [
            Step({"TeamA": ["dave"]}, "bob", "GET", "/v1/jobs/{job}", 403),
            Step({"TeamA": ["dave", "bob"]}, "bob", "GET", "/v1/jobs/{job}", 200),
        ],
        id="adding a user to a mapped group grants access at once",
    ),
    pytest.param(
        [Step({"TeamA": ["dave"]}, "dave", "POST", "/v1/jobs", 403)],
        id="a group member without a POSIX identity may not submit",
    ),
    pytest.param(
        [Step({"TeamA": ["vera"]}, "vera", "POST", "/v1/jobs/{job}/cancel", 403)],
        id="an explicit viewer entry wins over group membership",
    ),
    pytest.param(
        [Step("TeamA: [dave", "dave", "GET", "/v1/jobs", 401)],
        id="a broken file grants nothing",
    ),
    pytest.param(
        [
            Step({"TeamA": ["dave"]}, "dave", "GET", "/v1/jobs", 200),
            Step({"TeamA": []}, "dave", "GET", "/v1/jobs", 401),
        ],
        id="a user in no group and not configured loses the token he holds",
    ),
    pytest.param(
        [Step({"TeamB": ["alice"]}, "alice", "GET", "/v1/jobs/{job}", 200)],
        id="explicit members keep access whatever the directory says",
    ),
]


@pytest.mark.parametrize("steps", CASES)
def test_membership_follows_the_directory(api: Api, directory: Path, steps: list[Step]) -> None:
    job = api.submit("alice")["id"]
    for step in steps:
        write(directory, step.groups)
        path = step.path.format(job=job)
        body = {"command": ["true"], "team": "team-a"} if path == "/v1/jobs" else None
        response = api.client.request(step.method, path, json=body, headers=api.as_(step.user))
        assert response.status_code == step.want_status, (step, response.text)


def test_whoami_shows_group_roles(api: Api) -> None:
    me = api.client.get("/v1/whoami", headers=api.as_("dave")).json()
    assert me == {
        "user": "dave",
        "platform_admin": False,
        "auditor": False,
        "teams": {"team-a": "member"},
    }


def test_a_group_member_with_an_identity_in_the_directory_submits(
    api: Api, directory: Path
) -> None:
    """No YAML edit: the directory gives dave a team (by group) and a uid, he submits, and
    the controller will run the job as that uid with the team's gid."""
    from gpupool.controller.loop import posix_identity
    from gpupool.state import identities

    body = {"command": ["true"], "team": "team-a"}
    write(directory, "groups: {TeamA: [dave]}\nusers: {dave: {uid: 10010, gid: 10010}}\n")
    created = api.client.post("/v1/jobs", json=body, headers=api.as_("dave"))
    assert created.status_code == 201, created.text
    config = api.runtime.current_config()
    with api.runtime.sessions() as session:
        stored = identities.lookup(session, "dave")
    posix = posix_identity(config, "dave", "team-a", stored)
    assert posix is not None and (posix.uid, posix.gid) == (10010, 10010)
    assert config.teams["team-a"].gid in posix.groups
    # Without the identity again, the next submit is refused, naming where one can come from.
    write(directory, {"TeamA": ["dave"]})
    refused = api.client.post("/v1/jobs", json=body, headers=api.as_("dave"))
    assert refused.status_code == 403
    assert "directory file" in refused.json()["error"]["message"]


def test_platform_admins_by_group(tmp_path: Path, demo_path: Path, directory: Path) -> None:
    config = yaml.safe_load(demo_path.read_text())
    config["platform_admin_groups"] = ["gpu-admins"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    write(directory, {"gpu-admins": ["erin"]})
    built = make_api(tmp_path / "home", path, directory_file=directory)
    try:
        with built.runtime.sessions.begin() as session:
            built.tokens["erin"] = create_token(session, "erin", built.runtime.clock.now()).secret
        me = built.client.get("/v1/whoami", headers=built.as_("erin")).json()
        assert me["platform_admin"] is True
        audit = built.client.get("/v1/audit", headers=built.as_("erin"))
        assert audit.status_code == 200
        write(directory, {"gpu-admins": [], "TeamA": ["erin"]})
        assert built.client.get("/v1/audit", headers=built.as_("erin")).status_code == 403
    finally:
        built.client.close()
        built.runtime.close()
