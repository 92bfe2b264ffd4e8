"""Persistence: SQLAlchemy models, Alembic migrations and repositories (DESIGN §9)."""
