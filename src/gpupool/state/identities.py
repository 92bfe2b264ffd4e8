"""POSIX identities of users not under ``users:`` (``posix_identities``, migration 0012).

The API remembers the identity a user submitted with (``auth.posix``: from the directory
file or the token); the controller and the data service read it back. One row per user, the
latest identity; the caller's session carries the transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpupool.auth.posix import PosixId
from gpupool.state.models import PosixIdentityRow


def remember(session: Session, user: str, posix: PosixId, source: str, now: datetime) -> None:
    """Store ``posix`` as ``user``'s identity (replacing the one stored before)."""
    values = {
        "user": user,
        "uid": posix.uid,
        "gid": posix.gid,
        "groups": list(posix.groups),
        "source": source,
        "updated_at": now,
    }
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    statement = insert(PosixIdentityRow).values(**values)
    changes = {k: statement.excluded[k] for k in ("uid", "gid", "groups", "source", "updated_at")}
    session.execute(statement.on_conflict_do_update(index_elements=["user"], set_=changes))


def lookup(session: Session, user: str) -> PosixId | None:
    row = session.scalar(select(PosixIdentityRow).where(PosixIdentityRow.user == user))
    if row is None:
        return None
    return PosixId(row.uid, row.gid, tuple(row.groups))
