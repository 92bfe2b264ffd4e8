"""The audit trail (T4): one row per mutating request or operator action.

Rows are only ever inserted, never updated or deleted. An entry names the actor (a user, or
``operator:<os user>`` for commands run on the store directly), the API token it used (its
id, never its secret), the action, the target, the team the target belongs to, the time and
the outcome: ``ok`` or the error code the request was answered with.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import datetime

from gpupool.state import audit
from gpupool.state.db import Session
from gpupool.state.models import AuditRow

OK = "ok"
ANONYMOUS = "-"  # a request that never authenticated

# Lengths of the store's columns: longer values are cut rather than failing the write.
_TARGET_MAX = 500
_ACTOR_MAX = 200


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    actor: str
    action: str
    outcome: str
    token_id: str | None = None
    target: str = ""
    team: str | None = None
    status: int | None = None


def record(session: Session, entry: AuditEntry) -> None:
    """Add ``entry`` to ``session``; it is stored when the caller's transaction commits."""
    audit.add(
        session,
        AuditRow(
            at=entry.at,
            actor=entry.actor[:_ACTOR_MAX],
            token_id=entry.token_id[:40] if entry.token_id else None,
            action=entry.action[:100],
            target=entry.target[:_TARGET_MAX],
            team=entry.team[:100] if entry.team else None,
            outcome=entry.outcome[:40],
            status=entry.status,
        ),
    )


def operator_actor() -> str:
    """Who runs an operator command: the OS account, since no API token is involved."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (containers)
        name = "unknown"
    return f"operator:{name}"
