"""Quota arithmetic for one team and one gpu type, and the cohort balance it borrows from.

Quantities are whole GPUs of one gpu type, except the GPU-less cap at the end. ``used`` is what a
team's admitted and running jobs hold now. Definitions (docs/architecture.md §5.3, Kueue semantics):

* ``borrowed(used) = max(0, used - nominal)``: usage above nominal is borrowed from the cohort.
* ``lendable(used) = min(max(0, nominal - used), lending_limit)`` (no limit = no cap): the part of
  a team's unused nominal that other members of its cohort may borrow.
* ``ceiling = nominal + borrowing_limit`` (no limit = unbounded): a team never holds more.

A :class:`CohortBalance` sums both over every member of a cohort: ``L = Σ lendable`` and
``B = Σ borrowed``. A team never both borrows and lends (one of the two terms is always 0).

Cohort invariant: ``B <= L``. It means the borrowed GPUs can be attributed to lenders so that no
member lends more than ``min(unused nominal, lending limit)``. Borrowing is admitted only while
the invariant holds afterwards: team T may add ``d`` borrowed GPUs iff
``d <= idle_for(T) = (L - lendable_T) - B`` (the other members' lendable minus everything already
borrowed, T's own borrowing included). A team that uses its *own* nominal is never refused by the
cohort: doing so can shrink ``L`` below ``B``, which reclaim preemption (a later step) repairs;
until then ``idle_for`` is clamped at 0 so nobody borrows more.

GPU-less cap: a job without GPUs needs none of the quota above, so on its own nothing would bound
how many a team runs. Each :class:`Quota` therefore also caps the CPUs and memory that the team's
GPU-less jobs hold on the gpu type's pools at once (``cpus``, ``memory_gb``; ``None`` = no cap):
a job needs ``max(cpus, MIN_CPUS_CHARGED) x nodes`` CPUs and ``memory_gb x nodes`` GB of it
(:func:`gpuless_charge`). The floor makes a thousand jobs of 0.001 CPUs cost a thousand CPUs, not
one. The cap is hard: GPU-less work never borrows, lends or preempts for it
(:func:`check_gpuless`).

Fair share: :func:`weighted_share` is a team's share of the cluster's value that it borrows,
divided by the team's weight: ``Σ_f w_f x borrowed_f / Σ_f w_f x capacity_f / weight``, where
``capacity_f`` is the cluster's total GPUs of type f and ``w_f`` what one GPU of type f is worth
(its price per GPU-hour, or its ``fair_share_weight``). So one borrowed h100 counts for as much
as ``w_h100 / w_t4`` borrowed t4s, whatever the pools' sizes. A sum, not DRF's maximum over
types: a job holds GPUs of one type only and the types stand in for one another (spill-over),
so they are one resource in different denominations, not complements such as CPUs and memory
are; with the maximum, a team could borrow some of every type and count only the largest part.
With one gpu type it is DRF's dominant share, ``borrowed / capacity / weight``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

# Each node of a GPU-less job counts at least this many CPUs against its team's cap: a process
# runs on at least one CPU, and without a floor tiny requests would make any cap meaningless.
MIN_CPUS_CHARGED = 1.0
# Summed CPUs and GB are floats: a job that needs exactly what is left (up to rounding) fits.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Quota:
    """One team's quota of one gpu type. Invariant: every number is ``>= 0``; ``None`` = no limit.

    A team with no quota entry for a gpu type has ``Quota()``: nominal 0, but it may still borrow
    through its cohort, up to its (unlimited) borrowing limit. ``cpus`` and ``memory_gb`` cap its
    GPU-less jobs on the type (see the module docstring); the controller always sets them.
    """

    nominal: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    cpus: float | None = None
    memory_gb: float | None = None

    @property
    def ceiling(self) -> int | None:
        """The most the team may hold when it borrows; ``None`` = unbounded."""
        if self.borrowing_limit is None:
            return None
        return self.nominal + self.borrowing_limit

    def borrowed(self, used: int) -> int:
        return max(0, used - self.nominal)

    def lendable(self, used: int) -> int:
        unused = max(0, self.nominal - used)
        if self.lending_limit is None:
            return unused
        return min(unused, self.lending_limit)


@dataclass(frozen=True, slots=True)
class CohortBalance:
    """Sums over a cohort's members for one gpu type: ``lendable = L``, ``borrowed = B``."""

    lendable: int = 0
    borrowed: int = 0

    def idle_for(self, quota: Quota, used: int) -> int:
        """GPUs the other members can still lend to a team with ``quota`` that uses ``used``."""
        return max(0, self.lendable - quota.lendable(used) - self.borrowed)

    def with_member(self, quota: Quota, used: int) -> CohortBalance:
        """The balance after adding a member with ``quota`` that uses ``used``."""
        return CohortBalance(
            self.lendable + quota.lendable(used), self.borrowed + quota.borrowed(used)
        )

    def moved(self, quota: Quota, used_before: int, used_after: int) -> CohortBalance:
        """The balance after one member's usage changed from ``used_before`` to ``used_after``."""
        return CohortBalance(
            self.lendable + quota.lendable(used_after) - quota.lendable(used_before),
            self.borrowed + quota.borrowed(used_after) - quota.borrowed(used_before),
        )


