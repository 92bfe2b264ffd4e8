"""Artifact use cases: read and write files of a team's local storage through signed URLs.

The URL is the credential (see ``gpupool.data.grants.local``): no bearer token is needed, and
none is accepted in its place. Invariants:

* the path is canonical (``gpupool.data.paths``) before anything else happens, so ``..`` and
  absolute paths never reach the file system;
* the signature, method, scope and expiry are checked before the team root is even looked up;
* the file resolved on disk lies inside the team's root after symlinks are followed, so a
  link planted in the tree cannot lead a signed URL out of it;
* a write lands whole or not at all (temporary file, then rename).

Errors never repeat the URL's signature.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from gpupool.controller.clock import Clock
from gpupool.core.errors import Forbidden, InvalidRequest, NotFound
from gpupool.data.grants.local import GrantDenied, Signer
from gpupool.data.paths import PathProblem, canonical
from gpupool.data.roots import LocalRoot, RootProblem, team_root
from gpupool.spec.models import ClusterConfig


class ArtifactService:
    def __init__(
        self,
        signer: Signer,
        config: Callable[[], ClusterConfig],
        home: Path,
        clock: Clock,
    ) -> None:
        self._signer = signer
        self._config = config
        self._home = home
        self._clock = clock

    def _authorize(self, method: str, team: str, raw: str, params: Mapping[str, str]) -> Path:
        """The file ``raw`` names in ``team``'s root, if the URL allows ``method`` on it."""
        try:
            path = canonical(raw)
        except PathProblem as exc:
            raise InvalidRequest(
                f"invalid path: {exc}", [{"field": "path", "message": str(exc)}]
            ) from None
        try:
            self._signer.check(method, team, path, params, self._clock.now())
        except GrantDenied as exc:
            raise Forbidden(str(exc)) from None
        config = self._config()
        if team not in config.teams:
            raise NotFound(f"no team named {team!r}")
        try:
            root = team_root(config.storage, team, self._home)
        except RootProblem as exc:
            raise NotFound(f"team {team} has no usable storage root: {exc}") from None
        if not isinstance(root, LocalRoot):
            raise NotFound(
                f"team {team}'s storage is not local; its jobs get URLs of the storage service"
            )
        base = root.path.resolve()
        target = base / path
        real = target.parent.resolve() / target.name
        if real.is_symlink():
            real = real.resolve()
        if not real.is_relative_to(base):
            raise Forbidden(f"path {path} leads outside team {team}'s storage")
        return real

    def read(self, team: str, raw: str, params: Mapping[str, str]) -> Path:
        file = self._authorize("GET", team, raw, params)
        if file.is_dir():
            raise NotFound(f"{raw} is a directory; GET a file below it (same query string)")
        if not file.is_file():
            raise NotFound(f"no file {raw} in team {team}'s storage")
        return file

    async def write(
        self, team: str, raw: str, params: Mapping[str, str], body: AsyncIterator[bytes]
    ) -> int:
        """Store the request body at the path; returns its size in bytes."""
        file = self._authorize("PUT", team, raw, params)
        if file.is_dir():
            raise InvalidRequest(
                f"{raw} is a directory", [{"field": "path", "message": "name a file"}]
            )
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".part")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in body:
                    out.write(chunk)
                    size += len(chunk)
            os.replace(tmp, file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size
