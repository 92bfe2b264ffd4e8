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

from gpupool.auth.principal import Principal
from gpupool.core.errors import Forbidden
from gpupool.server.cursors import decode_audit_cursor, encode_audit_cursor
from gpupool.server.schemas import AuditOut, AuditPage
from gpupool.spec.models import ClusterConfig
from gpupool.state import audit
from gpupool.state.db import SessionFactory
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
    def __init__(self, sessions: SessionFactory, config: Callable[[], ClusterConfig]) -> None:
        self._sessions = sessions
        self._config = config

    def list(
        self, principal: Principal, where: AuditFilter, limit: int, cursor: str | None
    ) -> AuditPage:
        administered: list[str] | None = None  # None: a platform admin, every entry
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
        limit = max(1, min(limit, MAX_PAGE))
        with self._sessions() as session:
            rows = audit.page(
                session,
                limit=limit + 1,
                teams_in=administered,
                team=where.team,
                actor=where.actor,
                action=where.action,
                outcome=where.outcome,
                since=None if where.since is None else _aware(where.since),
                until=None if where.until is None else _aware(where.until),
                before_id=None if cursor is None else decode_audit_cursor(cursor),
            )
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
