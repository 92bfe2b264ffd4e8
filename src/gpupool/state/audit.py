"""The audit trail's rows (T4): inserted, never updated or deleted; read newest first.

Like every repository in ``state/``, functions take the caller's session and leave the commit
to it, so an entry lands in the same transaction as the action it records.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from gpupool.state.models import AuditRow

_AUDIT = cast(Table, AuditRow.__table__)


def add(session: Session, row: AuditRow) -> None:
    """Insert ``row``'s values now, in the session's transaction (a plain INSERT: entries are
    never read back or changed in the transaction that writes them)."""
    values = {c.key: row.__dict__[c.key] for c in _AUDIT.columns if c.key in row.__dict__}
    session.connection().execute(_AUDIT.insert(), values)


def page(
    session: Session,
    *,
    limit: int,
    teams_in: Iterable[str] | None = None,
    team: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before_id: int | None = None,
) -> list[AuditRow]:
    """At most ``limit`` entries, newest first, matching every filter given: ``teams_in``
    (the entry's team is one of these; entries without a team never match), ``since``
    (inclusive), ``until`` (exclusive), ``before_id`` (the last id of the previous page)."""
    query = select(AuditRow)
    if teams_in is not None:
        query = query.where(AuditRow.team.in_(list(teams_in)))
    if team is not None:
        query = query.where(AuditRow.team == team)
    if actor is not None:
        query = query.where(AuditRow.actor == actor)
    if action is not None:
        query = query.where(AuditRow.action == action)
    if outcome is not None:
        query = query.where(AuditRow.outcome == outcome)
    if since is not None:
        query = query.where(AuditRow.at >= since)
    if until is not None:
        query = query.where(AuditRow.at < until)
    if before_id is not None:
        query = query.where(AuditRow.id < before_id)
    return list(session.scalars(query.order_by(AuditRow.id.desc()).limit(limit)))
