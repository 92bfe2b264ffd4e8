"""Group membership from a directory file (T1): SCIM-style sync without a SCIM server.

The file (``GPUPOOL_DIRECTORY_FILE``) is a YAML or JSON mapping of identity-provider group
to the users in it, e.g. an export of the company directory refreshed by a cron job::

    TeamA: [alice, dave]
    TeamB: [bob]

Teams name the groups that grant membership (``teams.<team>.groups`` in the cluster
configuration). The file is re-read whenever its modification time or size changes, and
memberships are computed on every request, so adding a user to a group grants access at
their next request and removing them revokes it, API tokens they already hold included.

Fail closed: a file that is missing or unreadable grants no group membership at all
(explicit ``members:`` entries of the configuration still apply) and the problem is logged.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import yaml

log = logging.getLogger(__name__)


class Directory:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._groups_of: dict[str, frozenset[str]] = {}
        self._loaded = False

    def groups_of(self, user: str) -> frozenset[str]:
        return self._current().get(user, frozenset())

    def _current(self) -> dict[str, frozenset[str]]:
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        with self._lock:
            if stamp != self._stamp or not self._loaded:
                self._groups_of = self._load() if stamp is not None else {}
                if stamp is None:  # logged once per disappearance, not per request
                    log.error("directory file %s is missing: no group grants access", self._path)
                self._stamp, self._loaded = stamp, True
            return self._groups_of

    def _load(self) -> dict[str, frozenset[str]]:
        try:
            data = yaml.safe_load(self._path.read_text(encoding="utf-8"))
            return invert(data)
        except (OSError, yaml.YAMLError, ValueError) as exc:
            log.error("directory file %s is unusable, no group grants access: %s", self._path, exc)
            return {}


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
