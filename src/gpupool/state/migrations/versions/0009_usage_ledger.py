"""usage ledger: one row per attempt, hourly rollups, pool capacity per hour, gaps

``usage`` holds each attempt's GPU-milliseconds (within nominal and borrowed) and how it
ended; ``usage_hours`` and ``capacity_hours`` are kept incrementally with it, per UTC hour;
``accounting_gaps`` records the spans when no controller was accruing. Attempts that ended
before this revision are not back-filled: their times were not recorded per hour.

Revision ID: 0009
Revises: 0008
Create Date: 2027-02-20 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

from gpupool.state.models import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("attempt_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("job_name", sa.String(length=200), nullable=False),
        sa.Column("team", sa.String(length=100), nullable=False),
        sa.Column("user", sa.String(length=100), nullable=False),
        sa.Column("gpu_type", sa.String(length=100), nullable=False),
        sa.Column("pool", sa.String(length=100), nullable=False),
        sa.Column("backend", sa.String(length=30), nullable=False),
        sa.Column("priority_class", sa.String(length=100), nullable=False),
        sa.Column("node_type", sa.String(length=20), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("borrowed", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("accrued_until", UTCDateTime(), nullable=False),
        sa.Column("gpu_ms", sa.BigInteger(), nullable=False),
        sa.Column("borrowed_gpu_ms", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=True),
    )
    op.create_index("ix_usage_team_started", "usage", ["team", "started_at"])
    op.create_index("ix_usage_ended", "usage", ["ended_at"])
    op.create_index("ix_usage_job", "usage", ["job_id"])
    op.create_table(
        "usage_hours",
        sa.Column("hour", UTCDateTime(), primary_key=True),
        sa.Column("team", sa.String(length=100), primary_key=True),
        sa.Column("user", sa.String(length=100), primary_key=True),
        sa.Column("gpu_type", sa.String(length=100), primary_key=True),
        sa.Column("pool", sa.String(length=100), primary_key=True),
        sa.Column("priority_class", sa.String(length=100), primary_key=True),
        sa.Column("node_type", sa.String(length=20), primary_key=True),
        sa.Column("gpu_ms", sa.BigInteger(), nullable=False),
        sa.Column("borrowed_gpu_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_usage_hours_team_hour", "usage_hours", ["team", "hour"])
    # Reports: a summary's GROUP BY read in index order from the index alone (SQLite skips
    # through the leading columns to the hour range); the sums' columns ride along.
    op.create_index(
        "ix_usage_hours_report",
        "usage_hours",
        ["team", "gpu_type", "pool", "node_type", "hour", "gpu_ms", "borrowed_gpu_ms"],
    )
    op.create_table(
        "capacity_hours",
        sa.Column("hour", UTCDateTime(), primary_key=True),
        sa.Column("pool", sa.String(length=100), primary_key=True),
        sa.Column("gpu_type", sa.String(length=100), nullable=False),
        sa.Column("node_type", sa.String(length=20), nullable=False),
        sa.Column("gpu_ms", sa.BigInteger(), nullable=False),
    )
    state = op.create_table(
        "accounting_state",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("accrued_until", UTCDateTime(), nullable=True),
    )
    op.bulk_insert(state, [{"id": 1, "accrued_until": None}])
    op.create_table(
        "accounting_gaps",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("end", UTCDateTime(), nullable=False),
        sa.Column("reason", sa.String(length=200), nullable=False),
    )
    op.create_index("ix_accounting_gaps_start", "accounting_gaps", ["start"])


def downgrade() -> None:
    op.drop_table("accounting_gaps")
    op.drop_table("accounting_state")
    op.drop_table("capacity_hours")
    op.drop_table("usage_hours")
    op.drop_table("usage")
