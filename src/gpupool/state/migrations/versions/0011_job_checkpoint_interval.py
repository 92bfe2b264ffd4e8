"""job checkpoint interval: how often the job saves its own work (GPUPOOL_CHECKPOINT_INTERVAL_S)

Revision ID: 0011
Revises: 0010
Create Date: 2027-02-01 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Jobs stored before this revision keep NULL: they declared no checkpoints.
    op.add_column("jobs", sa.Column("checkpoint_interval_s", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "checkpoint_interval_s")
