"""Group membership from a directory file (T1): SCIM-style sync without a SCIM server.

The file (``GPUPOOL_DIRECTORY_FILE``) is a YAML or JSON mapping of identity-provider group
to the users in it, e.g. an export of the company directory refreshed by a cron job::

    TeamA: [alice, dave]
    TeamB: [bob]

The file may also give users their POSIX identity, so that a group member who is not under
``users:`` in the configuration can run jobs (``auth.posix``). Groups then go under
``groups:``::

    groups:
      TeamA: [alice, dave]
    users:
      dave: {uid: 10010, gid: 10010, groups: [30001]}

Teams name the groups that grant membership (``teams.<team>.groups`` in the cluster
configuration), and ``platform_admin_groups`` the groups whose members are platform admins.
The file is re-read whenever its modification time or size changes, and memberships are
computed on every request, so adding a user to a group grants access at their next request
and removing them revokes it, API tokens they already hold included.

Fail closed: a file that is missing or unreadable grants no group membership at all
(explicit ``members:`` entries of the configuration still apply) and the problem is logged;
so does a file with one bad identity (it names the user and the field).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpupool.auth.posix import PosixId, PosixIdError, parse

log = logging.getLogger(__name__)


class Directory:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._entries = Entries()
        self._loaded = False

    def groups_of(self, user: str) -> frozenset[str]:
        return self._current().groups_of.get(user, frozenset())

    def identity_of(self, user: str) -> PosixId | None:
        return self._current().identities.get(user)

    def _current(self) -> Entries:
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        with self._lock:
            if stamp != self._stamp or not self._loaded:
                self._entries = self._load() if stamp is not None else Entries()
                if stamp is None:  # logged once per disappearance, not per request
                    log.error("directory file %s is missing: no group grants access", self._path)
                self._stamp, self._loaded = stamp, True
            return self._entries

    def _load(self) -> Entries:
        try:
            data = yaml.safe_load(self._path.read_text(encoding="utf-8"))
            return read_entries(data)
        except (OSError, yaml.YAMLError, ValueError) as exc:
            log.error("directory file %s is unusable, no group grants access: %s", self._path, exc)
            return Entries()


@dataclass(frozen=True)
class Entries:
    groups_of: dict[str, frozenset[str]] = field(default_factory=dict)
    identities: dict[str, PosixId] = field(default_factory=dict)


def read_entries(data: object) -> Entries:
    """Either form of the file: ``{group: [users]}``, or ``{groups: {...}, users: {...}}``
    (told apart by ``groups`` holding a mapping); ``ValueError`` naming what is wrong."""
    if (
        isinstance(data, dict)
        and isinstance(data.get("groups"), dict)
        and set(data)
        <= {
            "groups",
            "users",
        }
    ):
        return Entries(invert(data["groups"]), identities(data.get("users")))
    return Entries(invert(data))


def identities(data: object) -> dict[str, PosixId]:
    """``{user: {uid, gid, groups}}`` as identities (``auth.posix.parse`` rules)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("users: expected a mapping of user name to {uid, gid, groups}")
    found: dict[str, PosixId] = {}
    for user, entry in data.items():
        if not isinstance(entry, dict) or set(entry) - {"uid", "gid", "groups"}:
            raise ValueError(f"users.{user}: expected {{uid, gid, groups}}")
        try:
            found[str(user)] = parse(
                entry.get("uid"), entry.get("gid"), entry.get("groups"), where=f"users.{user}"
            )
        except PosixIdError as exc:
            raise ValueError(str(exc)) from exc
    return found


def invert(data: object) -> dict[str, frozenset[str]]:
    """``{group: [users]}`` → ``{user: groups}``; ``ValueError`` naming what is wrong."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("expected a mapping of group name to a list of users")
    groups_of: dict[str, set[str]] = {}
    for group, users in data.items():
        if users is None:
            continue
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise ValueError(f"group {group!r}: expected a list of user names")
        for user in users:
            groups_of.setdefault(user, set()).add(str(group))
    return {user: frozenset(groups) for user, groups in groups_of.items()}
