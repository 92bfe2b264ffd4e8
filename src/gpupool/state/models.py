"""SQLAlchemy 2 models of the store.

The store is the source of truth for jobs, attempts, handles, events and tokens. Teams,
users and pools come from the applied cluster configuration, whose versions are kept in
``config_versions``. Times are stored as timezone-aware UTC (see :class:`UTCDateTime`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from gpupool.data.redaction import redact


class UTCDateTime(TypeDecorator[datetime]):
    """Always returns aware UTC datetimes, also on SQLite (which drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use aware UTC times")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("user", "idempotency_key", name="uq_jobs_user_idempotency_key"),
        Index("ix_jobs_team_submitted", "team", "submitted_at"),
        Index("ix_jobs_status", "status"),
        Index("ix_jobs_array", "array_id", "array_index"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    team: Mapped[str] = mapped_column(String(100))
    user: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    priority_class: Mapped[str] = mapped_column(String(100))
    priority: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    backend: Mapped[str] = mapped_column(String(30))
    command: Mapped[list[Any]] = mapped_column(JSON)
    env: Mapped[dict[str, Any]] = mapped_column(JSON)
    gpus: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer)
    cpus: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[float] = mapped_column(Float)
    gpu_types: Mapped[list[Any]] = mapped_column(JSON)
    inputs: Mapped[list[Any]] = mapped_column(JSON)
    outputs: Mapped[list[Any]] = mapped_column(JSON)
    max_runtime_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Seconds of work between the job's own checkpoints; None: it declared none.
    checkpoint_interval_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # sha256 of the canonical submit the key was first used with: a replay must match it.
    idempotency_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    submitted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    pool: Mapped[str | None] = mapped_column(String(100), nullable=True)
    gpu_type: Mapped[str | None] = mapped_column(String(100), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    pending_reasons: Mapped[list[Any]] = mapped_column(JSON, default=list)
    reasons_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # Set on the tasks of a job array (``core.arrays``): the array's id and the task's index.
    array_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # A job run from an image: {image, pull_secret, mounts, shm_size_gb, read_only_root}
    # (server.services.image_checks); None: the command runs on the node as it is.
    container: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    @validates("message")
    def _redact_message(self, _: str, value: str) -> str:
        return redact(value) if value else value  # shown to users: no secrets (D4)


class AttemptRow(Base):
    """One try at running a job. ``handle`` is set once the backend accepted it."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number", name="uq_attempts_job_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), index=True)
    pool: Mapped[str] = mapped_column(String(100))
    gpu_type: Mapped[str] = mapped_column(String(100))
    placements: Mapped[list[Any]] = mapped_column(JSON)
    borrowed: Mapped[int] = mapped_column(Integer, default=0)
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    admitted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    cancel_sent: Mapped[bool] = mapped_column(Boolean, default=False)
    # Set when the scheduler chose this attempt as a victim: the id of the job it yields to.
    preempted_by: Mapped[str | None] = mapped_column(String(40), nullable=True)

    @validates("message")
    def _redact_message(self, _: str, value: str) -> str:
        return redact(value) if value else value  # a backend's error text may hold a URL


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(40), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    kind: Mapped[str] = mapped_column(String(40))
    message: Mapped[str] = mapped_column(Text)

    @validates("message")
    def _redact_message(self, _: str, value: str) -> str:
        # Every event write passes here, whoever makes it: events are shown to users (D4).
        return redact(value) if value else value


class TokenRow(Base):
    """An API token. Only a SHA-256 of the secret part is stored."""

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    user: Mapped[str] = mapped_column(String(100), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class AuditRow(Base):
    """One mutating request or operator action (T4): who, what, on what, when, how it ended.

    Rows are only ever inserted. ``team`` is the team the target belongs to when known, so
    team admins can read their team's entries; ``outcome`` is ``ok`` or the error code.
    """

    __tablename__ = "audit"
    __table_args__ = (
        Index("ix_audit_at", "at"),
        Index("ix_audit_team_at", "team", "at"),
        Index("ix_audit_actor_at", "actor", "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(200))
    token_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    action: Mapped[str] = mapped_column(String(100))
    target: Mapped[str] = mapped_column(String(500), default="")
    team: Mapped[str | None] = mapped_column(String(100), nullable=True)
    outcome: Mapped[str] = mapped_column(String(40))
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ConfigVersionRow(Base):
    """One applied cluster configuration (``state.config_store``). Rows are only inserted.

    ``version`` is chosen by the writer as the current version + 1, so of two applies based
    on the same version only one can be stored (the other's insert collides).
    """

    __tablename__ = "config_versions"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    applied_at: Mapped[datetime] = mapped_column(UTCDateTime)
    applied_by: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(500))
    digest: Mapped[str] = mapped_column(String(64))  # sha256 of ``text``
    summary: Mapped[str] = mapped_column(String(500))
    text: Mapped[str] = mapped_column(Text)


class ControllerStateRow(Base):
    """Singleton row (id=1): what the scheduling loop last did, for ``why`` and health."""

    __tablename__ = "controller_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_cycle_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    holder: Mapped[str] = mapped_column(String(200), default="")


class JobChangesRow(Base):
    """Singleton row (id=1): the number of the last transaction that changed jobs.

    Each such transaction takes ``seq + 1`` just before it commits, holding the row's lock
    until then, so the numbers are handed out in commit order (``state.changes``)."""

    __tablename__ = "job_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(BigInteger)


class JobChangeLogRow(Base):
    """A job changed by the transaction numbered ``seq`` (inserted only; pruned by the
    controller once it has read them)."""

    __tablename__ = "job_change_log"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    job_id: Mapped[str] = mapped_column(String(40), primary_key=True)


class ControllerLeaseRow(Base):
    """Singleton row (id=1): which controller process leads, under which epoch (PostgreSQL).

    Written only by ``state.lease``, with the database's clock: ``epoch`` grows by one at each
    change of holder and fences every decision the leader writes (see ``controller.leader``).
    """

    __tablename__ = "controller_lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), default="")
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime)
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class PosixIdentityRow(Base):
    """The POSIX identity a user not under ``users:`` had at their last submit, from the
    directory file or their token's claims (``auth.posix``): what the controller runs their
    jobs as, and what the data service checks their signed URLs as."""

    __tablename__ = "posix_identities"

    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    uid: Mapped[int] = mapped_column(Integer)
    gid: Mapped[int] = mapped_column(Integer)
    groups: Mapped[list[int]] = mapped_column(JSON, default=list)
    source: Mapped[str] = mapped_column(String(20))  # "directory" or "token"
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SecretRow(Base):
    """A secret every server process of one store must agree on (the grant key), created
    once by whichever process starts first. Never logged, never returned by the API."""

    __tablename__ = "secrets"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class UsageRow(Base):
    """The usage ledger (C1): one row per attempt that started, kept after its job is gone.

    GPU time is counted in integer GPU-milliseconds so that sums are exact. ``accrued_until``
    says how far the attempt's time has been added to ``usage_hours``: accrual moves it
    forward and adds the same amount to the rollups in one transaction, so no span is counted
    twice or lost. ``gpus`` are all the GPUs the attempt holds (per node x nodes), ``borrowed``
    those above its team's nominal at admission. ``outcome`` is set when the attempt ends:
    succeeded, failed, cancelled, preempted, lost or evicted.
    """

    __tablename__ = "usage"
    __table_args__ = (
        Index("ix_usage_team_started", "team", "started_at"),
        Index("ix_usage_ended", "ended_at"),
        Index("ix_usage_job", "job_id"),
    )

    attempt_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    job_id: Mapped[str] = mapped_column(String(40))
    job_name: Mapped[str] = mapped_column(String(200), default="")
    team: Mapped[str] = mapped_column(String(100))
    user: Mapped[str] = mapped_column(String(100))
    gpu_type: Mapped[str] = mapped_column(String(100))
    pool: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str] = mapped_column(String(30))
    priority_class: Mapped[str] = mapped_column(String(100))
    node_type: Mapped[str] = mapped_column(String(20))  # dedicated | spot
    gpus: Mapped[int] = mapped_column(Integer)
    borrowed: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    accrued_until: Mapped[datetime] = mapped_column(UTCDateTime)
    gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    borrowed_gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    outcome: Mapped[str | None] = mapped_column(String(20), nullable=True)


class UsageHourRow(Base):
    """GPU-milliseconds used per UTC hour, team, user, gpu type, pool and priority class,
    kept incrementally with the ledger (``usage``) and never deleted with jobs."""

    __tablename__ = "usage_hours"
    __table_args__ = (
        Index("ix_usage_hours_team_hour", "team", "hour"),
        # Covers a report's GROUP BY team, gpu type, pool, node type over an hour range.
        Index(
            "ix_usage_hours_report",
            "team",
            "gpu_type",
            "pool",
            "node_type",
            "hour",
            "gpu_ms",
            "borrowed_gpu_ms",
        ),
    )

    hour: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    team: Mapped[str] = mapped_column(String(100), primary_key=True)
    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(100), primary_key=True)
    pool: Mapped[str] = mapped_column(String(100), primary_key=True)
    priority_class: Mapped[str] = mapped_column(String(100), primary_key=True)
    node_type: Mapped[str] = mapped_column(String(20), primary_key=True)
    gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    borrowed_gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageDayRow(Base):
    """``usage_hours`` summed per UTC day (same keys, ``day`` at 00:00 UTC), kept with them in
    the same statements: a month's report reads ~30 rows per key instead of ~720."""

    __tablename__ = "usage_days"
    __table_args__ = (
        Index(
            "ix_usage_days_report",
            "team",
            "gpu_type",
            "pool",
            "node_type",
            "day",
            "gpu_ms",
            "borrowed_gpu_ms",
        ),
    )

    day: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    team: Mapped[str] = mapped_column(String(100), primary_key=True)
    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(100), primary_key=True)
    pool: Mapped[str] = mapped_column(String(100), primary_key=True)
    priority_class: Mapped[str] = mapped_column(String(100), primary_key=True)
    node_type: Mapped[str] = mapped_column(String(20), primary_key=True)
    gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    borrowed_gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)


class CapacityHourRow(Base):
    """A pool's capacity GPU-milliseconds per UTC hour, so idle = capacity - allocated."""

    __tablename__ = "capacity_hours"

    hour: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    pool: Mapped[str] = mapped_column(String(100), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(100))
    node_type: Mapped[str] = mapped_column(String(20))
    gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)


