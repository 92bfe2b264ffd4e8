"""Which schema revision a store is at, and the rule a starting server applies to it.

Migrations change tables that running processes use, so they are an operator's step
(``gpupool db upgrade``, after a backup), never a side effect of starting a server:

* a **fresh** store (no ``alembic_version`` and none of gpupool's tables) is created at the
  newest revision at start: nothing can be lost, and ``make run`` keeps working on a new home;
* a store **at the newest revision** is used as is;
* a store at an **older** revision is refused with a message naming ``gpupool db upgrade``;
* a store at a revision this gpupool does not know (written by a newer release), or with
  gpupool's tables but no revision, is refused too: running on it could corrupt it.

Reading the revision never writes, so ``gpupool doctor`` can use it on a live store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

from gpupool.core.errors import ConfigInvalid
from gpupool.state.db import alembic_config, upgrade
from gpupool.state.models import Base

UPGRADE_COMMAND = "gpupool db upgrade"


class SchemaVerdict(StrEnum):
    FRESH = "fresh"  # nothing there yet: created at start
    CURRENT = "current"
    OLDER = "older"  # gpupool db upgrade brings it to the newest revision
    UNKNOWN = "unknown"  # a revision this release does not know (a newer release wrote it)
    UNVERSIONED = "unversioned"  # gpupool's tables without a revision: not made by migrations


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    verdict: SchemaVerdict
    revision: str | None  # what the store is at (None: no revision recorded)
    head: str  # what this release's migrations end at

    @property
    def message(self) -> str:
        """One sentence for people: where the store stands and what to do."""
        at = f"revision {self.revision}" if self.revision else "no revision"
        match self.verdict:
            case SchemaVerdict.FRESH:
                return f"empty store: it is created at revision {self.head} on start"
            case SchemaVerdict.CURRENT:
                return f"schema current (revision {self.head})"
            case SchemaVerdict.OLDER:
                return (
                    f"the store is at {at}, this gpupool needs revision {self.head}: stop the "
                    f"servers, back the store up, then run `{UPGRADE_COMMAND}` "
                    "(docs/deployment.md, Upgrades)"
                )
            case SchemaVerdict.UNKNOWN:
                return (
                    f"the store is at {at}, which this gpupool does not know (its newest is "
                    f"{self.head}): a newer gpupool wrote it; run that release, or restore a "
                    "backup taken before its upgrade"
                )
        return (
            "the database has gpupool's tables but no schema revision (alembic_version): "
            "it was not made by gpupool's migrations; point GPUPOOL_DATABASE_URL at a gpupool "
            "store or an empty database"
        )


class SchemaNotCurrent(ConfigInvalid):
    """The store's schema is not the one this release runs on; the message says what to do.

    A ``ConfigInvalid``: like a bad configuration, the operator must act before a start."""


def head_revision(engine: Engine) -> str:
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    assert head is not None, "the migrations directory has no revisions"
    return head


def schema_status(engine: Engine) -> SchemaStatus:
    """Where the store stands against this release's migrations (reads only)."""
    script = ScriptDirectory.from_config(alembic_config(engine))
    head = script.get_current_head()
    assert head is not None, "the migrations directory has no revisions"
    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
        tables = set(inspect(connection).get_table_names())
    if revision is None:
        ours = tables & set(Base.metadata.tables)
        verdict = SchemaVerdict.UNVERSIONED if ours else SchemaVerdict.FRESH
    elif revision == head:
        verdict = SchemaVerdict.CURRENT
    elif revision in {r.revision for r in script.walk_revisions()}:
        verdict = SchemaVerdict.OLDER
    else:
        verdict = SchemaVerdict.UNKNOWN
    return SchemaStatus(verdict, revision, head)


def ensure_schema(engine: Engine) -> SchemaStatus:
    """Create a fresh store; accept a current one; raise :class:`SchemaNotCurrent` otherwise."""
    status = schema_status(engine)
    if status.verdict is SchemaVerdict.FRESH:
        upgrade(engine)
        return SchemaStatus(SchemaVerdict.CURRENT, status.head, status.head)
    if status.verdict is not SchemaVerdict.CURRENT:
        raise SchemaNotCurrent(status.message)
    return status


def upgrade_store(engine: Engine) -> tuple[SchemaStatus, SchemaStatus]:
    """``gpupool db upgrade``: migrate to the newest revision; (before, after).

    A store at an unknown or missing revision is refused, as at start: Alembic cannot
    migrate from a revision it does not have."""
    before = schema_status(engine)
    if before.verdict in (SchemaVerdict.UNKNOWN, SchemaVerdict.UNVERSIONED):
        raise SchemaNotCurrent(before.message)
    if before.verdict is not SchemaVerdict.CURRENT:
        upgrade(engine)
    return before, schema_status(engine)
