"""config versions: numbered, with who applied each and a summary of the change

Replaces ``config_revisions`` (kept rows become versions 1..n in their order). The version
number is the primary key and is chosen by the writer (current + 1), so two applies based on
the same version cannot both be stored: the second one's insert collides.

Revision ID: 0005
Revises: 0004
Create Date: 2027-02-01 12:00:00.000000
"""

import hashlib

import sqlalchemy as sa
from alembic import op

import gpupool.state.models

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "config_versions",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("applied_at", gpupool.state.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("applied_by", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=500), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("summary", sa.String(length=500), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    revisions = sa.table(
        "config_revisions",
        sa.column("id", sa.Integer()),
        sa.column("applied_at", gpupool.state.models.UTCDateTime(timezone=True)),
        sa.column("source", sa.String()),
        sa.column("text", sa.Text()),
    )
    rows = op.get_bind().execute(sa.select(revisions).order_by(revisions.c.id)).all()
    if rows:
        versions = sa.table(
            "config_versions",
            sa.column("version", sa.Integer()),
            sa.column("applied_at", gpupool.state.models.UTCDateTime(timezone=True)),
            sa.column("applied_by", sa.String()),
            sa.column("source", sa.String()),
            sa.column("digest", sa.String()),
            sa.column("summary", sa.String()),
            sa.column("text", sa.Text()),
        )
        op.bulk_insert(
            versions,
            [
                {
                    "version": number,
                    "applied_at": row.applied_at,
                    # Revisions did not record who applied them; the audit log may say.
                    "applied_by": "unknown",
                    "source": row.source,
                    "digest": hashlib.sha256(row.text.encode()).hexdigest(),
                    "summary": "from a server --config file (before versions were kept)",
                    "text": row.text,
                }
                for number, row in enumerate(rows, start=1)
            ],
        )
    op.drop_table("config_revisions")


def downgrade() -> None:
    op.create_table(
        "config_revisions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("applied_at", gpupool.state.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(length=500), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.execute(
        "INSERT INTO config_revisions (applied_at, source, text) "
        "SELECT applied_at, source, text FROM config_versions ORDER BY version"
    )
    op.drop_table("config_versions")