class QuotaVerdict(StrEnum):
    WITHIN_NOMINAL = "within_nominal"  # adds nothing above nominal
    BORROWS = "borrows"  # goes above nominal, and the limit and the cohort allow it
    OVER_LIMIT = "over_limit"  # beyond nominal + borrowing limit, or above nominal with no cohort
    COHORT_SHORT = "cohort_short"  # the limit allows it but the cohort has too little idle


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """The outcome of :func:`check_quota`, with the numbers a person needs to understand it.

    ``borrowed`` is how many of the requested GPUs would be above nominal (what an admission
    records); ``idle`` is the cohort's idle lendable quota for this team (``None``: no cohort).
    """

    verdict: QuotaVerdict
    used: int
    need: int
    quota: Quota
    borrowed: int
    idle: int | None

    @property
    def fits(self) -> bool:
        return self.verdict in (QuotaVerdict.WITHIN_NOMINAL, QuotaVerdict.BORROWS)


def check_quota(quota: Quota, used: int, need: int, cohort: CohortBalance | None) -> QuotaCheck:
    """May a team that uses ``used`` GPUs take ``need`` more? ``cohort`` is None without one.

    ``need == 0`` (a CPU-only job) always fits within nominal.
    """
    after = used + need
    borrowed = quota.borrowed(after) - quota.borrowed(used)
    idle = None if cohort is None else cohort.idle_for(quota, used)
    if borrowed == 0:
        verdict = QuotaVerdict.WITHIN_NOMINAL
    elif cohort is None or (quota.ceiling is not None and after > quota.ceiling):
        # Without a cohort there is nobody to borrow from: the effective limit is nominal.
        verdict = QuotaVerdict.OVER_LIMIT
    elif idle is not None and borrowed > idle:
        verdict = QuotaVerdict.COHORT_SHORT
    else:
        verdict = QuotaVerdict.BORROWS
    return QuotaCheck(verdict, used, need, quota, borrowed, idle)


def gpuless_charge(cpus: float, memory_gb: float, nodes: int) -> tuple[float, float]:
    """What a GPU-less job with ``cpus`` and ``memory_gb`` per node on ``nodes`` nodes counts
    against its team's cap: ``(CPUs, GB)``, each node at least :data:`MIN_CPUS_CHARGED` CPUs."""
    return max(cpus, MIN_CPUS_CHARGED) * nodes, max(memory_gb, 0.0) * nodes


@dataclass(frozen=True, slots=True)
class GpulessCheck:
    """The outcome of :func:`check_gpuless`, with the numbers a person needs to understand it.

    ``used`` and ``need`` are ``(CPUs, GB)``; ``over`` names the dimensions the job would push
    past the cap (``"cpus"``, ``"memory_gb"``), empty when it fits.
    """

    quota: Quota
    used: tuple[float, float]
    need: tuple[float, float]
    over: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return not self.over


def check_gpuless(
    quota: Quota, used: tuple[float, float], need: tuple[float, float]
) -> GpulessCheck:
    """May a team whose GPU-less jobs hold ``used`` of this gpu type's cap take ``need`` more?
    ``used`` and ``need`` are ``(CPUs, GB)`` as :func:`gpuless_charge` counts them."""
    over = []
    if quota.cpus is not None and used[0] + need[0] > quota.cpus + _EPSILON:
        over.append("cpus")
    if quota.memory_gb is not None and used[1] + need[1] > quota.memory_gb + _EPSILON:
        over.append("memory_gb")
    return GpulessCheck(quota, used, need, tuple(over))


def weighted_share(
    borrowed: Mapping[str, int],
    capacity: Mapping[str, int],
    weight: float,
    type_weights: Mapping[str, float] | None = None,
) -> float:
    """``Σ w_f x borrowed[f] / Σ w_f x capacity[f] / weight`` (see the module docstring); ``w_f``
    is ``type_weights[f]``, 1 for a type not listed. 0 when nothing is borrowed.

    A type with no capacity cannot be borrowed physically and is skipped. A team with weight
    ``<= 0`` that borrows anything has share ``inf`` (it goes last).
    """
    worth = type_weights or {}
    total = 0.0
    for gpu_type in sorted(capacity):
        total += worth.get(gpu_type, 1.0) * capacity[gpu_type]
    used = 0.0
    for gpu_type in sorted(borrowed):
        amount = borrowed[gpu_type]
        if amount > 0 and capacity.get(gpu_type, 0) > 0:
            used += worth.get(gpu_type, 1.0) * amount
    if used <= 0.0 or total <= 0.0:
        return 0.0
    if weight <= 0:
        return math.inf
    return used / total / weight
