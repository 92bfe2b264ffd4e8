"""The controller lease's SQL: campaign for it, fence a decision with it, read it.

One row (``controller_lease``, id 1, made by migration 0006) says which controller process
leads and under which ``epoch``. PostgreSQL only: on SQLite one process runs and holds a file
lock instead (``controller.leader.SoleLeader``).

Invariants:

* **The database's clock decides.** Every time compared or written here is the server's
  ``now()`` / ``clock_timestamp()``, never a host's clock, so hosts' clock skew cannot make
  two processes both believe they hold the lease.
* **The epoch grows by one at each change of holder** (never when the holder renews), so a
  decision written under epoch *e* can be refused once anyone else has held the lease.
* **A fenced transaction and a takeover are serialized on the row.** :func:`fence` takes a
  share lock on the row; a takeover is an UPDATE of it and so waits until the fenced
  transaction ends, and a fence that waited on a takeover re-reads the row and fails. Whatever
  a leader wrote under its fence is therefore in the store before its successor's first read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

LEASE_ID = 1


class LeaseLost(Exception):
    """The fence refused: another process holds (or took) the lease, or it expired."""


@dataclass(frozen=True)
class LeaseView:
    """The lease as the database saw it, with ages in the database's own clock."""

    holder: str
    epoch: int
    age_s: float  # since the last renewal
    expires_in_s: float  # negative: expired (nobody leads until a controller takes it)
    held_for_s: float  # since this holder took it


_VIEW = """
    holder, epoch,
    EXTRACT(EPOCH FROM clock_timestamp() - renewed_at) AS age_s,
    EXTRACT(EPOCH FROM expires_at - clock_timestamp()) AS expires_in_s,
    EXTRACT(EPOCH FROM clock_timestamp() - acquired_at) AS held_for_s
"""

# Renew when we hold it under our epoch and it has not expired; take it when it expired
# (a new epoch, unless it is still ours: nobody else held it in between).
_CAMPAIGN = text(
    f"""
    UPDATE controller_lease SET
        epoch = CASE WHEN holder = :me AND epoch = :mine THEN epoch ELSE epoch + 1 END,
        acquired_at = CASE WHEN holder = :me AND epoch = :mine THEN acquired_at ELSE now() END,
        holder = :me,
        renewed_at = now(),
        expires_at = now() + make_interval(secs => :lease_s)
    WHERE id = {LEASE_ID}
      AND ((holder = :me AND epoch = :mine AND expires_at > now()) OR expires_at <= now())
    RETURNING {_VIEW}
    """
)

_READ = text(f"SELECT {_VIEW} FROM controller_lease WHERE id = {LEASE_ID}")

_FENCE = text(
    f"""
    SELECT epoch FROM controller_lease
    WHERE id = {LEASE_ID} AND holder = :me AND epoch = :mine AND expires_at > clock_timestamp()
    FOR SHARE
    """
)

_RELEASE = text(
    f"""
    UPDATE controller_lease SET expires_at = now(), renewed_at = now()
    WHERE id = {LEASE_ID} AND holder = :me AND epoch = :mine
    """
)


def _view(row: Row[Any]) -> LeaseView:
    holder, epoch, age_s, expires_in_s, held_for_s = tuple(row)
    return LeaseView(str(holder), int(epoch), float(age_s), float(expires_in_s), float(held_for_s))


def campaign(session: Session, me: str, mine: int, lease_s: float) -> LeaseView | None:
    """Renew the lease (``me`` holds it under epoch ``mine``) or take it (it expired).

    Returns the lease as now held by ``me`` (its epoch may be new), or None when another
    process holds it; :func:`read` then says who. Run it in its own short transaction."""
    row = session.execute(_CAMPAIGN, {"me": me, "mine": mine, "lease_s": lease_s}).one_or_none()
    return None if row is None else _view(row)


def read(session: Session) -> LeaseView | None:
    """The lease as it stands (None before migration 0006 made its row)."""
    row = session.execute(_READ).one_or_none()
    return None if row is None else _view(row)


def fence(session: Session, me: str, mine: int) -> None:
    """Raise :class:`LeaseLost` unless ``me`` still holds the lease under epoch ``mine``.

    Call it in the transaction that writes a decision, before its writes: the share lock it
    takes keeps a takeover from committing until this transaction ends (module docstring)."""
    if session.execute(_FENCE, {"me": me, "mine": mine}).one_or_none() is None:
        lease = read(session)
        now = "nobody" if lease is None else f"{lease.holder or 'nobody'} (epoch {lease.epoch})"
        raise LeaseLost(f"the controller lease of epoch {mine} is no longer ours; held by {now}")


def release(session: Session, me: str, mine: int) -> None:
    """Let the lease expire now (a clean stop), so a standby takes over without waiting."""
    session.execute(_RELEASE, {"me": me, "mine": mine})
