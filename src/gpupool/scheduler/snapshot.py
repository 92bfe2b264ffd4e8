"""The scheduler's inputs and outputs: immutable value types.

A :class:`Snapshot` is a copy of the world at one instant, built by the controller (or the
simulator). It carries everything :func:`gpupool.scheduler.run_cycle` may look at; the
scheduler never reads a clock, a database or the environment. Times are plain floats
(seconds on whatever clock the caller uses) so the simulator can run on a virtual clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node of a pool. Devices are numbered ``0 .. gpus-1`` within the node.

    ``used_devices``, ``used_cpus`` and ``used_memory_gb`` are the one source of truth for a
    node's capacity: the controller (or simulator) fills them from the running jobs placed on
    the node. The scheduler reads free capacity only from these fields and uses
    :class:`RunningJob` only for quota usage, so the two are never added together.
    """

    name: str
    gpus: int
    cpus: float
    memory_gb: float
    used_devices: frozenset[int] = frozenset()
    used_cpus: float = 0.0
    used_memory_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class PoolView:
    """One pool. ``gang``: its backend runs jobs of more than one node (it declares the GANG
    capability); a pool without it is never given a multi-node job, which it could not run."""

    name: str
    gpu_type: str
    backend: str
    nodes: tuple[NodeView, ...]
    dedicated_to: str | None = None
    gang: bool = True


@dataclass(frozen=True, slots=True)
class QuotaView:
    """Invariant: ``nominal >= 0``; ``None`` limits mean unlimited (see spec.models.Quota).

    ``cpus`` and ``memory_gb`` cap what the team's GPU-less jobs hold on the type's pools (see
    :mod:`gpupool.core.quota`); ``None`` = no cap. The controller always sets both.
    """

    nominal: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    cpus: float | None = None
    memory_gb: float | None = None


@dataclass(frozen=True, slots=True)
class TeamView:
    name: str
    cohort: str | None = None
    weight: float = 1.0
    quota: dict[str, QuotaView] = field(default_factory=dict)
    # Decayed historical usage in GPU-seconds (half-life in the caller's policy), computed by
    # the controller from finished and running attempts. Breaks near-ties of fair share.
    usage_history: float = 0.0


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs of one node given to one job: the node and the device indices on it."""

    node: str
    devices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding resources now (admitted or running)."""

    id: str
    team: str
    priority: int
    gpu_type: str
    pool: str
    placements: tuple[Placement, ...]
    cpus: float = 0.0
    memory_gb: float = 0.0
    started_at: float = 0.0
    # True once a termination signal was sent (preempted or cancelled): it still holds its
    # resources until it ends, but is never chosen as a victim again.
    terminating: bool = False
    # When it will have ended at the latest (started + max_runtime_s); None = unknown.
    ends_by: float | None = None
    # How often the job was preempted before this attempt (Policy.max_preemptions_per_job).
    preemptions: int = 0
    # Derived: the devices of all placements. Stored once at construction because every cycle
    # reads it for each running job (usage, what-ifs); never passed in.
    gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", sum(len(p.devices) for p in self.placements))


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A queued job. ``gpus`` is per node; ``gpu_types`` empty means any type."""

    id: str
    team: str
    priority: int
    submitted_at: float
    gpus: int
    nodes: int = 1
    cpus: float = 0.0
    memory_gb: float = 0.0
    gpu_types: tuple[str, ...] = ()
    max_runtime_s: float | None = None
    # When it last entered the queue, if not at submit (a preempted or lost attempt's end).
    # Starvation counts from here: a victim requeued with its old submit time has not waited,
    # and must not jump ahead of the job that reclaimed its GPUs.
    queued_at: float | None = None
    # The backend it was pinned to at submit (``None``: any, ``backend: auto``): only pools of
    # that backend are eligible.
    backend: str | None = None
    # Derived: what the scheduler reads of the job besides its id and place in the queue, as
    # one string (the repr of those fields; see ``scheduler.queues.request_of``). Stored once at
    # construction because every cycle looks each queued job's up, and a string keeps its hash.
    request: str = field(init=False, repr=False, compare=False)
    # Derived: when it started to wait (``queued_at``, else its submit time), stored for the
    # same reason: every cycle reads it for each queued job, to know which starve.
    waiting_since: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        request = (
            self.team,
            self.gpus,
            self.nodes,
            self.priority,
            self.gpu_types,
            self.cpus,
            self.memory_gb,
            self.max_runtime_s,
            self.backend,
        )
        object.__setattr__(self, "request", repr(request))
        since = self.submitted_at if self.queued_at is None else self.queued_at
        object.__setattr__(self, "waiting_since", since)

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.nodes


@dataclass(frozen=True, slots=True)
class Nomination:
    """A preemption still to take effect (see :mod:`gpupool.scheduler.nominations`):
    ``preemptor`` (pending) waits for ``victims`` (the ids of the running jobs it claimed, which
    end in their grace period) and is owed the room it planned to run on, ``placements`` on
    ``pool``: the victims' devices there and the free ones it held besides."""

    preemptor: str
    victims: tuple[str, ...]
    pool: str = ""
    placements: tuple[Placement, ...] = ()


