"""job changes: a commit-ordered log of which jobs each transaction changed

``job_changes`` is a single-row counter; each transaction that changes jobs or attempts takes
its next value just before committing and logs the jobs it changed under that number in
``job_change_log`` (``state.changes``). The controller reads only the jobs logged above the
number it last saw. Nothing is logged for jobs stored before this revision: a controller reads
the whole queue once when it starts anyway.

Revision ID: 0008
Revises: 0007
Create Date: 2027-02-10 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    counter = op.create_table(
        "job_changes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(counter, [{"id": 1, "seq": 0}])
    op.create_table(
        "job_change_log",
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.String(length=40), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("job_change_log")
    op.drop_table("job_changes")
