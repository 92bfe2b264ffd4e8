"""Online backups of a SQLite store (``gpupool db backup DEST``).

SQLite's backup API copies the database page by page inside one read transaction: in WAL
mode the server keeps writing meanwhile, and the copy is the store as it was at one instant
(committed transactions only, the WAL's included). Copying the file with ``cp`` instead can
tear a page or miss what is still in ``-wal``.

Invariants: the destination never exists beforehand (an old backup is not overwritten by
accident), is created 0600 (it holds token hashes, environments and the audit log, like the
store), and passes ``PRAGMA quick_check`` before it is reported done; a failed copy is
removed. PostgreSQL stores are backed up with ``pg_dump`` (docs/deployment.md).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from gpupool.core.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class BackupResult:
    source: Path
    dest: Path
    bytes: int


def sqlite_path(database_url: str) -> Path:
    """The file of a SQLite URL; :class:`InvalidRequest` for anything else."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        raise InvalidRequest(
            f"the store is {url.get_backend_name()}, not SQLite: back it up with pg_dump "
            "(docs/deployment.md, Backups)"
        )
    if not url.database or url.database == ":memory:":
        raise InvalidRequest("an in-memory SQLite store has nothing to back up")
    return Path(url.database)


def backup_sqlite(database_url: str, dest: Path) -> BackupResult:
    source = sqlite_path(database_url)
    if not source.exists():
        raise InvalidRequest(f"no store at {source}: check GPUPOOL_HOME or --home")
    try:
        # O_EXCL: never overwrite; 0600 from the first byte on.
        os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        raise InvalidRequest(f"{dest} exists: choose a new file name") from None
    except OSError as exc:
        raise InvalidRequest(f"cannot create {dest}: {exc.strerror}") from None
    try:
        with (
            closing(sqlite3.connect(source, timeout=30)) as src,
            closing(sqlite3.connect(dest)) as out,
        ):
            src.backup(out)  # all pages in one step: one consistent snapshot
            check = out.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise InvalidRequest(f"the copy in {dest} failed its check: {check}")
    except sqlite3.Error as exc:
        dest.unlink(missing_ok=True)
        raise InvalidRequest(f"cannot back up {source}: {exc}") from None
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return BackupResult(source, dest, dest.stat().st_size)
