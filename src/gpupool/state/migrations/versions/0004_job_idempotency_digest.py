"""job idempotency digest: the request an Idempotency-Key was first used with

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-10 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Jobs stored before this revision keep NULL: their replays cannot be compared.
    op.add_column("jobs", sa.Column("idempotency_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "idempotency_digest")
