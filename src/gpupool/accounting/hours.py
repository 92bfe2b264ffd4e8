"""Time on the usage ledger: whole milliseconds since the Unix epoch, cut at UTC hours (C1).

The ledger counts GPU time in integer GPU-milliseconds so that every sum is exact. A span
``[start, end)`` of ``g`` GPUs counts ``g x (ms(end) - ms(start))``, where :func:`epoch_ms`
floors a time to its millisecond. Two properties follow, and the ledger relies on both:

* cut at UTC hour boundaries (whole milliseconds), the pieces of a span sum to the span;
* consecutive spans ``[a, b)`` and ``[b, c)`` sum to ``[a, c)``, so an attempt accrued in
  many steps counts exactly what one step from its start to its end would.

Reading the ledger at a time ``T``: a closed ``usage`` row is complete; an open one (no
``ended_at``) has been added to the rollups up to its ``accrued_until`` only, and what it
used since is :func:`unaccrued_ms` (per hour: :func:`split_hours` of ``[accrued_until, T)``
times its GPUs). Accrual runs every ``accounting.accrual_interval_s``, so that is at most
one interval of each running attempt.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpupool.accounting.pricing import MS_PER_HOUR

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(at: datetime) -> int:
    """Whole milliseconds from the epoch to ``at`` (an aware time), floored."""
    delta = at - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    """The aware UTC time ``ms`` milliseconds after the epoch."""
    return EPOCH + timedelta(milliseconds=ms)


def hour_of(at: datetime) -> datetime:
    """The UTC hour ``at`` falls in (the key of the hourly rollups)."""
    return from_ms(epoch_ms(at) // MS_PER_HOUR * MS_PER_HOUR)


def split_hours(start: datetime, end: datetime) -> list[tuple[datetime, int]]:
    """``(hour, milliseconds)`` of each UTC hour that ``[start, end)`` covers, in order; the
    milliseconds sum to ``ms(end) - ms(start)``. Empty when the span has no whole ms."""
    first, last = epoch_ms(start), epoch_ms(end)
    pieces: list[tuple[datetime, int]] = []
    at = first
    while at < last:
        hour = at // MS_PER_HOUR * MS_PER_HOUR
        upto = min(hour + MS_PER_HOUR, last)
        pieces.append((from_ms(hour), upto - at))
        at = upto
    return pieces


def unaccrued_ms(gpus: int, accrued_until: datetime, at: datetime) -> int:
    """GPU-milliseconds an open ledger row has used since it was last accrued, at ``at``
    (what a report adds to the rollups for a running attempt; 0 if ``at`` is earlier)."""
    return gpus * max(0, epoch_ms(at) - epoch_ms(accrued_until))