class BudgetAction(StrEnum):
    """What a used-up budget does to its team's scheduling (C3)."""

    NO_BORROW = "no-borrow"  # the team runs only within its nominal quota
    HOLD = "hold"  # none of the team's queued jobs is admitted; running ones go on


@dataclass(frozen=True, slots=True)
class BudgetBlock:
    """A team's used-up budget whose enforcement the cycle applies (see
    :mod:`gpupool.scheduler.budgets`). ``gpu_type``: the one type the budget counts (None: every
    type). The other fields only explain it in ``why``, as the controller wrote them: ``used``
    and ``limit`` with their unit ("1,012", "1,000 GPU-h"), the ``period`` ("June 2027") and the
    day enforcement ends by itself (``until``, "July 1")."""

    team: str
    budget: str
    action: BudgetAction
    gpu_type: str | None = None
    used: str = ""
    limit: str = ""
    period: str = ""
    until: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one cycle decides on.

    ``usage``, when given, must be :func:`held_gpus` of ``running``: the builder sums it (the
    controller's, with the node room it derives from the same jobs), so the cycle makes no
    pass over every running job of the cluster. ``None``: the cycle sums ``running`` itself.
    ``nominations``: the preemptions still to take effect, as the last cycle's result gave them
    (``CycleResult.nominations``), at most one per preemptor. ``budgets``: the used-up budgets
    the cycle enforces, in the controller's order.
    """

    now: float
    pools: tuple[PoolView, ...]
    teams: dict[str, TeamView]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    usage: Mapping[str, Mapping[str, int]] | None = None
    nominations: tuple[Nomination, ...] = ()
    budgets: tuple[BudgetBlock, ...] = ()


def held_gpus(running: Iterable[RunningJob]) -> dict[str, dict[str, int]]:
    """GPUs held per team and gpu type by ``running`` (terminating jobs included: they still
    hold their GPUs until they end)."""
    held: dict[tuple[str, str], int] = {}
    get = held.get
    for job in running:  # inlined: every running job, every cycle that is not handed usage
        key = (job.team, job.gpu_type)
        held[key] = get(key, 0) + job.gpus
    usage: dict[str, dict[str, int]] = {}
    for (team, gpu_type), gpus in held.items():
        usage.setdefault(team, {})[gpu_type] = gpus
    return usage


class WithinTeam(StrEnum):
    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"  # a job may preempt lower-priority jobs of its team


class Reclaim(StrEnum):
    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"  # reclaim only from lower-priority borrowing jobs
    ANY = "any"  # reclaim from any job running on borrowed quota


class Queueing(StrEnum):
    """What a team's later jobs do when its head job cannot start (Kueue's queueing strategies)."""

    BEST_EFFORT_FIFO = "best_effort_fifo"  # later jobs that fit start (the head keeps its place)
    STRICT_FIFO = "strict_fifo"  # nothing starts behind a waiting head (head-of-line blocking)


class BorrowWithinCohort(StrEnum):
    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"  # a borrowing job may preempt lower-priority borrowers


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """What a job may preempt to fit (docs/architecture.md §5.6), per cohort.

    ``borrow_max_priority_threshold``: with ``borrow_within_cohort=lower_priority``, only
    victims whose priority is at most this value may be preempted (``None`` = no cap).
    """

    within_team: WithinTeam = WithinTeam.LOWER_PRIORITY
    reclaim: Reclaim = Reclaim.ANY
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort.NEVER
    borrow_max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """Scheduling settings that are not part of the cluster state.

    ``gpu_type_order`` is tried, in order, for jobs that accept any gpu type.
    ``max_admissions`` bounds the work of one cycle (``None`` = no bound).
    ``preemption`` maps a cohort name to its policy; ``default_preemption`` applies to teams
    without a cohort and cohorts not listed. ``preemption_budget`` caps the jobs preempted
    in one cycle (``None`` = no cap; 0 disables preemption).
    ``starvation_after_s``: a job pending longer than this gets a reservation (Q8);
    ``None`` disables reservations.
    ``fair_share_tolerance``: weighted dominant shares closer than this count as equal, and the
    teams' decayed ``usage_history`` per weight decides between them (Q4).
    ``queueing``: with ``STRICT_FIFO`` a team whose head job waits starts nothing else this
    cycle; its later jobs wait with a BLOCKED reason naming the head.
    ``max_preemptions_per_job``: a job preempted this many times is no longer a victim, except
    for a reclaim of a guarantee (``None``: no cap).
    ``min_runtime_s``: per priority value, how long a job must have run (since
    ``RunningJob.started_at``) before it may be preempted, except for a reclaim of a guarantee.
    ``gpu_type_weights``: what one GPU of each type counts in the fair share (its price, see
    :func:`gpupool.core.quota.weighted_share`); a type not listed counts 1.
    """

    gpu_type_order: tuple[str, ...] = ()
    max_admissions: int | None = None
    preemption: dict[str, PreemptionPolicy] = field(default_factory=dict)
    default_preemption: PreemptionPolicy = PreemptionPolicy()
    preemption_budget: int | None = 10
    starvation_after_s: float | None = None
    fair_share_tolerance: float = 1e-9
    queueing: Queueing = Queueing.BEST_EFFORT_FIFO
    max_preemptions_per_job: int | None = 3
    min_runtime_s: dict[int, float] = field(default_factory=dict)
    gpu_type_weights: dict[str, float] = field(default_factory=dict)


class ReasonCode(StrEnum):
    QUOTA = "quota"  # the team's own quota (nominal + borrowing limit) is used up
    COHORT = "cohort"  # borrowing would be allowed but the cohort has nothing idle to lend
    CAPACITY = "capacity"  # quota allows it but no node has room
    NO_POOL = "no_pool"  # no pool of this type exists (or none the team may use)
    TOO_LARGE = "too_large"  # no node (or not enough nodes) of this type could ever hold it
    BLOCKED = "blocked"  # not considered: the admission bound, or strict FIFO behind the head
    PREEMPTION = "preemption"  # it would fit only by preempting jobs it may not preempt
    PREEMPTING = "preempting"  # victims were signalled; waiting for them to end
    RESERVED = "reservation"  # the free GPUs are reserved for a job that waited too long
    BUDGET = "budget"  # the team's budget for the period is used up (hold or no-borrow)


@dataclass(frozen=True, slots=True)
class PendingReason:
    gpu_type: str
    code: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: str
    gpu_type: str
    pool: str
    placements: tuple[Placement, ...]
    borrowed: int = 0  # GPUs of this admission above the team's nominal quota


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: str
    preemptor_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class CycleResult:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: dict[str, tuple[PendingReason, ...]] = field(default_factory=dict)
    # Every job left waiting with PREEMPTING, in decision order: the next snapshot's nominations.
    nominations: tuple[Nomination, ...] = ()
    # The gpu types whose room, usage or cohort balances a decision of this cycle changed;
    # None: every type (a claim or a reservation). Jobs of other types were decided on what
    # the snapshot says of theirs (the controller's parking reads it). Not compared.
    touched: frozenset[str] | None = field(default=frozenset(), compare=False, repr=False)
    # The earliest time a job that a preemption search of this cycle left out because it had
    # not run its minimum run time may be preempted (None: no such job): a decision may change
    # then without any other event, so a caller that runs cycles only on events (the
    # simulator) runs one then. Not compared.
    protected_until: float | None = field(default=None, compare=False, repr=False)
