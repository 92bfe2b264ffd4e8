"""Ledger rows for report tests, written as the ledger keeps them: an attempt's ``usage`` row
and its hourly and daily rollups agree (``gpus x ms`` cut at UTC hours, summed per UTC day),
closed rows are accrued to their end, open ones to ``accrued_until``; pools' capacity per
hour; gaps."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.accounting.hours import epoch_ms, split_hours
from gpupool.state.db import SessionFactory
from gpupool.state.models import (
    AccountingGapRow,
    CapacityHourRow,
    UsageDayRow,
    UsageHourRow,
    UsageRow,
)


@dataclass
class LedgerBuilder:
    """Collects attempts, capacity and gaps, then writes them in one transaction."""

    usage: list[UsageRow] = field(default_factory=list)
    hours: dict[tuple[object, ...], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0])
    )
    capacity: dict[tuple[datetime, str], tuple[str, str, int]] = field(default_factory=dict)
    gaps: list[AccountingGapRow] = field(default_factory=list)

    def attempt(
        self,
        *,
        team: str,
        start: datetime,
        end: datetime | None = None,
        accrued_until: datetime | None = None,
        gpus: int = 1,
        borrowed: int = 0,
        user: str = "alice",
        gpu_type: str = "h100",
        pool: str = "demo-shared-dev-h100-pool",
        priority_class: str = "training",
        node_type: str = "dedicated",
        job_id: str | None = None,
        outcome: str | None = None,
    ) -> int:
        """An attempt from ``start``; ended at ``end``, or running and accrued to
        ``accrued_until`` (default: its start). Returns its attempt id."""
        attempt_id = len(self.usage) + 1
        until = end if end is not None else (accrued_until or start)
        ms = epoch_ms(until) - epoch_ms(start)
        self.usage.append(
            UsageRow(
                attempt_id=attempt_id,
                job_id=job_id or f"job-{attempt_id}",
                job_name=f"job {attempt_id}",
                team=team,
                user=user,
                gpu_type=gpu_type,
                pool=pool,
                backend="local",
                priority_class=priority_class,
                node_type=node_type,
                gpus=gpus,
                borrowed=borrowed,
                started_at=start,
                ended_at=end,
                accrued_until=until,
                gpu_ms=ms * gpus,
                borrowed_gpu_ms=ms * borrowed,
                outcome=(outcome or "succeeded") if end is not None else None,
            )
        )
        for hour, piece in split_hours(start, until):
            key = (hour, team, user, gpu_type, pool, priority_class, node_type)
            self.hours[key][0] += piece * gpus
            self.hours[key][1] += piece * borrowed
        return attempt_id

    def pool_capacity(
        self,
        pool: str,
        gpu_type: str,
        gpus: int,
        hours: list[datetime],
        node_type: str = "dedicated",
    ) -> None:
        for hour in hours:
            self.capacity[hour, pool] = (gpu_type, node_type, gpus * 3_600_000)

    def gap(
        self, start: datetime, end: datetime, reason: str = "no controller was accruing"
    ) -> None:
        self.gaps.append(AccountingGapRow(start=start, end=end, reason=reason))

    def write(self, sessions: SessionFactory) -> None:
        with sessions.begin() as session:
            session.add_all(self.usage)
            session.add_all(
                UsageHourRow(
                    hour=k[0],
                    team=k[1],
                    user=k[2],
                    gpu_type=k[3],
                    pool=k[4],
                    priority_class=k[5],
                    node_type=k[6],
                    gpu_ms=v[0],
                    borrowed_gpu_ms=v[1],
                )
                for k, v in self.hours.items()
            )
            days: dict[tuple[object, ...], list[int]] = defaultdict(lambda: [0, 0])
            for (hour, *key), (ms, borrowed) in self.hours.items():
                assert isinstance(hour, datetime)
                cell = days[(hour.replace(hour=0, minute=0, second=0, microsecond=0), *key)]
                cell[0] += ms
                cell[1] += borrowed
            session.add_all(
                UsageDayRow(
                    day=k[0],
                    team=k[1],
                    user=k[2],
                    gpu_type=k[3],
                    pool=k[4],
                    priority_class=k[5],
                    node_type=k[6],
                    gpu_ms=v[0],
                    borrowed_gpu_ms=v[1],
                )
                for k, v in days.items()
            )
            session.add_all(
                CapacityHourRow(hour=h, pool=p, gpu_type=t, node_type=n, gpu_ms=ms)
                for (h, p), (t, n, ms) in self.capacity.items()
            )
            session.add_all(self.gaps)
