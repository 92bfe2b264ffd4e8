"""Live configuration over the API: show, diff, apply and list versions (platform admins).

Apply is one transaction: validate the text (422 with every problem, nothing stored), check
that the version it was diffed against is still current (409 otherwise: two applies at once,
the second is refused), refuse removing a team or pool that queued or running jobs still use
(409 naming them) unless ``force``, then store the new version and, with ``force``, settle
those jobs (``state.config_store.retire_jobs``). The storage of new teams is prepared before
the commit, so a root that cannot be made refuses the apply instead of half applying it.
This process then loads the new version at once; other processes within
``live_config.CHECK_EVERY_S``. The audit middleware records the request (who, when, outcome);
the route names the new version as its target.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from gpupool.auth.principal import Principal
from gpupool.controller.clock import Clock
from gpupool.core.errors import ConfigInvalid, Conflict, Forbidden, NotFound
from gpupool.server.config_schemas import (
    ChangeOut,
    ConfigApplyOut,
    ConfigDiffOut,
    ConfigOut,
    ConfigVersionList,
    ConfigVersionOut,
    JobInUseOut,
)
from gpupool.server.live_config import LiveConfig
from gpupool.spec import diff as spec_diff
from gpupool.spec.load import parse_config
from gpupool.spec.models import ClusterConfig
from gpupool.state import config_store

# How many of the jobs in the way a refusal names in its message (all are in the details).
_NAMED_IN_MESSAGE = 10
_SOURCE = "<api>"

Sessions = Callable[[], AbstractContextManager[Any]]


class ConfigService:
    def __init__(
        self,
        sessions: Any,  # the runtime's session factory: sessions() reads, sessions.begin() writes
        live: LiveConfig,
        clock: Clock,
        prepare: Callable[[ClusterConfig], None] = lambda _config: None,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._sessions = sessions
        self._live = live
        self._clock = clock
        self._prepare = prepare
        self._wake = wake

    # -- read -----------------------------------------------------------------------------

    def current(self, principal: Principal) -> ConfigOut:
        _admin(principal, "read the configuration")
        with self._sessions() as session:
            row = config_store.current(session)
        if row is None:
            raise NotFound("no configuration version is stored yet; the server seeds version 1")
        return ConfigOut(**_version_out(row).model_dump(), yaml=row.text)

    def versions(self, principal: Principal, limit: int) -> ConfigVersionList:
        _admin(principal, "read the configuration history")
        with self._sessions() as session:
            rows = config_store.history(session, limit)
        return ConfigVersionList(items=[_version_out(row) for row in rows])

    def diff(self, principal: Principal, text: str, source: str) -> ConfigDiffOut:
        _admin(principal, "diff the configuration")
        new = _parse(text, source)
        with self._sessions() as session:
            base, old = self._base(session)
            return self._diff_out(session, base, spec_diff.diff(old, new))

    # -- apply ----------------------------------------------------------------------------

    def apply(
        self, principal: Principal, text: str, source: str, base_version: int, force: bool
    ) -> ConfigApplyOut:
        _admin(principal, "apply a configuration")
        new = _parse(text, source)  # before anything is read or written
        failed = cancelled = 0
        with self._sessions.begin() as session:
            base, old = self._base(session)
            if base != base_version:
                raise config_store.stale_version(base_version, base)
            changes = spec_diff.diff(old, new)
            out = self._diff_out(session, base, changes)
            if not out.changes:
                return ConfigApplyOut(version=base, applied=False, diff=out)
            jobs = [config_store.JobInUse(j.id, j.team, j.status, j.pool) for j in out.jobs_in_use]
            if jobs and not force:
                raise _in_use(jobs)
            self._prepare(new)  # may raise ConfigInvalid: the transaction then stores nothing
            now = self._clock.now()
            row = config_store.append(
                session,
                base=base,
                text=text,
                at=now,
                applied_by=principal.user,
                source=source or _SOURCE,
                summary=out.summary,
            )
            if jobs:
                # The diff lists the first jobs only; the removal settles every one of them.
                removed_teams = spec_diff.removed(changes, "teams")
                every = config_store.jobs_in_use(
                    session, removed_teams, spec_diff.removed(changes, "pools"), limit=None
                )
                failed, cancelled = config_store.retire_jobs(
                    session, every, removed_teams, row.version, now
                )
            version = row.version
        self._live.refresh()  # this process: now, not at the next check
        self._wake()
        return ConfigApplyOut(
            version=version, applied=True, diff=out, failed_jobs=failed, cancelled_jobs=cancelled
        )

    # -- helpers --------------------------------------------------------------------------

    def _base(self, session: Any) -> tuple[int, ClusterConfig | None]:
        """The stored version in force and its configuration (0 and the held one: none)."""
        row = config_store.current(session)
        if row is None:
            return 0, self._live.config
        if row.version == self._live.version:
            return row.version, self._live.config
        return row.version, parse_config(row.text, f"configuration version {row.version}")

    def _diff_out(self, session: Any, base: int, changes: list[spec_diff.Change]) -> ConfigDiffOut:
        teams = spec_diff.removed(changes, "teams")
        pools = spec_diff.removed(changes, "pools")
        jobs = config_store.jobs_in_use(session, teams, pools)
        return ConfigDiffOut(
            base_version=base,
            changes=[
                ChangeOut(
                    kind=c.kind.value,
                    section=c.section,
                    name=c.name,
                    path=list(c.path),
                    old=c.old,
                    new=c.new,
                    text=c.describe(),
                )
                for c in changes
            ],
            text=spec_diff.render(changes),
            summary=spec_diff.summarize(changes),
            jobs_in_use=[JobInUseOut(**_job_dict(j)) for j in jobs],
        )


def _admin(principal: Principal, what: str) -> None:
    if not principal.platform_admin:
        raise Forbidden(f"user {principal.user!r} may not {what}: platform admins only")


def _parse(text: str, source: str) -> ClusterConfig:
    try:
        return parse_config(text, source or _SOURCE)
    except ConfigInvalid as exc:
        problems = [p.as_dict() for p in exc.details]
        raise ConfigInvalid(exc.message + "; nothing was changed", details=problems) from None


def _in_use(jobs: list[config_store.JobInUse]) -> Conflict:
    named = ", ".join(
        f"{j.id} ({j.team}, {j.status}{f' on {j.pool}' if j.pool else ''})"
        for j in jobs[:_NAMED_IN_MESSAGE]
    )
    more = f" and {len(jobs) - _NAMED_IN_MESSAGE} more" if len(jobs) > _NAMED_IN_MESSAGE else ""
    return Conflict(
        f"{len(jobs)} queued or running job(s) use a team or pool this change removes: "
        f"{named}{more}; wait for them, cancel them, or apply with --force "
        "(queued jobs of a removed team fail, running ones are cancelled)",
        details={
            "reason": "jobs_in_use",
            "jobs": [
                {"id": j.id, "team": j.team, "status": j.status, "pool": j.pool} for j in jobs
            ],
        },
    )


def _job_dict(job: config_store.JobInUse) -> dict[str, Any]:
    return {"id": job.id, "team": job.team, "status": job.status, "pool": job.pool}


def _version_out(row: Any) -> ConfigVersionOut:
    return ConfigVersionOut(
        version=row.version,
        applied_at=row.applied_at,
        applied_by=row.applied_by,
        source=row.source,
        summary=row.summary,
        digest=row.digest,
    )
