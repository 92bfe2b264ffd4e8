"""Usage and cost reports (C1, C2): the summary and the per-attempt detail, from ledger totals.

Inputs are what ``state.usage_reports`` reads for one period: GPU-milliseconds per key
(:class:`Use`, rollups plus the unaccrued part of running attempts), each pool's capacity
(:class:`PoolCapacity`), and the attempts themselves (:class:`Attempt`).
Nothing here reads a clock or a store.

Summary rows: ``allocated`` is GPU time within the team's nominal quota, ``borrowed`` the time
above it, and ``idle`` a share of the GPUs no one held: per pool, capacity less use in the
hours it has capacity for (hours without, such as gaps, have no idle; see
:func:`idle_per_pool`). How idle is shared follows ``accounting.idle_cost``:

* ``unshared``: one ``(idle)`` row per pool;
* ``proportional``: over the teams that used the pool in the period, by their GPU time on it;
* ``even``: equally over the teams with nominal quota of the pool's gpu type.

Shares go to teams, so they land on rows grouped by team, gpu type or pool; grouped by user
or priority class (no team's share can be split further) idle stays on ``(idle)`` rows, as it
does when no team qualifies for a share. A reader limited to some teams sees only their
shares, never ``(idle)`` rows. Every cost is ``GPU-ms x price`` of the row's pool
(:mod:`gpupool.accounting.pricing`); usage on a pool or type the configuration no longer
prices costs 0 and marks the row ``unpriced``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpupool.accounting.hours import epoch_ms, split_hours
from gpupool.accounting.periods import Period
from gpupool.accounting.pricing import MS_PER_HOUR, cost, price_per_gpu_hour
from gpupool.spec.models import ClusterConfig

GROUP_FIELDS = ("team", "user", "gpu_type", "pool", "priority_class")
DEFAULT_GROUP_BY = ("team", "gpu_type")
IDLE = "(idle)"  # never a team name (a DNS label); an (idle) row always says so in team
_HOUR = timedelta(hours=1)
_TEAM_LEVEL = frozenset({"team", "gpu_type", "pool"})  # idle shares can land on these


def parse_group_by(text: str | None) -> tuple[str, ...]:
    """The fields of a comma-separated ``group_by``, validated; the default when empty."""
    if not text:
        return DEFAULT_GROUP_BY
    fields = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [f for f in fields if f not in GROUP_FIELDS]
    if unknown or not fields:
        raise ValueError(
            f"unknown group_by {', '.join(unknown) or text!r}; "
            f"use one or more of {', '.join(GROUP_FIELDS)}, comma-separated"
        )
    return fields


@dataclass(frozen=True)
class Use:
    """GPU time of one key in a period; fields not grouped on are ``""``."""

    team: str
    gpu_type: str
    pool: str
    node_type: str
    gpu_ms: int  # all of the key's GPU time
    borrowed_gpu_ms: int  # the part above nominal
    user: str = ""
    priority_class: str = ""

    def value(self, name: str) -> str:
        return str(getattr(self, name))


@dataclass(frozen=True)
class PoolCapacity:
    """A pool's capacity GPU-ms in a range, and the spans of the range it has none for
    (``holes``: gaps, hours before the ledger began or after now)."""

    pool: str
    gpu_ms: int
    holes: tuple[tuple[datetime, datetime], ...] = ()

    def covers(self, hour: datetime) -> bool:
        return not any(start <= hour < end for start, end in self.holes)


@dataclass(frozen=True)
class OpenAttempt:
    """A running attempt's ledger row, as far as the rollups hold it."""

    team: str
    user: str
    gpu_type: str
    pool: str
    priority_class: str
    node_type: str
    gpus: int
    borrowed: int
    accrued_until: datetime


@dataclass
class SummaryRow:
    period: Period
    group: dict[str, str]  # group_by field -> value
    pool: str | None = None  # the pool of an (idle) row
    allocated_gpu_ms: float = 0.0
    borrowed_gpu_ms: float = 0.0
    idle_gpu_ms: float = 0.0
    allocated_cost: float = 0.0
    borrowed_cost: float = 0.0
    idle_cost: float = 0.0
    unpriced: bool = False

    @property
    def total_cost(self) -> float:
        return self.allocated_cost + self.borrowed_cost + self.idle_cost


@dataclass(frozen=True)
class Span:
    """Part of a report's range with no ledger data (a gap): missing, never zero."""

    start: datetime
    end: datetime
    reason: str


