"""audit log

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09 10:12:41.201934
"""

import sqlalchemy as sa
from alembic import op

import gpupool.state.models

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", gpupool.state.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("token_id", sa.String(length=40), nullable=True),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("target", sa.String(length=500), nullable=False),
        sa.Column("team", sa.String(length=100), nullable=True),
        sa.Column("outcome", sa.String(length=40), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_at", "audit", ["at"], unique=False)
    op.create_index("ix_audit_team_at", "audit", ["team", "at"], unique=False)
    op.create_index("ix_audit_actor_at", "audit", ["actor", "at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_audit_actor_at", table_name="audit")
    op.drop_index("ix_audit_team_at", table_name="audit")
    op.drop_index("ix_audit_at", table_name="audit")
    op.drop_table("audit")
