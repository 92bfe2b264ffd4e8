"""BudgetWatch on SQLite and PostgreSQL: thresholds alert once per period, with an audit entry
and a webhook message each; used-up budgets become the blocks the cycle enforces."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import Engine, select

from gpupool.controller.budgets import BudgetWatch
from gpupool.scheduler import BudgetAction, BudgetBlock
from gpupool.spec.models import Accounting, Budget, ClusterConfig, GpuType, Team, Webhook
from gpupool.state.db import session_factory
from gpupool.state.models import AuditRow, BudgetAlertRow, UsageHourRow, WebhookOutboxRow
from support.stores import ManualClock

HOUR_MS = 3_600_000
JUNE = datetime(2027, 6, 10, 12, tzinfo=UTC)


def config(enforcement: str = "hold") -> ClusterConfig:
    budget = Budget(name="monthly", gpu_hours=100, enforcement=enforcement)  # type: ignore[arg-type]
    return ClusterConfig(
        gpu_types={"h100": GpuType()},
        teams={"a": Team(budgets=[budget]), "b": Team()},
        accounting=Accounting(
            webhooks=[
                Webhook(name="ops", url="http://127.0.0.1:9/hook"),
                Webhook(name="chat", url="http://127.0.0.1:9/chat"),
            ]
        ),
    )


def use(engine: Engine, at: datetime, gpu_hours: int, team: str = "a") -> None:
    with session_factory(engine).begin() as session:
        session.add(
            UsageHourRow(
                hour=at.replace(minute=0, second=0, microsecond=0),
                team=team,
                user="u",
                gpu_type="h100",
                pool="p",
                priority_class="training",
                node_type="dedicated",
                gpu_ms=gpu_hours * HOUR_MS,
                borrowed_gpu_ms=0,
            )
        )


def rows(engine: Engine, model: type) -> list:  # type: ignore[type-arg]
    with session_factory(engine)() as session:
        return list(session.scalars(select(model)))


def test_thresholds_alert_once_then_the_used_up_budget_holds_until_the_period_ends(
    store_engine: Engine,
) -> None:
    clock = ManualClock(JUNE)
    watch = BudgetWatch(session_factory(store_engine), clock, every_s=5)
    cfg = config()
    use(store_engine, JUNE, 60)
    assert watch.refresh(cfg) is False  # 60 %: an alert, nothing enforced
    assert [(a.team, a.budget, a.threshold) for a in rows(store_engine, BudgetAlertRow)] == [
        ("a", "monthly", 50.0)
    ]
    (audit,) = rows(store_engine, AuditRow)
    assert (audit.action, audit.team, audit.actor) == ("budget.alert", "a", "gpupool-controller")
    assert "50% reached, 60 GPU-h of 100 GPU-h in June 2027" in audit.target
    messages = rows(store_engine, WebhookOutboxRow)
    assert sorted(m.webhook for m in messages) == ["chat", "ops"]
    body = json.loads(messages[0].body)
    assert (body["event"], body["team"], body["threshold"], body["used"]) == (
        "budget.threshold", "a", 50.0, 60.0
    )  # fmt: skip
    assert body["period"]["label"] == "June 2027" and body["enforced"] is False

    clock.advance(1)
    use(store_engine, JUNE.replace(hour=1), 50)
    assert watch.refresh(cfg) is False  # not due yet: nothing read
    assert len(rows(store_engine, BudgetAlertRow)) == 1

    clock.advance(5)
    assert watch.refresh(cfg) is True  # 110 %: 80 and 100 alert, and the hold begins
    assert sorted(a.threshold for a in rows(store_engine, BudgetAlertRow)) == [50.0, 80.0, 100.0]
    assert len(rows(store_engine, WebhookOutboxRow)) == 6
    assert watch.blocks == (
        BudgetBlock("a", "monthly", BudgetAction.HOLD, None, "110", "100 GPU-h", "June 2027",
                    "July 1"),
    )  # fmt: skip

    clock.advance(5)
    assert watch.refresh(cfg) is False  # the same state: no new alert, the same blocks
    assert len(rows(store_engine, BudgetAlertRow)) == 3

    clock.advance(21 * 24 * 3600)  # July: a new period, nothing used yet
    assert watch.refresh(cfg) is True
    assert watch.blocks == ()
    assert len(rows(store_engine, AuditRow)) == 3


def test_an_alert_only_budget_alerts_but_blocks_nothing(store_engine: Engine) -> None:
    watch = BudgetWatch(session_factory(store_engine), ManualClock(JUNE))
    use(store_engine, JUNE, 150)
    assert watch.refresh(config("alert")) is False
    assert watch.blocks == () and [s.status for s in watch.states] == ["over"]
    assert len(rows(store_engine, BudgetAlertRow)) == 3


def test_raising_the_limit_lifts_the_block(store_engine: Engine) -> None:
    clock = ManualClock(JUNE)
    watch = BudgetWatch(session_factory(store_engine), clock, every_s=5)
    use(store_engine, JUNE, 150)
    assert watch.refresh(config("no-borrow")) is True
    assert [b.action for b in watch.blocks] == [BudgetAction.NO_BORROW]
    raised = config("no-borrow")
    team = raised.teams["a"].model_copy(
        update={"budgets": [raised.teams["a"].budgets[0].model_copy(update={"gpu_hours": 500})]}
    )
    raised = raised.model_copy(update={"teams": {**raised.teams, "a": team}})
    clock.advance(5)
    assert watch.refresh(raised) is True and watch.blocks == ()