@dataclass
class Summary:
    group_by: tuple[str, ...]
    rows: list[SummaryRow] = field(default_factory=list)
    missing: list[Span] = field(default_factory=list)


def unaccrued(
    attempts: Iterable[OpenAttempt], first: datetime, last: datetime, now: datetime
) -> tuple[list[Use], dict[tuple[datetime, str], int]]:
    """What running attempts used in ``[first, last)`` since their last accrual, up to
    ``now``: per key (every field), and per UTC hour and pool."""
    uses: list[Use] = []
    per_hour: dict[tuple[datetime, str], int] = defaultdict(int)
    for a in attempts:
        start, end = max(a.accrued_until, first), min(now, last)
        pieces = split_hours(start, end) if start < end else []
        ms = sum(piece for _, piece in pieces)
        if ms <= 0:
            continue
        for hour, piece in pieces:
            per_hour[hour, a.pool] += piece * a.gpus
        uses.append(
            Use(
                team=a.team,
                gpu_type=a.gpu_type,
                pool=a.pool,
                node_type=a.node_type,
                gpu_ms=ms * a.gpus,
                borrowed_gpu_ms=ms * a.borrowed,
                user=a.user,
                priority_class=a.priority_class,
            )
        )
    return uses, dict(per_hour)


def holes(
    first: datetime, last: datetime, hours: Iterable[datetime]
) -> tuple[tuple[datetime, datetime], ...]:
    """The spans of whole hours in ``[first, last)`` that are not in ``hours``."""
    found: list[tuple[datetime, datetime]] = []
    at = first
    for hour in sorted(h for h in hours if first <= h < last):
        if hour > at:
            found.append((at, hour))
        at = max(at, hour + _HOUR)
    if at < last:
        found.append((at, last))
    return tuple(found)


def idle_per_pool(
    capacity: Iterable[PoolCapacity],
    used: dict[str, int],
    used_in_holes: dict[str, int],
    late: dict[tuple[datetime, str], int],
) -> dict[str, int]:
    """Idle GPU-ms per pool: its capacity less what was used in the hours it has capacity
    for (``used`` less ``used_in_holes``, plus the running attempts' unaccrued ``late`` use
    of those hours), never negative.

    Per pool and hour that is ``capacity - used``; summed over the period it equals the sum
    of the hours' idle whenever no hour's use exceeds its capacity, which admission ensures
    (the scheduler never places more GPUs than a pool has). One sum per pool keeps a month's
    report to one pass over the rollups."""
    idle: dict[str, int] = {}
    for pool in capacity:
        late_ms = sum(ms for (hour, p), ms in late.items() if p == pool.pool and pool.covers(hour))
        counted = used.get(pool.pool, 0) - used_in_holes.get(pool.pool, 0) + late_ms
        idle[pool.pool] = max(0, pool.gpu_ms - counted)
    return idle


def idle_shares(
    config: ClusterConfig, idle: dict[str, int], use_by_pool_team: dict[str, dict[str, int]]
) -> dict[str, dict[str, float]]:
    """Per pool, each team's share of its idle GPU-ms under ``accounting.idle_cost``; a pool
    missing here (or whose shares are empty) keeps its idle on its own row."""
    policy = config.accounting.idle_cost
    shares: dict[str, dict[str, float]] = {}
    if policy == "unshared":
        return shares
    types = {p.name: p.gpu_type for p in config.pools}
    for pool, ms in idle.items():
        if ms <= 0:
            continue
        if policy == "proportional":
            weights = {t: float(u) for t, u in use_by_pool_team.get(pool, {}).items() if u > 0}
        else:  # even
            gpu_type = types.get(pool)
            weights = {
                name: 1.0
                for name, team in config.teams.items()
                if gpu_type in team.quota and team.quota[gpu_type].nominal > 0
            }
        total = sum(weights.values())
        if total > 0:
            shares[pool] = {t: ms * w / total for t, w in sorted(weights.items())}
    return shares


