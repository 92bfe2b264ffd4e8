"""The credentials ``gpupool login`` stores: one per server, in the user's config directory.

The file (``credentials.json`` in the directory :func:`gpupool.client.settings.credentials_file`
names) maps a server URL to what signing in to it got: the identity provider's access token,
its refresh token if the provider issued one, when the access token expires, and the issuer
and client that issued them (what a refresh needs).

Invariants:

* The directory is created 0700 and the file 0600, from creation on: the file is opened with
  its mode, never written first and narrowed afterwards, and every write replaces it whole
  (a temporary file beside it, flushed to disk, then renamed), so a reader sees the old or the
  new content and never a mix or a half-written token.
* A credential is found by its server's exact URL only, so a token is never sent to a server
  it was not obtained for.
* Tokens are kept out of ``repr``; nothing here prints or logs them.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpupool.client.errors import Unauthenticated

FORMAT_VERSION = 1
# An access token this close to its expiry is renewed first: it could expire on its way.
EXPIRY_LEEWAY_S = 30.0


@dataclass(frozen=True)
class Credential:
    server_url: str
    issuer: str
    client_id: str
    token_endpoint: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None  # epoch seconds; None when the provider did not say

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at - EXPIRY_LEEWAY_S


def load(path: Path, server_url: str) -> Credential | None:
    """The credential stored for ``server_url``; ``None`` when there is none."""
    entry = _read(path).get(server_url)
    if entry is None:
        return None
    try:
        return Credential(**{**entry, "server_url": server_url})
    except TypeError as exc:
        raise _unreadable(
            path, f"the entry for {server_url} is incomplete or has unknown fields"
        ) from exc


def save(path: Path, credential: Credential) -> None:
    """Store ``credential``, replacing any earlier one for its server."""
    servers = _read(path)
    entry = asdict(credential)
    del entry["server_url"]  # the key
    servers[credential.server_url] = entry
    _write(path, servers)


def remove(path: Path, server_url: str) -> bool:
    """Forget the credential of ``server_url``; the file goes with its last one. Whether
    there was one."""
    servers = _read(path)
    if servers.pop(server_url, None) is None:
        return False
    if servers:
        _write(path, servers)
    else:
        path.unlink(missing_ok=True)
    return True


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise _unreadable(path, "not UTF-8 text") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _unreadable(path, f"not JSON (line {exc.lineno})") from exc
    servers = document.get("servers") if isinstance(document, dict) else None
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise _unreadable(path, 'no "servers" object')
    return servers


def _write(path: Path, servers: dict[str, dict[str, Any]]) -> None:
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)  # gpupool's own directory: narrowed even if made wider before
    text = json.dumps({"version": FORMAT_VERSION, "servers": servers}, indent=2, sort_keys=True)
    # mkstemp creates the file 0600 in the same directory, so the rename below is atomic.
    fd, temporary = tempfile.mkstemp(prefix=".credentials-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _unreadable(path: Path, why: str) -> Unauthenticated:
    return Unauthenticated(
        f"the stored credentials in {path} cannot be read ({why}); delete the file and run "
        "`gpupool login` again"
    )
