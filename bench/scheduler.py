"""Scheduler benchmark: the cost of one ``run_cycle`` on synthetic clusters of three sizes.

Everything runs in this process against the pure scheduler (``gpupool.scheduler``); no server,
store or backend is involved. A cluster is generated deterministically from ``--seed``
(``random.Random(seed)``): every node has 8 GPUs; each gpu type's nodes are split into a few
pools; teams sit in cohorts of 5-10 with nominal quotas that add up to roughly the capacity of
each type (some with borrowing or lending limits); pending jobs ask for 1/2/4/8 GPUs (a few are
2-node gangs of 8), carry one of 3 priority classes and prefer 1-2 gpu types.

=====  =======  =====  =========  ========
size   nodes    teams  gpu types  pending
=====  =======  =====  =========  ========
S      50       10     2          1,000
M      1,000    50     3          20,000
L      10,000   200    5          100,000
=====  =======  =====  =========  ========

Measured (``time.perf_counter`` around one ``run_cycle``; the median of ``--repeat`` runs, each
after a ``gc.collect()``; the snapshots are immutable and built once):

* ``no_admission_first_cycle_ms``: the full cluster (every device held by a RunningJob, usage
  spread so that some teams of each cohort borrow and others lend) and the whole pending set,
  none of which can fit. Preemption is switched off (``preemption_budget=0``) so this is the
  pure cost of deciding "nothing fits" for every pending job, with nothing parked yet.
* ``no_admission_cycle_ms``: the cycle after it, as the controller runs it: one more job was
  submitted, and the cycle is run through the controller's parking
  (:mod:`gpupool.controller.parking`) as the first one left it (``no_admission_parked_teams``
  teams parked); ``no_admission_admitted`` must be 0.
* ``admissions_per_s``: capacity has freed up: an empty cluster and the same pending set with
  the default Policy. ``admitted`` admissions in one cycle divided by its wall time
  (``admission_cycle_ms``). Quotas and cohorts, not room, bound how many are admitted.
* ``preemption_decision_ms``: the full cluster again, with a single high-priority pending job
  of a team that is below its nominal quota of a gpu type while other members of its cohort
  borrow that type (so reclaim preemption applies), default Policy: the largest such job of
  8, 4, 2 or 1 GPUs for which the scheduler finds victims (``preemptor.gpus``).
  ``preemptions`` is the number of preemptions that cycle decided.
* ``preemption_cycle_full_ms``: the same, with the whole pending set pending as well;
  ``preemptions_full`` is its number of preemptions.
* ``snapshot_build_ms``: the time to build the full-cluster snapshot (nodes, teams, running
  and pending jobs), for scale: a controller pays a comparable cost each cycle.
* ``peak_rss_mb``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end (whole process).

``--profile [SCENARIO]`` runs one more cycle of the scenario (default ``no_admission``) under
cProfile, after the measurements, and prints the top 25 functions by cumulative time to stderr.

Usage: python bench/scheduler.py --size S|M|L [--json] [--repeat N] [--seed N]
       [--profile [no_admission|admission|preemption|preemption_full]]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import heapq
import json
import os
import platform
import pstats
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from random import Random
from typing import Any

from gpupool.controller.parking import Parking, groups_of
from gpupool.scheduler import (
    CycleResult,
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    held_gpus,
    run_cycle,
)

GPU_TYPES = ("h100", "a100", "l40s", "a10", "t4")
TYPE_WEIGHTS = (5, 4, 3, 2, 2)  # share of the nodes each type gets (of the types in use)
GPUS_PER_NODE = 8
NODE_CPUS = 96.0
NODE_MEMORY_GB = 1024.0
CPUS_PER_GPU = 10.0
MEMORY_GB_PER_GPU = 100.0
PRIORITIES = (0, 50, 100)  # low, normal, high
PRIORITY_WEIGHTS = (30, 55, 15)
URGENT_PRIORITY = 1000
JOB_GPUS = (1, 2, 4, 8)
JOB_GPU_WEIGHTS = (30, 25, 25, 20)
GANG_FRACTION = 0.02  # pending jobs that are 2-node gangs of 8 GPUs each
RUNNING_GANG_FRACTION = 0.01  # full nodes whose job spans this node and the next
NOW = 1_000_000.0
QUOTA_FILL = 0.95  # nominal quotas of a type add up to about this fraction of its capacity


@dataclass(frozen=True)
class Size:
    nodes: int
    teams: int
    pending: int
    gpu_types: int
    repeat: int


SIZES = {
    "S": Size(nodes=50, teams=10, pending=1_000, gpu_types=2, repeat=3),
    "M": Size(nodes=1_000, teams=50, pending=20_000, gpu_types=3, repeat=3),
    "L": Size(nodes=10_000, teams=200, pending=100_000, gpu_types=5, repeat=3),
}


@dataclass(frozen=True)
class Cluster:
    """The generated world: the full-cluster and empty-cluster snapshots and the urgent job."""

    full: Snapshot  # every device used, whole pending set
    empty: Snapshot  # no running jobs, whole pending set
    urgent_only: Snapshot  # full cluster, only the urgent job pending
    urgent_full: Snapshot  # full cluster, the urgent job and the whole pending set
    urgent: dict[str, Any]  # who the urgent job belongs to and why preemption applies
    build_ms: float


# ---------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------


def _split(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder, so it sums exactly)."""
    scale = sum(weights)
    raw = [total * w / scale for w in weights]
    parts = [int(r) for r in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: (parts[i] - raw[i], i))
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _pools(rng: Random, size: Size) -> dict[str, list[tuple[str, list[str]]]]:
    """Per gpu type: its pools as (pool name, node names)."""
    types = GPU_TYPES[: size.gpu_types]
    per_type = _split(size.nodes, [float(w) for w in TYPE_WEIGHTS[: size.gpu_types]])
    layout: dict[str, list[tuple[str, list[str]]]] = {}
    for gpu_type, count in zip(types, per_type, strict=True):
        pool_count = max(1, min(4, -(-count // 16)))
        sizes = _split(count, [rng.uniform(1.0, 3.0) for _ in range(pool_count)])
        pools = []
        for p, n in enumerate(sizes):
            name = f"{gpu_type}-pool-{p}"
            pools.append((name, [f"{name}-node-{i:05d}" for i in range(n)]))
        layout[gpu_type] = pools
    return layout


def _teams(rng: Random, size: Size, capacity: dict[str, int]) -> dict[str, TeamView]:
    names = [f"team-{i:03d}" for i in range(size.teams)]
    order = names[:]
    rng.shuffle(order)
    cohorts: list[list[str]] = []
    while order:
        take = rng.randint(5, 10)
        if len(order) - take < 5:
            take = len(order)
        cohorts.append(order[:take])
        del order[:take]
    cohort_of = {team: f"cohort-{c:02d}" for c, members in enumerate(cohorts) for team in members}

    types = list(capacity)
    home = {team: rng.sample(types, min(len(types), rng.choice((1, 1, 2)))) for team in names}
    for gpu_type in types:  # every type has at least one team with quota
        if not any(gpu_type in h for h in home.values()):
            home[rng.choice(names)].append(gpu_type)

    quotas: dict[str, dict[str, QuotaView]] = {team: {} for team in names}
    for gpu_type in types:
        holders = [team for team in names if gpu_type in home[team]]
        nominals = _split(
            int(capacity[gpu_type] * QUOTA_FILL), [rng.uniform(0.5, 2.0) for _ in holders]
        )
        for team, nominal in zip(holders, nominals, strict=True):
            borrowing = rng.choice((None, None, None, 0, nominal // 2, nominal))
            lending = rng.choice((None, None, None, None, nominal // 2))
            quotas[team][gpu_type] = QuotaView(nominal, borrowing, lending)
    return {
        team: TeamView(
            name=team,
            cohort=cohort_of[team],
            weight=rng.choice((1.0, 1.0, 1.0, 2.0)),
            quota=quotas[team],
            usage_history=rng.uniform(0.0, 1e6),
        )
        for team in names
    }


def _pending(rng: Random, size: Size, teams: dict[str, TeamView]) -> list[PendingJob]:
    names = sorted(teams)
    activity = [rng.uniform(0.2, 3.0) for _ in names]
    all_types = GPU_TYPES[: size.gpu_types]
    jobs = []
    for i in range(size.pending):
        team = rng.choices(names, activity)[0]
        if rng.random() < GANG_FRACTION:
            gpus, nodes = GPUS_PER_NODE, 2
        else:
            gpus, nodes = rng.choices(JOB_GPUS, JOB_GPU_WEIGHTS)[0], 1
        home = sorted(teams[team].quota) or list(all_types)
        if rng.random() < 0.2:  # sometimes a type the team has no quota for (it must borrow)
            home = list(all_types)
        wanted = rng.sample(home, min(len(home), rng.choice((1, 2))))
        jobs.append(
            PendingJob(
                id=f"p{i:06d}",
                team=team,
                priority=rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0],
                submitted_at=NOW - rng.uniform(0.0, 86_400.0),
                gpus=gpus,
                nodes=nodes,
                cpus=gpus * CPUS_PER_GPU,
                memory_gb=gpus * MEMORY_GB_PER_GPU,
                gpu_types=tuple(wanted),
                max_runtime_s=rng.choice((None, 3_600.0, 14_400.0, 86_400.0)),
            )
        )
    return jobs


def _node_chunks(rng: Random) -> list[int]:
    """How one full node's GPUs are divided among its jobs."""
    left, chunks = GPUS_PER_NODE, []
    while left:
        sizes = [g for g in JOB_GPUS if g <= left]
        chunk = rng.choices(sizes, JOB_GPU_WEIGHTS[: len(sizes)])[0]
        chunks.append(chunk)
        left -= chunk
    return chunks


def _usage_targets(
    rng: Random, gpu_type: str, capacity: int, teams: dict[str, TeamView]
) -> dict[str, float]:
    """GPUs of ``gpu_type`` each team should hold on the full cluster: quota holders use
    50-160% of nominal (so cohorts have lenders and borrowers) and a few teams without quota
    borrow a little; scaled so the targets add up to the capacity."""
    targets: dict[str, float] = {}
    for name in sorted(teams):
        quota = teams[name].quota.get(gpu_type)
        if quota is not None and quota.nominal > 0:
            factor = rng.choice((0.5, 0.8, 1.0, 1.3, 1.6))
            if quota.borrowing_limit is not None:
                factor = min(factor, (quota.nominal + quota.borrowing_limit) / quota.nominal)
            targets[name] = quota.nominal * factor
        elif rng.random() < 0.2:
            targets[name] = capacity * 0.01
    scale = capacity / sum(targets.values())
    return {name: target * scale for name, target in targets.items()}


def _running(
    rng: Random,
    layout: dict[str, list[tuple[str, list[str]]]],
    teams: dict[str, TeamView],
    capacity: dict[str, int],
) -> tuple[list[PoolView], list[RunningJob]]:
    """Fill every device with running jobs; return the full pools and the jobs."""
    pools: list[PoolView] = []
    running: list[RunningJob] = []
    for gpu_type, type_pools in layout.items():
        # (gpus, pool, placements) per job, then teams are dealt out by remaining target.
        shapes: list[tuple[int, str, tuple[Placement, ...]]] = []
        for pool_name, node_names in type_pools:
            nodes = []
            i = 0
            while i < len(node_names):
                name = node_names[i]
                pair = i + 1 < len(node_names) and rng.random() < RUNNING_GANG_FRACTION
                if pair:
                    devices = tuple(range(GPUS_PER_NODE))
                    placements = (Placement(name, devices), Placement(node_names[i + 1], devices))
                    shapes.append((2 * GPUS_PER_NODE, pool_name, placements))
                    names = [name, node_names[i + 1]]
                    i += 2
                else:
                    start = 0
                    for chunk in _node_chunks(rng):
                        devices = tuple(range(start, start + chunk))
                        shapes.append((chunk, pool_name, (Placement(name, devices),)))
                        start += chunk
                    names = [name]
                    i += 1
                for node in names:
                    nodes.append(
                        NodeView(
                            name=node,
                            gpus=GPUS_PER_NODE,
                            cpus=NODE_CPUS,
                            memory_gb=NODE_MEMORY_GB,
                            used_devices=frozenset(range(GPUS_PER_NODE)),
                            used_cpus=GPUS_PER_NODE * CPUS_PER_GPU,
                            used_memory_gb=GPUS_PER_NODE * MEMORY_GB_PER_GPU,
                        )
                    )
            pools.append(PoolView(pool_name, gpu_type, "slurm", tuple(nodes)))
        targets = _usage_targets(rng, gpu_type, capacity[gpu_type], teams)
        # A max-heap of remaining target: the largest jobs go first to the neediest team.
        heap = [(-target, name) for name, target in targets.items()]
        heapq.heapify(heap)
        shapes.sort(key=lambda s: -s[0])
        for gpus, pool_name, placements in shapes:
            remaining, team = heap[0]
            heapq.heapreplace(heap, (remaining + gpus, team))
            n = len(running)
            started = NOW - rng.uniform(0.0, 43_200.0)
            running.append(
                RunningJob(
                    id=f"r{n:06d}",
                    team=team,
                    priority=rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0],
                    gpu_type=gpu_type,
                    pool=pool_name,
                    placements=placements,
                    cpus=gpus * CPUS_PER_GPU / len(placements),
                    memory_gb=gpus * MEMORY_GB_PER_GPU / len(placements),
                    started_at=started,
                    ends_by=rng.choice((None, started + 86_400.0)),
                )
            )
    return pools, running


def _empty(pools: list[PoolView]) -> list[PoolView]:
    return [
        PoolView(
            p.name,
            p.gpu_type,
            p.backend,
            tuple(NodeView(n.name, n.gpus, n.cpus, n.memory_gb) for n in p.nodes),
            p.dedicated_to,
        )
        for p in pools
    ]


def _urgent(
    teams: dict[str, TeamView], running: list[RunningJob], largest: int = JOB_GPUS[-1]
) -> tuple[PendingJob, dict]:
    """A high-priority job of a team below its nominal on a type its cohort-mates borrow, of at
    most ``largest`` GPUs."""
    used: dict[tuple[str, str], int] = {}
    for job in running:
        used[(job.team, job.gpu_type)] = used.get((job.team, job.gpu_type), 0) + job.gpus
    borrowing = {
        (teams[team].cohort, gpu_type)
        for (team, gpu_type), n in used.items()
        if n > (q.nominal if (q := teams[team].quota.get(gpu_type)) else 0)
    }
    candidates = []
    for name in sorted(teams):
        team = teams[name]
        for gpu_type, quota in sorted(team.quota.items()):
            room = quota.nominal - used.get((name, gpu_type), 0)
            if room >= 1:
                mates_borrow = (team.cohort, gpu_type) in borrowing
                candidates.append((not mates_borrow, -room, name, gpu_type))
    if not candidates:
        raise SystemExit("generated cluster has no team below its nominal quota; change --seed")
    no_borrowers, neg_room, name, gpu_type = min(candidates)
    gpus = max(g for g in JOB_GPUS if g <= min(-neg_room, largest))
    job = PendingJob(
        id="urgent",
        team=name,
        priority=URGENT_PRIORITY,
        submitted_at=NOW,
        gpus=gpus,
        cpus=gpus * CPUS_PER_GPU,
        memory_gb=gpus * MEMORY_GB_PER_GPU,
        gpu_types=(gpu_type,),
    )
    info = {
        "team": name,
        "gpu_type": gpu_type,
        "gpus": gpus,
        "below_nominal_by": -neg_room,
        "cohort_mates_borrow": not no_borrowers,
    }
    return job, info


def _preempting_urgent(
    full: Snapshot, teams: dict[str, TeamView], running: list[RunningJob]
) -> tuple[PendingJob, dict]:
    """The largest urgent job (8, 4, 2 or 1 GPUs) for which the scheduler finds victims: on a
    full cluster of mixed nodes a whole node of reclaimable jobs may not exist, and a decision
    that finds nothing to preempt measures less than one that chooses victims."""
    for largest in sorted(JOB_GPUS, reverse=True):
        job, info = _urgent(teams, running, largest)
        alone = Snapshot(NOW, full.pools, teams, full.running, (job,), full.usage)
        if run_cycle(alone, DEFAULT).preemptions:
            return job, info
    return _urgent(teams, running)


def _store_order(job: PendingJob) -> tuple[str, int, float, str]:
    return (job.team, -job.priority, job.submitted_at, job.id)


def build_cluster(size: Size, seed: int) -> Cluster:
    rng = Random(seed)
    started = time.perf_counter()
    layout = _pools(rng, size)
    capacity = {t: GPUS_PER_NODE * sum(len(n) for _, n in ps) for t, ps in layout.items()}
    teams = _teams(rng, size, capacity)
    # In the order the controller's query returns the queue (team, priority, submit time, id).
    pending = tuple(sorted(_pending(rng, size, teams), key=_store_order))
    pools, running = _running(rng, layout, teams, capacity)
    # Team usage summed here, as the controller's snapshot builder does (not in the cycle).
    usage = held_gpus(running)
    full = Snapshot(NOW, tuple(pools), teams, tuple(running), pending, usage)
    build_ms = (time.perf_counter() - started) * 1000
    urgent, info = _preempting_urgent(full, teams, running)
    return Cluster(
        full=full,
        empty=Snapshot(NOW, tuple(_empty(pools)), teams, (), pending),
        urgent_only=Snapshot(NOW, full.pools, teams, full.running, (urgent,), usage),
        urgent_full=Snapshot(NOW, full.pools, teams, full.running, (urgent, *pending), usage),
        urgent=info,
        build_ms=build_ms,
    )


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------

NO_PREEMPTION = Policy(preemption_budget=0)
DEFAULT = Policy()


def _preemptions(result: CycleResult) -> int:
    return len(getattr(result, "preemptions", ()))


def timed(
    snapshot: Snapshot, policy: Policy, repeat: int, parking: Parking | None = None
) -> tuple[float, CycleResult, Parking | None]:
    """Median wall time of ``repeat`` cycles in ms, the (deterministic) result and, when the
    cycles run through ``parking``, the parking the last one left (each starts from a copy of
    the given one, as the same cycle repeated)."""
    times = []
    result = CycleResult()
    groups = groups_of(snapshot.pending)
    used = None
    for _ in range(repeat):
        del result
        used = copy.copy(parking) if parking is not None else None
        gc.collect()
        started = time.perf_counter()
        result = (
            run_cycle(snapshot, policy) if used is None else used.cycle(snapshot, policy, groups)
        )
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result, used


def one_more_submitted(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with one more job of its first team queued, last in that team's queue (as
    the store lists the queue), asking what that team's first job asks."""
    first = snapshot.pending[0]
    job = replace(first, id="submitted", priority=min(PRIORITIES), submitted_at=NOW)
    at = next(i for i, j in enumerate(snapshot.pending) if j.team != first.team)
    return replace(snapshot, pending=(*snapshot.pending[:at], job, *snapshot.pending[at:]))


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes vs KiB


def measure(name: str, cluster: Cluster, repeat: int) -> dict[str, Any]:
    full = cluster.full
    out: dict[str, Any] = {
        "benchmark": "scheduler",
        "size": name,
        "seed": None,
        "repeat": repeat,
        "nodes": sum(len(p.nodes) for p in full.pools),
        "gpus": sum(n.gpus for p in full.pools for n in p.nodes),
        "gpu_types": len({p.gpu_type for p in full.pools}),
        "pools": len(full.pools),
        "teams": len(full.teams),
        "cohorts": len({t.cohort for t in full.teams.values()}),
        "pending": len(full.pending),
        "running": len(full.running),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
        "snapshot_build_ms": round(cluster.build_ms, 1),
    }

    ms, result, parking = timed(full, NO_PREEMPTION, repeat, Parking())
    out["no_admission_first_cycle_ms"] = round(ms, 2)
    del result
    # The next cycle, as a controller runs it: one job was submitted since, and the cycle is
    # handed the last one's parking (teams whose inputs did not change are not decided again).
    ms, result, _ = timed(one_more_submitted(full), NO_PREEMPTION, repeat, parking)
    out["no_admission_cycle_ms"] = round(ms, 2)
    out["no_admission_admitted"] = len(result.admissions)
    out["no_admission_parked_teams"] = len(parking.teams) if parking else 0
    del result, parking

    ms, result, _ = timed(cluster.empty, DEFAULT, repeat)
    out["admission_cycle_ms"] = round(ms, 2)
    out["admitted"] = len(result.admissions)
    out["admissions_per_s"] = round(len(result.admissions) / (ms / 1000), 1)
    del result

    ms, result, _ = timed(cluster.urgent_only, DEFAULT, repeat)
    out["preemption_decision_ms"] = round(ms, 2)
    out["preemptions"] = _preemptions(result)
    out["preemptor"] = cluster.urgent
    del result

    ms, result, _ = timed(cluster.urgent_full, DEFAULT, repeat)
    out["preemption_cycle_full_ms"] = round(ms, 2)
    out["preemptions_full"] = _preemptions(result)
    out["admitted_full"] = len(result.admissions)
    del result

    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out


def profile(cluster: Cluster, scenario: str, top: int = 25) -> None:
    snapshots: dict[str, tuple[Snapshot, Policy]] = {
        "no_admission": (cluster.full, NO_PREEMPTION),
        "admission": (cluster.empty, DEFAULT),
        "preemption": (cluster.urgent_only, DEFAULT),
        "preemption_full": (cluster.urgent_full, DEFAULT),
    }
    snapshot, policy = snapshots[scenario]
    gc.collect()
    profiler = cProfile.Profile()
    profiler.enable()
    run_cycle(snapshot, policy)
    profiler.disable()
    print(f"--- cProfile: {scenario} cycle, top {top} by cumulative time ---", file=sys.stderr)
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(top)


def table(results: dict[str, Any]) -> str:
    width = max(len(k) for k in results)
    lines = []
    for key, value in results.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        lines.append(f"{key:<{width}}  {value}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, emit: Callable[[str], None] = print) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="S")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repeat", type=int, help="cycles per measure (default: 3; L: 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--profile",
        nargs="?",
        const="no_admission",
        choices=("no_admission", "admission", "preemption", "preemption_full"),
        help="cProfile one more cycle of this scenario; top 25 by cumulative time to stderr",
    )
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    repeat = args.repeat if args.repeat is not None else size.repeat
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    cluster = build_cluster(size, args.seed)
    results = measure(args.size, cluster, repeat)
    results["seed"] = args.seed
    emit(json.dumps(results) if args.json else table(results))
    if args.profile:
        profile(cluster, args.profile)
    return results


if __name__ == "__main__":
    main()
