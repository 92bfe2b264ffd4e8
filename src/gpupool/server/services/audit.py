"""Reading the audit trail: who may see which entries, filters and cursor paging.

Platform admins see every entry. A team admin sees the entries whose team is one they
administer (mutations of that team's jobs, whoever made them); entries without a team
(a request refused before its team was known, operator actions) are for platform admins
only. Anyone else is refused. Pages are newest first; the cursor is the last id seen, and
ids only grow, so paging is stable while new entries arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gpupool.auth.principal import Principal
from gpupool.core.errors import Forbidden
from gpupool.server.cursors import decode_audit_cursor, encode_audit_cursor
from gpupool.server.schemas import AuditOut, AuditPage
from gpupool.spec.models import ClusterConfig
from gpupool.state.models import AuditRow

MAX_PAGE = 500


@dataclass(frozen=True)
class AuditFilter:
    team: str | None = None
    actor: str | None = None
    action: str | None = None
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None


class AuditService:
    def __init__(
        self, sessions: sessionmaker[Session], config: Callable[[], ClusterConfig]
    ) -> None:
        self._sessions = sessions
        self._config = config

    def list(
        self, principal: Principal, where: AuditFilter, limit: int, cursor: str | None
    ) -> AuditPage:
        query = select(AuditRow)
        if not principal.platform_admin:
            administered = sorted(t for t, role in principal.roles.items() if role == "admin")
            if not administered:
                raise Forbidden(
                    f"user {principal.user!r} may not read the audit trail: it is for "
                    "platform admins and team admins"
                )
            if where.team is not None and where.team not in administered:
                raise Forbidden(
                    f"user {principal.user!r} may not read the audit trail of team {where.team!r}"
                )
            query = query.where(AuditRow.team.in_(administered))
        if where.team is not None:
            query = query.where(AuditRow.team == where.team)
        if where.actor is not None:
            query = query.where(AuditRow.actor == where.actor)
        if where.action is not None:
            query = query.where(AuditRow.action == where.action)
        if where.outcome is not None:
            query = query.where(AuditRow.outcome == where.outcome)
        if where.since is not None:
            query = query.where(AuditRow.at >= _aware(where.since))
        if where.until is not None:
            query = query.where(AuditRow.at < _aware(where.until))
        if cursor is not None:
            query = query.where(AuditRow.id < decode_audit_cursor(cursor))
        limit = max(1, min(limit, MAX_PAGE))
        with self._sessions() as session:
            rows = list(session.scalars(query.order_by(AuditRow.id.desc()).limit(limit + 1)))
        more = len(rows) > limit
        rows = rows[:limit]
        return AuditPage(
            items=[_out(r) for r in rows],
            next_cursor=encode_audit_cursor(rows[-1].id) if more else None,
        )


def _aware(at: datetime) -> datetime:
    # A time without a zone is read as UTC, the zone every stored time is in.
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _out(row: AuditRow) -> AuditOut:
    return AuditOut(
        id=row.id,
        at=row.at,
        actor=row.actor,
        token_id=row.token_id,
        action=row.action,
        target=row.target,
        team=row.team,
        outcome=row.outcome,
        status=row.status,
    )
