"""Team storage layout: paths, modes, owners, idempotence and refusal of odd entries."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.data.storage import (
    Owner,
    default_base,
    ensure_layout,
    ensure_team_layouts,
    home_dir,
    shared_dir,
    team_root,
)
from gpupool.spec.load import parse_config

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root: run tests as root")

CONFIG = """
gpu_types: {t4: {}}
users:
  alice: {uid: 7101, gid: 7101}
  bob: {uid: 7102, gid: 7102}
teams:
  team-a: {gid: 7200, members: {alice: admin, bob: member}}
  team-b: {members: {bob: member}}
"""


def describe(path: Path) -> tuple[int, int, str]:
    info = os.lstat(path)
    return info.st_uid, info.st_gid, oct(stat.S_IMODE(info.st_mode))


@dataclass(frozen=True)
class Case:
    relative: str
    owner: tuple[int, int]
    mode: str


LAYOUT = [
    pytest.param(Case("team-a", (0, 7200), "0o750"), id="team root: members enter"),
    pytest.param(Case("team-a/shared", (0, 7200), "0o2770"), id="shared: setgid team group"),
    pytest.param(Case("team-a/home", (0, 7200), "0o750"), id="home parent"),
    pytest.param(Case("team-a/home/alice", (7101, 7101), "0o700"), id="alice's home is hers"),
    pytest.param(Case("team-a/home/bob", (7102, 7102), "0o700"), id="bob's home is his"),
    pytest.param(Case("team-b", (0, 0), "0o711"), id="team without gid: traverse only"),
    pytest.param(Case("team-b/shared", (0, 0), "0o700"), id="team without gid: shared root-only"),
    pytest.param(Case("team-b/home/bob", (7102, 7102), "0o700"), id="home in a team without gid"),
]


@needs_root
@pytest.mark.parametrize("case", LAYOUT)
def test_layout_as_root(tmp_path: Path, case: Case) -> None:
    base = default_base(tmp_path)
    config = parse_config(CONFIG, "test.yaml")
    ensure_team_layouts(config, tmp_path)
    ensure_team_layouts(config, tmp_path)  # idempotent
    assert describe(base)[2] == "0o711"
    assert describe(base / case.relative) == (*case.owner, case.mode)


def test_configured_roots(tmp_path: Path) -> None:
    config = parse_config(
        CONFIG + f"storage: {{root: {tmp_path}/data, teams: {{team-b: 's3://bucket/b'}}}}\n",
        "test.yaml",
    )
    ensure_team_layouts(config, tmp_path / "home", as_root=False)
    assert home_dir(tmp_path / "data" / "team-a", "alice").is_dir()
    assert not (tmp_path / "data" / "team-b").exists()  # an S3 root has no directories
    assert not (tmp_path / "home").exists()


def test_layout_without_root_keeps_modes(tmp_path: Path) -> None:
    root = team_root(tmp_path, "team-a")
    ensure_layout(root, team_gid=7200, homes={"alice": Owner(7101, 7101)}, as_root=False)
    me = (os.geteuid(), os.getegid())
    assert describe(shared_dir(root))[2] == "0o2770"
    assert describe(home_dir(root, "alice")) == (*me, "0o700")


@needs_root
def test_existing_home_is_reowned_but_its_files_are_not(tmp_path: Path) -> None:
    root = team_root(tmp_path, "team-a")
    ensure_layout(root, team_gid=7200, homes={"alice": Owner(7101, 7101)})
    kept = home_dir(root, "alice") / "notes.txt"
    kept.write_text("mine")
    os.chown(kept, 7101, 7101)
    ensure_layout(root, team_gid=7200, homes={"alice": Owner(7111, 7111)})
    assert describe(home_dir(root, "alice"))[:2] == (7111, 7111)
    assert describe(kept)[:2] == (7101, 7101)
    assert kept.read_text() == "mine"


def test_symlink_in_place_of_a_home_is_refused(tmp_path: Path) -> None:
    root = team_root(tmp_path, "team-a")
    ensure_layout(root, team_gid=None, homes={}, as_root=False)
    (root / "home" / "alice").symlink_to("/etc")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        ensure_layout(root, team_gid=None, homes={"alice": Owner(7101, 7101)}, as_root=False)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("..", id="dot-dot"),
        pytest.param("a/b", id="slash"),
        pytest.param(".hidden", id="leading dot"),
        pytest.param("", id="empty"),
    ],
)
def test_names_that_are_not_one_directory_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="cannot be a directory name"):
        home_dir(tmp_path, name)
    with pytest.raises(ValueError, match="cannot be a directory name"):
        team_root(tmp_path, name)


def test_server_start_names_the_storage_problem(tmp_path: Path) -> None:
    from gpupool.config import load_settings
    from gpupool.core.errors import ConfigInvalid
    from gpupool.server.serve import prepare_storage

    blocker = tmp_path / "data"
    blocker.write_text("a file where the storage root should be")
    config = parse_config(CONFIG + f"storage: {{root: {blocker}}}\n", "test.yaml")
    with pytest.raises(ConfigInvalid, match=r"cannot prepare team storage: .*check storage\.root"):
        prepare_storage(config, load_settings({}, home=tmp_path / "home"))
