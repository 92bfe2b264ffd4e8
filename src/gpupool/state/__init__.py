"""Persistence (docs/architecture.md §9): SQLAlchemy models, Alembic migrations and the
repositories.

All SQL of gpupool lives here. ``db.py`` makes engines and sessions and re-exports the few
types other packages pass around (``Session``, ``SessionFactory``, ``Engine``,
``IntegrityError``), so no package outside ``gpupool.state`` imports SQLAlchemy or Alembic
(tests/unit/test_import_rules.py). Repositories are modules of plain functions per aggregate
(``jobs``, ``queue``, ``tokens``, ``audit``, ...) that take the caller's session and never
commit: the caller's ``SessionFactory.begin()`` is the transaction, so what one decision
writes lands together (the controller writes each cycle's decisions before acting on them).
"""
