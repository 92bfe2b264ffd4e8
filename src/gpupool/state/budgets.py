"""Budgets in the store (C3): usage in a window, alerts reached, the webhook outbox and log.

Like every repository in ``state/``, functions take the caller's session and leave the commit
to it, so an alert, its audit entry and its webhook messages land in one transaction.

Usage in ``[start, end)`` is what the ledger's hourly rollups (``usage_hours``) hold for the
hours that start in it, plus, for attempts still running, the time after their
``accrued_until`` that no rollup holds yet (``gpus x (min(now, end) - max(accrued_until,
start))``). So a budget sees running work up to ``now``, not up to the last accrual.

Outbox invariants: a message is ``pending`` until a try delivers it (``delivered``) or its
tries are used up (``failed``); every try adds one ``webhook_deliveries`` row. Only the
delivery worker of the leading controller's process sends, so a message is not sent twice at
once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpupool.state.db import rows_changed
from gpupool.state.models import (
    BudgetAlertRow,
    UsageHourRow,
    UsageRow,
    WebhookDeliveryRow,
    WebhookOutboxRow,
)

UsageKey = tuple[str, str, str, str]  # team, gpu type, pool, node type
PENDING, DELIVERED, FAILED, RETRY = "pending", "delivered", "failed", "retry"
_ERROR_MAX = 500
_MS = timedelta(milliseconds=1)


def gpu_ms(session: Session, start: datetime, end: datetime, now: datetime) -> dict[UsageKey, int]:
    """GPU-milliseconds per (team, gpu type, pool, node type) used in ``[start, end)``, up to
    ``now`` (see the module docstring)."""
    hours = session.execute(
        select(
            UsageHourRow.team,
            UsageHourRow.gpu_type,
            UsageHourRow.pool,
            UsageHourRow.node_type,
            func.sum(UsageHourRow.gpu_ms),
        )
        .where(UsageHourRow.hour >= start, UsageHourRow.hour < end)
        .group_by(
            UsageHourRow.team, UsageHourRow.gpu_type, UsageHourRow.pool, UsageHourRow.node_type
        )
    ).all()
    used: dict[UsageKey, int] = {}
    for team, gpu_type, pool, node_type, total in hours:
        used[(team, gpu_type, pool, node_type)] = int(total or 0)
    until = min(now, end)
    running = session.execute(
        select(
            UsageRow.team,
            UsageRow.gpu_type,
            UsageRow.pool,
            UsageRow.node_type,
            UsageRow.gpus,
            UsageRow.accrued_until,
        ).where(UsageRow.ended_at.is_(None), UsageRow.accrued_until < until)
    ).all()
    for team, gpu_type, pool, node_type, gpus, accrued_until in running:
        since = max(accrued_until, start)
        if since >= until:
            continue
        key = (team, gpu_type, pool, node_type)
        ms = (until - since) // _MS
        used[key] = used.get(key, 0) + gpus * int(ms)
    return used


# -- alerts ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Alert:
    """A threshold a budget reached in a period (one ``budget_alerts`` row)."""

    team: str
    budget: str
    period_start: datetime
    threshold: float
    used: float
    limit: float
    unit: str


def alerted(session: Session, team: str, budget: str, period_start: datetime) -> set[float]:
    """The thresholds of ``budget`` already alerted in the period that starts at
    ``period_start``."""
    rows = session.scalars(
        select(BudgetAlertRow.threshold).where(
            BudgetAlertRow.team == team,
            BudgetAlertRow.budget == budget,
            BudgetAlertRow.period_start == period_start,
        )
    )
    return set(rows)


def record_alert(session: Session, alert: Alert, at: datetime) -> None:
    """Insert the alert; a second insert of the same threshold and period fails on the key."""
    session.add(
        BudgetAlertRow(
            team=alert.team,
            budget=alert.budget,
            period_start=alert.period_start,
            threshold=alert.threshold,
            at=at,
            used=alert.used,
            limit=alert.limit,
            unit=alert.unit,
        )
    )


# -- the outbox ------------------------------------------------------------------------------


def enqueue(session: Session, webhook: str, event: str, body: str, at: datetime) -> None:
    """Queue ``body`` (the exact text to sign and send) for ``webhook``, due at once."""
    session.add(
        WebhookOutboxRow(
            webhook=webhook,
            event=event,
            body=body,
            created_at=at,
            next_try_at=at,
            tries=0,
            status=PENDING,
        )
    )


def due(session: Session, now: datetime, limit: int = 50) -> Sequence[WebhookOutboxRow]:
    """Pending messages whose next try is due, oldest first."""
    return session.scalars(
        select(WebhookOutboxRow)
        .where(WebhookOutboxRow.status == PENDING, WebhookOutboxRow.next_try_at <= now)
        .order_by(WebhookOutboxRow.next_try_at, WebhookOutboxRow.id)
        .limit(limit)
    ).all()


def next_due(session: Session) -> datetime | None:
    """When the earliest pending message is due (None: nothing pending)."""
    return session.scalar(
        select(func.min(WebhookOutboxRow.next_try_at)).where(WebhookOutboxRow.status == PENDING)
    )


@dataclass(frozen=True, slots=True)
class Try:
    """The outcome of one delivery try; ``outcome`` is DELIVERED, RETRY or FAILED."""

    outcome: str
    at: datetime
    status_code: int | None
    error: str
    duration_ms: float
    next_try_at: datetime | None = None  # with RETRY


def record_try(session: Session, message_id: int, attempt: Try) -> None:
    """Log the try and move the message on: delivered, due again later, or failed."""
    row = session.get(WebhookOutboxRow, message_id)
    if row is None:
        return
    row.tries += 1
    if attempt.outcome == RETRY:
        assert attempt.next_try_at is not None
        row.next_try_at = attempt.next_try_at
    else:
        row.status = attempt.outcome
    session.add(
        WebhookDeliveryRow(
            message_id=message_id,
            webhook=row.webhook,
            event=row.event,
            try_number=row.tries,
            at=attempt.at,
            outcome=attempt.outcome,
            status_code=attempt.status_code,
            error=attempt.error[:_ERROR_MAX],
            duration_ms=attempt.duration_ms,
        )
    )


def deliveries(
    session: Session, *, limit: int, webhook: str | None = None, before_id: int | None = None
) -> list[WebhookDeliveryRow]:
    """The delivery log, newest first."""
    query = select(WebhookDeliveryRow)
    if webhook is not None:
        query = query.where(WebhookDeliveryRow.webhook == webhook)
    if before_id is not None:
        query = query.where(WebhookDeliveryRow.id < before_id)
    return list(session.scalars(query.order_by(WebhookDeliveryRow.id.desc()).limit(limit)))


def prune(session: Session, before: datetime) -> int:
    """Forget what ended before ``before``: delivered and failed messages created then, and
    tries made then (pending messages are kept whatever their age); how many rows went."""
    ended = rows_changed(
        session,
        delete(WebhookOutboxRow).where(
            WebhookOutboxRow.status != PENDING, WebhookOutboxRow.created_at < before
        ),
    )
    return ended + rows_changed(
        session, delete(WebhookDeliveryRow).where(WebhookDeliveryRow.at < before)
    )
