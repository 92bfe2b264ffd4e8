"""usage days: the hourly usage rollups summed per UTC day, for reports over long periods

Existing hours are summed into days here, so a store upgraded with history reports the same.

Revision ID: 0013
Revises: 0012
Create Date: 2027-03-05 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

from gpupool.state.models import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

KEY = ("team", "user", "gpu_type", "pool", "priority_class", "node_type")


def upgrade() -> None:
    op.create_table(
        "usage_days",
        sa.Column("day", UTCDateTime(), primary_key=True),
        sa.Column("team", sa.String(length=100), primary_key=True),
        sa.Column("user", sa.String(length=100), primary_key=True),
        sa.Column("gpu_type", sa.String(length=100), primary_key=True),
        sa.Column("pool", sa.String(length=100), primary_key=True),
        sa.Column("priority_class", sa.String(length=100), primary_key=True),
        sa.Column("node_type", sa.String(length=20), primary_key=True),
        sa.Column("gpu_ms", sa.BigInteger(), nullable=False),
        sa.Column("borrowed_gpu_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index(
        "ix_usage_days_report",
        "usage_days",
        ["team", "gpu_type", "pool", "node_type", "day", "gpu_ms", "borrowed_gpu_ms"],
    )
    _backfill()


def _backfill() -> None:
    """Sum the stored hours per day, in Python (the day of a stored time is read the same
    way on both stores), a page of hours at a time."""
    bind = op.get_bind()
    meta = sa.MetaData()
    hours = sa.Table("usage_hours", meta, autoload_with=bind)
    days = sa.Table(
        "usage_days",
        meta,
        sa.Column("day", UTCDateTime()),
        *(sa.Column(name, sa.String()) for name in KEY),
        sa.Column("gpu_ms", sa.BigInteger()),
        sa.Column("borrowed_gpu_ms", sa.BigInteger()),
        extend_existing=True,
    )
    hour_type = UTCDateTime()
    sums: dict[tuple[object, ...], list[int]] = {}
    query = sa.select(
        hours.c.hour, *(hours.c[n] for n in KEY), hours.c.gpu_ms, hours.c.borrowed_gpu_ms
    )
    for row in bind.execute(query.execution_options(stream_results=True)):
        hour = hour_type.process_result_value(row[0], bind.dialect)
        assert hour is not None
        day = hour.replace(hour=0, minute=0, second=0, microsecond=0)
        added = sums.setdefault((day, *row[1 : 1 + len(KEY)]), [0, 0])
        added[0] += int(row[-2])
        added[1] += int(row[-1])
    rows = [
        {"day": key[0], **dict(zip(KEY, key[1:], strict=True)), "gpu_ms": ms, "borrowed_gpu_ms": b}
        for key, (ms, b) in sums.items()
    ]
    for start in range(0, len(rows), 5000):
        bind.execute(days.insert(), rows[start : start + 5000])


def downgrade() -> None:
    op.drop_index("ix_usage_days_report", table_name="usage_days")
    op.drop_table("usage_days")