class AccountingStateRow(Base):
    """Singleton row (id=1): up to when capacity was accrued, by the last leading controller.
    A controller that starts long after it records the span between as a gap."""

    __tablename__ = "accounting_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    accrued_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class AccountingGapRow(Base):
    """A span when no controller was accruing: reports show it as missing data, never zero."""

    __tablename__ = "accounting_gaps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    start: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    end: Mapped[datetime] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(String(200), default="")


class BudgetAlertRow(Base):
    """A budget threshold a team reached in one period (C3): inserted once, with the audit
    entry and the webhook deliveries it causes, in one transaction (``state.budgets``). The
    primary key is what makes each alert happen once per budget, period and threshold."""

    __tablename__ = "budget_alerts"

    team: Mapped[str] = mapped_column(String(100), primary_key=True)
    budget: Mapped[str] = mapped_column(String(100), primary_key=True)
    period_start: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    threshold: Mapped[float] = mapped_column(Float, primary_key=True)  # percent of the limit
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    used: Mapped[float] = mapped_column(Float)
    limit: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(10))


class WebhookOutboxRow(Base):
    """A webhook message to deliver (the outbox): written in the transaction of the event it
    tells of, sent by the server's delivery worker, retried with backoff until ``status`` is
    ``delivered`` or ``failed`` (tries used up)."""

    __tablename__ = "webhook_outbox"
    __table_args__ = (Index("ix_webhook_outbox_due", "status", "next_try_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    webhook: Mapped[str] = mapped_column(String(100))
    event: Mapped[str] = mapped_column(String(50))
    body: Mapped[str] = mapped_column(Text)  # the exact bytes signed and sent (UTF-8 JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    next_try_at: Mapped[datetime] = mapped_column(UTCDateTime)
    tries: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(20), default="pending")


class WebhookDeliveryRow(Base):
    """One try to deliver an outbox message: the delivery log platform admins read."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    message_id: Mapped[int] = mapped_column(Integer, index=True)
    webhook: Mapped[str] = mapped_column(String(100))
    event: Mapped[str] = mapped_column(String(50))
    try_number: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    outcome: Mapped[str] = mapped_column(String(20))  # delivered | retry | failed
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str] = mapped_column(String(500), default="")
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
