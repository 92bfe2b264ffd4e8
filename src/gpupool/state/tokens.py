"""API token rows: only a SHA-256 of each token's secret is stored (``auth/tokens.py`` mints
and checks them). The caller's session carries the transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpupool.state.models import TokenRow


def add(session: Session, row: TokenRow) -> None:
    session.add(row)


def get(session: Session, token_id: str) -> TokenRow | None:
    return session.get(TokenRow, token_id)


def any_exist(session: Session) -> bool:
    """Whether any token was ever created (revoked and expired ones count)."""
    return session.scalar(select(TokenRow.id).limit(1)) is not None


def count_active(session: Session, user: str, now: datetime) -> int:
    """The user's tokens that are neither revoked nor expired at ``now``."""
    query = (
        select(func.count())
        .select_from(TokenRow)
        .where(
            TokenRow.user == user,
            TokenRow.revoked_at.is_(None),
            or_(TokenRow.expires_at.is_(None), TokenRow.expires_at > now),
        )
    )
    return int(session.scalar(query) or 0)


def listed(session: Session, user: str | None, limit: int) -> list[TokenRow]:
    """``user``'s tokens (None: everyone's), newest first, at most ``limit``."""
    query = select(TokenRow).order_by(TokenRow.created_at.desc(), TokenRow.id).limit(limit)
    if user is not None:
        query = query.where(TokenRow.user == user)
    return list(session.scalars(query))
