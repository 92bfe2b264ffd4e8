"""API token rows: only a SHA-256 of each token's secret is stored (``auth/tokens.py`` mints
and checks them). The caller's session carries the transaction."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.state.models import TokenRow


def add(session: Session, row: TokenRow) -> None:
    session.add(row)


def get(session: Session, token_id: str) -> TokenRow | None:
    return session.get(TokenRow, token_id)


def any_exist(session: Session) -> bool:
    """Whether any token was ever created (revoked and expired ones count)."""
    return session.scalar(select(TokenRow.id).limit(1)) is not None
