"""job container: the image a job runs in, with its pull secret's name, mounts and settings

Revision ID: 0014
Revises: 0013
Create Date: 2027-04-01 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Jobs stored before this revision keep NULL: they run their command on the node.
    op.add_column("jobs", sa.Column("container", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "container")
