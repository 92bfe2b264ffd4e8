"""Artifact use cases: read and write files of a team's local storage through signed URLs.

The URL is the credential (see ``gpupool.data.grants.local``): no bearer token is needed, and
none is accepted in its place. Invariants:

* the path is canonical (``gpupool.data.paths``) before anything else happens, so ``..`` and
  absolute paths never reach the file system;
* the signature, method, scope, user and expiry are checked before the team root is even
  looked up, and the URL's user must still be in the team (a ``members:`` entry, or a group
  of the team);
* the file is reached from a directory fd of the team root, one component at a time, never
  following a symbolic link, and read or written through those fds
  (:mod:`gpupool.data.safe_fs`): a job that swaps its directories for links while the
  server works gets a refusal, never another file (C1, C2);
* when the server runs as root and the user has a POSIX identity, the server applies that
  user's permissions to what it opened (the uid, primary gid, extra groups and the team's
  gid, as its jobs get them): the member and home rules of ``gpupool.data.paths`` hold on
  disk, not only on the path string, and a link to another member's file leads nowhere
  (H2). Without root the server can only do what its own uid may, like its jobs;
* what a write creates belongs to the job's user (M5): under ``shared/`` directories 2770
  and files 0660 owned ``<uid>:<team gid>`` (every member reads, replaces and deletes
  them), under ``home/<user>/`` directories 0700 and files 0600 owned
  ``<uid>:<user gid>``; owners are set only when the server runs as root;
* a write lands whole or not at all (temporary file, then rename in the same directory).

Errors never repeat the URL's signature.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import anyio.to_thread

from gpupool.auth.posix import PosixId
from gpupool.backends.base import PosixIdentity
from gpupool.controller.clock import Clock
from gpupool.controller.loop import posix_identity
from gpupool.core.errors import Forbidden, InvalidRequest, NotFound
from gpupool.data import safe_fs
from gpupool.data.grants.local import GrantDenied, Signer
from gpupool.data.paths import SHARED, PathProblem, canonical
from gpupool.data.roots import LocalRoot, RootProblem, team_root
from gpupool.data.safe_fs import Identity, NewOwner, OpenedFile
from gpupool.data.storage import SHARED_MODE
from gpupool.spec.models import ClusterConfig

HOME_DIR_MODE, HOME_FILE_MODE = 0o700, 0o600
SHARED_DIR_MODE, SHARED_FILE_MODE = SHARED_MODE, 0o660

GroupsOf = Callable[[str], frozenset[str]]
StoredIdentity = Callable[[str], PosixId | None]

WRITE_CHUNK = 1 << 20  # bytes of a request body gathered per write to the file


class ArtifactService:
    def __init__(
        self,
        signer: Signer,
        config: Callable[[], ClusterConfig],
        home: Path,
        clock: Clock,
        *,
        groups_of: GroupsOf | None = None,
        unverified_groups: bool = False,
        as_root: bool | None = None,
        stored_identity: StoredIdentity | None = None,
    ) -> None:
        """``groups_of``: a user's identity-provider groups as known now (the directory
        file); ``unverified_groups``: group members may also come from a token's claim
        (OIDC), which cannot be read again without the user's token. ``as_root``: apply
        the job user's permissions and owners (default: whether this process is root).
        ``stored_identity``: the POSIX identity a user not under ``users:`` last submitted
        with (``state.identities``)."""
        self._signer = signer
        self._config = config
        self._home = home
        self._clock = clock
        self._groups_of = groups_of
        self._unverified_groups = unverified_groups
        self._as_root = os.geteuid() == 0 if as_root is None else as_root
        self._stored_identity = stored_identity

    def _authorize(
        self, method: str, team: str, raw: str, params: Mapping[str, str]
    ) -> tuple[Path, list[str], str, ClusterConfig]:
        """The team root, path components and user, if the URL allows ``method`` on ``raw``."""
        try:
            path = canonical(raw)
        except PathProblem as exc:
            raise InvalidRequest(
                f"invalid path: {exc}", [{"field": "path", "message": str(exc)}]
            ) from None
        try:
            user = self._signer.check(method, team, path, params, self._clock.now())
        except GrantDenied as exc:
            raise Forbidden(str(exc)) from None
        config = self._config()
        if team not in config.teams:
            raise NotFound(f"no team named {team!r}")
        if not self._in_team(config, user, team):
            raise Forbidden(
                f"user {user!r} is no longer in team {team}: this URL is void; a new attempt "
                "of a member gets new URLs"
            )
        try:
            root = team_root(config.storage, team, self._home)
        except RootProblem as exc:
            raise NotFound(f"team {team} has no usable storage root: {exc}") from None
        if not isinstance(root, LocalRoot):
            raise NotFound(
                f"team {team}'s storage is not local; its jobs get URLs of the storage service"
            )
        return root.path, path.split("/"), user, config

    def _in_team(self, config: ClusterConfig, user: str, team: str) -> bool:
        spec = config.teams[team]
        if user in spec.members:
            return True
        if not spec.groups:
            return False
        if self._groups_of is not None and not self._groups_of(user).isdisjoint(spec.groups):
            return True
        return self._unverified_groups

    def _identity(self, config: ClusterConfig, user: str, team: str) -> Identity | None:
        if not self._as_root:
            return None
        posix = self._posix(config, user, team)
        if posix is None:
            # Fail closed: without a uid to check as, the server (root) could do what no
            # job can, e.g. read another member's home (the user left users: after the URL
            # was made, and is still in the team through a group).
            raise Forbidden(
                f"user {user!r} has no POSIX identity (uid, gid): this URL is void; an "
                "operator must add them under users:, or to the directory file"
            )
        return Identity(posix.uid, posix.gid, frozenset(posix.groups))

    def read(self, team: str, raw: str, params: Mapping[str, str]) -> OpenedFile:
        """The file, opened; the caller streams it and closes it."""
        root, parts, user, config = self._authorize("GET", team, raw, params)
        try:
            return safe_fs.open_read(root, parts, self._identity(config, user, team))
        except safe_fs.NotAFile as exc:
            if exc.directory:
                raise NotFound(
                    f"{raw} is a directory; GET a file below it (same query string)"
                ) from None
            raise NotFound(f"{exc}; only regular files are served") from None
        except safe_fs.Missing as exc:
            raise NotFound(f"{exc} in team {team}'s storage") from None
        except safe_fs.Refused as exc:  # a link, or the user's permissions
            raise Forbidden(str(exc)) from None

    async def write(
        self, team: str, raw: str, params: Mapping[str, str], body: AsyncIterator[bytes]
    ) -> int:
        """Store the request body at the path; returns its size in bytes.

        Every file system call runs on a worker thread, never on the event loop (a slow or
        stalled disk must not stall every other request): the body is gathered into writes of
        ``WRITE_CHUNK`` bytes."""
        root, parts, user, config = self._authorize("PUT", team, raw, params)
        who = self._identity(config, user, team)
        new = self._new_owner(config, user, team, parts)
        try:
            pending = await anyio.to_thread.run_sync(safe_fs.begin_write, root, parts, who, new)
        except safe_fs.NotAFile:
            raise InvalidRequest(
                f"{raw} is a directory", [{"field": "path", "message": "name a file"}]
            ) from None
        except safe_fs.Missing as exc:
            raise NotFound(f"{exc} in team {team}'s storage") from None
        except safe_fs.Refused as exc:
            raise Forbidden(str(exc)) from None
        try:
            gathered = bytearray()
            async for chunk in body:
                gathered += chunk
                if len(gathered) >= WRITE_CHUNK:
                    await anyio.to_thread.run_sync(pending.write, bytes(gathered))
                    gathered.clear()
            if gathered:
                await anyio.to_thread.run_sync(pending.write, bytes(gathered))
            # fsync and rename; not abandoned if the request is cancelled.
            await anyio.to_thread.run_sync(pending.commit)
        except BaseException:
            pending.abort()
            raise
        return pending.size

    def _posix(self, config: ClusterConfig, user: str, team: str) -> PosixIdentity | None:
        stored = None
        if user not in config.users and self._stored_identity is not None:
            stored = self._stored_identity(user)
        return posix_identity(config, user, team, stored)

    def _new_owner(self, config: ClusterConfig, user: str, team: str, parts: list[str]) -> NewOwner:
        """Owner and modes of what a write of ``user`` creates (module docstring)."""
        posix = self._posix(config, user, team) if self._as_root else None
        uid = posix.uid if posix is not None else None
        team_gid = config.teams[team].gid
        if parts[0] == SHARED and team_gid is not None:
            return NewOwner(uid, team_gid, SHARED_DIR_MODE, SHARED_FILE_MODE)
        gid = posix.gid if posix is not None else None
        return NewOwner(uid, gid, HOME_DIR_MODE, HOME_FILE_MODE)
