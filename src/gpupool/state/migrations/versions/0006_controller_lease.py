"""controller lease and shared secrets: one leading controller among several processes

``controller_lease`` holds a single row (id 1) from the start, unheld (epoch 0, expired), so
electing a leader is always an UPDATE of that row and never a race between INSERTs.
``secrets`` holds what all server processes of one store must agree on (the grant key).

Revision ID: 0006
Revises: 0005
Create Date: 2027-01-20 12:00:00.000000
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NEVER = datetime(1970, 1, 1, tzinfo=UTC)


def upgrade() -> None:
    lease = op.create_table(
        "controller_lease",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(
        lease,
        [
            {
                "id": 1,
                "holder": "",
                "epoch": 0,
                "acquired_at": NEVER,
                "renewed_at": NEVER,
                "expires_at": NEVER,
            }
        ],
    )
    op.create_table(
        "secrets",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("secrets")
    op.drop_table("controller_lease")
