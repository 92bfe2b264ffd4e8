"""job arrays: the array a job belongs to and its index there

Jobs stored before this revision are not in an array (both columns NULL).

Revision ID: 0007
Revises: 0006
Create Date: 2027-01-25 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("array_id", sa.String(length=40), nullable=True))
    op.add_column("jobs", sa.Column("array_index", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_array", "jobs", ["array_id", "array_index"])


def downgrade() -> None:
    op.drop_index("ix_jobs_array", table_name="jobs")
    op.drop_column("jobs", "array_index")
    op.drop_column("jobs", "array_id")
