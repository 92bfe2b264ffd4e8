"""Secrets shared by every server process of one store (``secrets`` table, migration 0006).

A secret is created once, by whichever process asks first: an INSERT that does nothing when
the name exists, then a read, so concurrent first starts all end up with the same value.
Values are never logged and never leave the server.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpupool.state.models import SecretRow

GRANT_KEY = "grant_key"


def shared_secret(session: Session, name: str, candidate: str, now: datetime) -> str:
    """The stored value of ``name``; ``candidate`` is stored first when there is none."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(
        insert(SecretRow)
        .values(name=name, value=candidate, created_at=now)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    value = session.scalar(select(SecretRow.value).where(SecretRow.name == name))
    if value is None:  # cannot happen after the insert; a clear error if it ever does
        raise RuntimeError(f"secret {name!r} could not be stored")
    return value