def summarize(
    config: ClusterConfig,
    period: Period,
    group_by: Sequence[str],
    uses: Iterable[Use],
    idle: dict[str, int],
    use_by_pool_team: dict[str, dict[str, int]],
    *,
    teams: frozenset[str] | None = None,
) -> list[SummaryRow]:
    """The summary rows of one period, sorted by group; ``teams`` limits what a reader sees
    (None: everything, with the ``(idle)`` rows)."""
    rows: dict[tuple[tuple[str, ...], str | None], SummaryRow] = {}
    types = {p.name: p.gpu_type for p in config.pools}

    def row(values: dict[str, str], idle_pool: str | None) -> SummaryRow:
        key = (tuple(values[f] for f in group_by), idle_pool)
        if key not in rows:
            rows[key] = SummaryRow(period, {f: values[f] for f in group_by}, idle_pool)
        return rows[key]

    for use in uses:
        if teams is not None and use.team not in teams:
            continue
        price = price_per_gpu_hour(
            config, gpu_type=use.gpu_type, pool=use.pool, node_type=use.node_type
        )
        target = row({f: use.value(f) for f in group_by}, None)
        within = use.gpu_ms - use.borrowed_gpu_ms
        target.allocated_gpu_ms += within
        target.borrowed_gpu_ms += use.borrowed_gpu_ms
        target.allocated_cost += cost(within, price)
        target.borrowed_cost += cost(use.borrowed_gpu_ms, price)
        target.unpriced |= price is None

    shares = idle_shares(config, idle, use_by_pool_team)
    attributable = set(group_by) <= _TEAM_LEVEL
    for pool, ms in sorted(idle.items()):
        if ms <= 0:
            continue
        spec = next((p for p in config.pools if p.name == pool), None)
        gpu_type = types.get(pool, "")
        node_type = spec.autoscale.node_type if spec is not None else "dedicated"
        price = price_per_gpu_hour(config, gpu_type=gpu_type, pool=pool, node_type=node_type)
        where = {"gpu_type": gpu_type, "pool": pool}
        portions: list[tuple[dict[str, str], str | None, float]] = []
        if attributable and pool in shares:
            for team, share in shares[pool].items():
                if teams is None or team in teams:
                    portions.append(({**where, "team": team}, None, share))
        elif teams is None:
            portions.append(
                ({**where, "team": IDLE, "user": IDLE, "priority_class": IDLE}, pool, ms)
            )
        for values, idle_pool, share in portions:
            target = row(values, idle_pool)
            target.idle_gpu_ms += share
            target.idle_cost += share * (price or 0.0) / MS_PER_HOUR
            target.unpriced |= price is None
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1] or ""))]


def use_by_pool_team(uses: Iterable[Use]) -> dict[str, dict[str, int]]:
    """GPU-ms per pool and team: the weights of proportional idle sharing."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for use in uses:
        totals[use.pool][use.team] += use.gpu_ms
    return {pool: dict(teams) for pool, teams in totals.items()}


def missing_spans(gaps: Iterable[Span], start: datetime, end: datetime) -> list[Span]:
    """The gaps that overlap ``[start, end)``, clipped to it, in order."""
    clipped = [
        Span(max(g.start, start), min(g.end, end), g.reason)
        for g in gaps
        if g.start < end and g.end > start
    ]
    return sorted(clipped, key=lambda s: (s.start, s.end))


# -- the detailed report ---------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One ``usage`` row, as the detailed report reads it."""

    attempt_id: int
    job_id: str
    job_name: str
    team: str
    user: str
    gpu_type: str
    pool: str
    backend: str
    priority_class: str
    node_type: str
    gpus: int
    borrowed: int
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None


@dataclass(frozen=True)
class AttemptLine:
    attempt: Attempt
    allocated_gpu_ms: int
    borrowed_gpu_ms: int
    allocated_cost: float
    borrowed_cost: float
    unpriced: bool

    @property
    def total_cost(self) -> float:
        return self.allocated_cost + self.borrowed_cost


def attempt_line(
    config: ClusterConfig, attempt: Attempt, first: datetime, last: datetime, now: datetime
) -> AttemptLine:
    """The attempt's GPU time within ``[first, last)`` (a running one up to ``now``): its GPUs
    times the milliseconds it held them there, which is what its rollups hold for those hours
    (the ledger counts ``gpus x (ms(end) - ms(start))``)."""
    end = attempt.ended_at if attempt.ended_at is not None else now
    ms = max(0, epoch_ms(min(end, last)) - epoch_ms(max(attempt.started_at, first)))
    borrowed = ms * attempt.borrowed
    within = ms * attempt.gpus - borrowed
    price = price_per_gpu_hour(
        config, gpu_type=attempt.gpu_type, pool=attempt.pool, node_type=attempt.node_type
    )
    return AttemptLine(
        attempt, within, borrowed, cost(within, price), cost(borrowed, price), price is None
    )
