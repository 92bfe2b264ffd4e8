"""Per-team storage on the local file system (D1, docs/architecture.md §8).

Each team has a storage root, by default ``<GPUPOOL_HOME>/storage/<team>`` (the configuration's
``storage`` section may put it elsewhere, see :mod:`gpupool.data.roots`)::

    <root>/            root:<team gid>    0750   members may enter, nobody else
      shared/          root:<team gid>    2770   the team's shared area; setgid, so files
                                                 made in it belong to the team's group
      home/            root:<team gid>    0750
        <user>/        <uid>:<user gid>   0700   one member's home; nobody else's

Invariants:

* Ownership and modes are applied only when gpupool runs as root (it cannot ``chown``
  otherwise); without root the same tree is made with the same modes, owned by gpupool's user.
* Only the directories above are touched, never their contents: a home that already holds a
  user's files keeps them, ownership of the files included (a uid change in the configuration
  re-owns the home directory, not what is in it).
* Every directory touched sits in a directory that only root can change (the root, ``home/``),
  and symlinks are refused: a member cannot redirect a ``chown`` to a path of their choosing.
* A user removed from a team keeps their home (data is never deleted by a configuration
  change) but loses the team group, and with it the way in.
* The directories above a configured root are the operator's: they must let members
  traverse (``x``); only the default ``<GPUPOOL_HOME>/storage`` is made 0711 here.
* A team without a ``gid`` gets a root that members can only traverse (0711) to their own
  homes; its ``shared/`` is then root's alone (0700) until the team is given a gid.

What jobs write below this tree through local grants belongs to the job's user, with the
modes of the area it lies in (``shared/``: 2770 directories and 0660 files, group the team's;
``home/<user>/``: 0700 and 0600): see :mod:`gpupool.server.services.artifacts`.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.spec.models import ClusterConfig

log = logging.getLogger(__name__)

STORAGE_DIR = "storage"
SHARED = "shared"
HOMES = "home"

# Team and user names become directory names: one path component, no dot-dot, no hidden file.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")

ROOT_MODE = 0o750
ROOT_MODE_NO_GID = 0o711
SHARED_MODE = 0o2770
SHARED_MODE_NO_GID = 0o700
HOMES_MODE = 0o750
HOME_MODE = 0o700


@dataclass(frozen=True, slots=True)
class Owner:
    uid: int
    gid: int


def default_base(home: Path) -> Path:
    """Where team roots live unless the configuration says otherwise."""
    return home / STORAGE_DIR


def _component(name: str, what: str) -> str:
    if not _SAFE_NAME.match(name):
        raise ValueError(
            f"{what} name {name!r} cannot be a directory name: use letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return name


def team_root(base: Path, team: str) -> Path:
    return base / _component(team, "team")


def shared_dir(root: Path) -> Path:
    return root / SHARED


def home_dir(root: Path, user: str) -> Path:
    return root / HOMES / _component(user, "user")


def ensure_layout(
    root: Path,
    *,
    team_gid: int | None,
    homes: Mapping[str, Owner],
    as_root: bool | None = None,
) -> None:
    """Create or repair one team's tree (see the module docstring); idempotent.

    ``homes`` maps each member to the owner of their home. ``as_root`` defaults to whether
    this process is root; only then are owners applied.
    """
    chown = os.geteuid() == 0 if as_root is None else as_root
    team = Owner(0, team_gid) if team_gid is not None else Owner(0, 0)
    with_gid = team_gid is not None
    root.parent.mkdir(parents=True, exist_ok=True)
    _ensure_dir(root, team, ROOT_MODE if with_gid else ROOT_MODE_NO_GID, chown)
    _ensure_dir(shared_dir(root), team, SHARED_MODE if with_gid else SHARED_MODE_NO_GID, chown)
    _ensure_dir(root / HOMES, team, HOMES_MODE if with_gid else ROOT_MODE_NO_GID, chown)
    for user, owner in sorted(homes.items()):
        _ensure_dir(home_dir(root, user), owner, HOME_MODE, chown)


def _ensure_dir(path: Path, owner: Owner, mode: int, chown: bool) -> None:
    try:
        os.mkdir(path, 0o700)  # tight until owner and mode are set below
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError(
                f"{path} exists and is not a directory (a symlink or a file); move it away "
                "so that gpupool can create the storage directory there"
            ) from None
    if chown:
        os.chown(path, owner.uid, owner.gid, follow_symlinks=False)
    # chmod after chown: chown clears the setgid bit.
    os.chmod(path, mode)


def team_homes(config: ClusterConfig, team: str) -> dict[str, Owner]:
    """The owners of a team's homes: its configured members that have a POSIX identity."""
    members = config.teams[team].members
    return {
        user: Owner(config.users[user].uid, config.users[user].gid)
        for user in members
        if user in config.users
    }


def ensure_team_layouts(config: ClusterConfig, home: Path, as_root: bool | None = None) -> None:
    """:func:`ensure_layout` for every team of ``config`` whose root is a local directory
    (``storage.root``/``storage.teams``, default under ``home``); blob and S3 roots have no
    directories to make."""
    # Imported here: roots builds on this module's default_base.
    from gpupool.data.roots import LocalRoot
    from gpupool.data.roots import team_root as configured_root

    base = default_base(home)
    for name, team in sorted(config.teams.items()):
        where = configured_root(config.storage, name, home)
        if not isinstance(where, LocalRoot):
            continue
        if where.path.parent == base:
            base.mkdir(parents=True, exist_ok=True)
            # Members must traverse to their team's root, but may not list the teams.
            os.chmod(base, 0o711)
        if team.gid is None:
            log.info(
                "team %s has no gid: its shared storage is not accessible to its members "
                "(set teams.%s.gid)",
                name,
                name,
            )
        ensure_layout(
            where.path, team_gid=team.gid, homes=team_homes(config, name), as_root=as_root
        )
