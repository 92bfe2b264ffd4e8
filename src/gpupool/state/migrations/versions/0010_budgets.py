"""budgets: alerts reached per period, the webhook outbox and its delivery log

``budget_alerts`` makes each threshold of a budget alert once per period; ``webhook_outbox``
holds the messages to deliver, written in the same transaction as the alert they tell of;
``webhook_deliveries`` records every try.

Revision ID: 0010
Revises: 0009
Create Date: 2027-03-01 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

from gpupool.state.models import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budget_alerts",
        sa.Column("team", sa.String(length=100), primary_key=True),
        sa.Column("budget", sa.String(length=100), primary_key=True),
        sa.Column("period_start", UTCDateTime(), primary_key=True),
        sa.Column("threshold", sa.Float(), primary_key=True),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("used", sa.Float(), nullable=False),
        sa.Column("limit", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(length=10), nullable=False),
    )
    op.create_table(
        "webhook_outbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("webhook", sa.String(length=100), nullable=False),
        sa.Column("event", sa.String(length=50), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("next_try_at", UTCDateTime(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
    )
    op.create_index("ix_webhook_outbox_due", "webhook_outbox", ["status", "next_try_at"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("message_id", sa.Integer(), nullable=False),
        sa.Column("webhook", sa.String(length=100), nullable=False),
        sa.Column("event", sa.String(length=50), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=500), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
    )
    op.create_index("ix_webhook_deliveries_at", "webhook_deliveries", ["at"])
    op.create_index(op.f("ix_webhook_deliveries_message_id"), "webhook_deliveries", ["message_id"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_outbox")
    op.drop_table("budget_alerts")
