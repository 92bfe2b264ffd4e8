"""state.budgets on SQLite and PostgreSQL: usage in a window, alerts once, the outbox, its log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from gpupool.state import budgets as store
from gpupool.state.db import session_factory
from gpupool.state.models import UsageHourRow, UsageRow, WebhookDeliveryRow

T0 = datetime(2027, 6, 1, tzinfo=UTC)
HOUR_MS = 3_600_000


def hour(
    at: datetime, team: str, gpu_ms: int, gpu_type: str = "h100", pool: str = "p"
) -> UsageHourRow:
    return UsageHourRow(
        hour=at,
        team=team,
        user="alice",
        gpu_type=gpu_type,
        pool=pool,
        priority_class="training",
        node_type="dedicated",
        gpu_ms=gpu_ms,
        borrowed_gpu_ms=0,
    )


def attempt(
    attempt_id: int,
    team: str,
    gpus: int,
    started: datetime,
    accrued: datetime,
    ended: datetime | None,
) -> UsageRow:
    return UsageRow(
        attempt_id=attempt_id,
        job_id=f"j-{attempt_id}",
        job_name="",
        team=team,
        user="alice",
        gpu_type="h100",
        pool="p",
        backend="local",
        priority_class="training",
        node_type="dedicated",
        gpus=gpus,
        borrowed=0,
        started_at=started,
        ended_at=ended,
        accrued_until=accrued,
        gpu_ms=0,
        borrowed_gpu_ms=0,
    )


def test_usage_counts_the_window_s_hours_and_the_unaccrued_time_of_running_attempts(
    store_engine: Engine,
) -> None:
    sessions = session_factory(store_engine)
    end = T0 + timedelta(days=30)
    with sessions.begin() as session:
        session.add_all(
            [
                hour(T0 - timedelta(hours=1), "a", 7 * HOUR_MS),  # before the window
                hour(T0, "a", 2 * HOUR_MS),
                hour(T0 + timedelta(hours=5), "a", 1 * HOUR_MS),
                hour(T0 + timedelta(hours=5), "a", 3 * HOUR_MS, gpu_type="t4", pool="q"),
                hour(T0 + timedelta(hours=5), "b", 4 * HOUR_MS),
                hour(end, "a", 9 * HOUR_MS),  # the next window's first hour
                # running: 2 GPUs, accrued up to T0+6h; ended attempts add nothing beyond rollups
                attempt(1, "a", 2, T0, T0 + timedelta(hours=6), None),
                attempt(2, "a", 8, T0, T0 + timedelta(hours=1), T0 + timedelta(hours=1)),
                # running since before the window and never accrued in it: counts from start
                attempt(3, "b", 1, T0 - timedelta(days=2), T0 - timedelta(days=1), None),
            ]
        )
    now = T0 + timedelta(hours=6, minutes=30)
    with sessions() as session:
        used = store.gpu_ms(session, T0, end, now)
    half_hour = HOUR_MS // 2
    assert used == {
        ("a", "h100", "p", "dedicated"): 3 * HOUR_MS + 2 * half_hour,
        ("a", "t4", "q", "dedicated"): 3 * HOUR_MS,
        ("b", "h100", "p", "dedicated"): 4 * HOUR_MS + (6 * HOUR_MS + half_hour),
    }


def test_usage_of_a_running_attempt_stops_at_the_window_s_end(store_engine: Engine) -> None:
    sessions = session_factory(store_engine)
    with sessions.begin() as session:
        session.add(attempt(1, "a", 4, T0, T0, None))
    with sessions() as session:
        used = store.gpu_ms(session, T0, T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    assert used == {("a", "h100", "p", "dedicated"): 4 * HOUR_MS}


def test_an_alert_is_recorded_once_per_budget_period_and_threshold(store_engine: Engine) -> None:
    sessions = session_factory(store_engine)
    alert = store.Alert("a", "monthly", T0, 80.0, 812.0, 1000.0, "GPU-h")
    with sessions.begin() as session:
        store.record_alert(session, alert, T0)
        store.record_alert(
            session, store.Alert("a", "monthly", T0 + timedelta(days=30), 80.0, 1, 2, "GPU-h"), T0
        )
    with sessions() as session:
        assert store.alerted(session, "a", "monthly", T0) == {80.0}
    with pytest.raises(IntegrityError), sessions.begin() as session:
        store.record_alert(session, alert, T0 + timedelta(hours=1))


def test_outbox_tries_move_a_message_to_retry_then_delivered_and_each_is_logged(
    store_engine: Engine,
) -> None:
    sessions = session_factory(store_engine)
    with sessions.begin() as session:
        store.enqueue(session, "ops", "budget.threshold", '{"x":1}', T0)
    with sessions() as session:
        (message,) = store.due(session, T0)
        message_id = message.id
    later = T0 + timedelta(seconds=2)
    with sessions.begin() as session:
        store.record_try(
            session, message_id, store.Try(store.RETRY, T0, 500, "HTTP 500", 3.0, later)
        )
    with sessions() as session:
        assert store.due(session, T0 + timedelta(seconds=1)) == []
        assert store.next_due(session) == later
    with sessions.begin() as session:
        store.record_try(session, message_id, store.Try(store.DELIVERED, later, 204, "", 2.0))
    with sessions() as session:
        assert store.due(session, later + timedelta(days=1)) == []
        assert store.next_due(session) is None
        log = store.deliveries(session, limit=10)
    assert [(d.try_number, d.outcome, d.status_code) for d in log] == [
        (2, "delivered", 204),
        (1, "retry", 500),
    ]
    assert all(isinstance(d, WebhookDeliveryRow) and d.webhook == "ops" for d in log)


def test_prune_forgets_ended_messages_and_old_tries_but_keeps_pending_ones(
    store_engine: Engine,
) -> None:
    sessions = session_factory(store_engine)
    old, recent = T0, T0 + timedelta(days=40)
    with sessions.begin() as session:
        for at in (old, old, recent):
            store.enqueue(session, "ops", "budget.threshold", "{}", at)
    with sessions() as session:
        first, second, third = (m.id for m in store.due(session, recent))
    with sessions.begin() as session:
        store.record_try(session, first, store.Try(store.DELIVERED, old, 204, "", 1.0))
        store.record_try(session, third, store.Try(store.FAILED, recent, 410, "HTTP 410", 1.0))
    with sessions.begin() as session:
        assert store.prune(session, T0 + timedelta(days=30)) == 2  # first and its try
    with sessions() as session:
        assert [m.id for m in store.due(session, recent)] == [second]  # still pending
        assert [(d.message_id, d.outcome) for d in store.deliveries(session, limit=10)] == [
            (third, "failed")
        ]
