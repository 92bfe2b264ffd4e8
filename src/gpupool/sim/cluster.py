"""The simulated cluster: the Philly configuration, the compared policies and what can ever run.

A policy is a transformation of the user's configuration plus the name of the team each job is
scheduled as; the scheduler itself is the production one in every case (docs/code-style.md §13):

``gpupool``          the configuration as written: borrowing in cohorts, reclaim, fair share,
                     priorities, reservations for starving jobs.
``hard-quota-fifo``  every team capped at its nominal quota (no cohorts, no borrowing), strict
                     FIFO per team: nothing of a team starts while its first job waits (the
                     per-VC FIFO setting of the Helios study).
``fifo``             one global strict-FIFO queue with no quotas: every job is scheduled as one
                     team that owns the whole cluster (metrics still count the real teams).

A *scaling* changes every pool's ``autoscale:`` before a policy is applied (:func:`scaled`):
``configured`` leaves them as written; ``fixed`` and ``fixed-spot`` keep each pool at its
``nodes``, on dedicated or spot nodes; ``autoscale`` and ``autoscale-spot`` let each follow its
demand between 0 and ``nodes`` (a pool already autoscaled keeps its floor). A run other than
``configured`` is named ``<policy>/<scaling>``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpupool.core.quota import gpuless_charge
from gpupool.spec.models import (
    Autoscale,
    ClusterConfig,
    Cohort,
    GpuType,
    NodeShape,
    Pool,
    Preemption,
    Quota,
    SchedulerSettings,
    Team,
)

POLICIES = ("hard-quota-fifo", "fifo", "gpupool")
SCALINGS = ("configured", "fixed", "fixed-spot", "autoscale", "autoscale-spot")
DEFAULT_PROVISION_DELAY_S = 300.0  # a cloud GPU VM's boot and join, roughly
DEFAULT_IDLE_TIMEOUT_S = 600
EVERYONE = "everyone"  # the one team of the fifo policy
PHILLY_GPU_TYPE = "gpu"
PHILLY_NODE_GPUS = 8
PHILLY_COHORT = "philly"
PHILLY_CYCLE_S = 10.0


class ClusterError(ValueError):
    """A cluster description that cannot be simulated; the message says what to fix."""


@dataclass(frozen=True)
class PolicySetup:
    name: str
    config: ClusterConfig
    team_of: Callable[[str], str]  # trace team -> the team its jobs are scheduled as


def read_philly_vcs(path: Path) -> dict[str, int]:
    """``vc,node num`` rows (the Helios artifact's ``philly_vc.csv``) as VC -> nodes."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise ClusterError(f"cannot read the VC sizes {path}: {exc.strerror or exc}") from exc
    sizes: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) < 2 or not row[1].strip().isdigit():
            raise ClusterError(f"{path} line {line}: expected 'vc,node num', got {row!r}")
        sizes[row[0].strip()] = int(row[1])
    if not sizes:
        raise ClusterError(f"{path} lists no virtual cluster")
    return sizes


def philly_config(
    vc_nodes: dict[str, int], trace_teams: set[str], scale: float, dedicated: bool = False
) -> ClusterConfig:
    """One team per VC with nominal = its GPUs (scaled), 8-GPU nodes, all in one cohort.

    Each VC keeps at least one node when scaled. Teams of the trace missing from the VC list
    get nominal 0: they run only on borrowed GPUs (never under hard quotas). ``dedicated``: one
    pool per VC, dedicated to it (each VC its own cluster, as in the Helios study), instead of
    one shared pool.
    """
    if not scale > 0:
        raise ClusterError(f"--capacity-scale must be above 0, got {scale}")
    nodes = {vc: max(1, round(n * scale)) for vc, n in vc_nodes.items()}
    shape = NodeShape(gpus=PHILLY_NODE_GPUS, cpus=96, memory_gb=512)
    if dedicated:
        pools = [
            Pool(
                name=f"vc-{_team_name(vc)}",
                backend="local",
                gpu_type=PHILLY_GPU_TYPE,
                nodes=count,
                node=shape,
                dedicated_to=_team_name(vc),
            )
            for vc, count in sorted(nodes.items())
        ]
    else:
        pools = [
            Pool(
                name="philly",
                backend="local",  # replaced by the simulated backend in every run
                gpu_type=PHILLY_GPU_TYPE,
                nodes=sum(nodes.values()),
                node=shape,
            )
        ]
    teams = {
        _team_name(vc): Team(
            cohort=PHILLY_COHORT,
            quota={PHILLY_GPU_TYPE: Quota(nominal=nodes.get(vc, 0) * PHILLY_NODE_GPUS)},
        )
        for vc in sorted(set(vc_nodes) | trace_teams)
    }
    return ClusterConfig(
        gpu_types={PHILLY_GPU_TYPE: GpuType()},
        pools=pools,
        cohorts={PHILLY_COHORT: Cohort(description="every Philly VC lends its idle GPUs")},
        teams=teams,
        scheduler=SchedulerSettings(cycle_interval_s=PHILLY_CYCLE_S),
    )


def _team_name(vc: str) -> str:
    """Philly VC ids are hex strings; a name must start with a letter or digit (they do)."""
    return vc.lower()


def policy_setup(config: ClusterConfig, name: str) -> PolicySetup:
    if name == "gpupool":
        return PolicySetup(name, config, lambda team: team)
    if name == "hard-quota-fifo":
        teams = {
            team_name: team.model_copy(
                update={
                    "cohort": None,
                    "quota": {
                        t: q.model_copy(update={"borrowing_limit": 0, "lending_limit": 0})
                        for t, q in team.quota.items()
                    },
                }
            )
            for team_name, team in config.teams.items()
        }
        scheduler = _fifo_settings(config.scheduler)
        capped = config.model_copy(update={"teams": teams, "cohorts": {}, "scheduler": scheduler})
        return PolicySetup(name, capped, lambda team: team)
    if name == "fifo":
        everything = {t: _whole_type(config, t) for t in config.gpu_types}
        pools = [p.model_copy(update={"dedicated_to": None}) for p in config.pools]
        one = config.model_copy(
            update={
                "teams": {EVERYONE: Team(quota=everything)},
                "cohorts": {},
                "pools": pools,
                "scheduler": _fifo_settings(config.scheduler),
            }
        )
        return PolicySetup(name, one, lambda team: EVERYONE)
    raise ClusterError(f"unknown policy {name!r}: use one of {', '.join(POLICIES)}")


def scaled(
    config: ClusterConfig,
    scaling: str,
    provision_delay_s: float = DEFAULT_PROVISION_DELAY_S,
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S,
) -> ClusterConfig:
    """``config`` with every pool sized as ``scaling`` says (see the module docstring)."""
    if scaling not in SCALINGS:
        raise ClusterError(f"unknown scaling {scaling!r}: use one of: {', '.join(SCALINGS)}")
    if scaling == "configured":
        return config
    mode, _, spot = scaling.partition("-")
    pools = []
    for pool in config.pools:
        was = pool.autoscale
        floor = (was.min_nodes, was.warm_nodes) if was.mode == "autoscale" else (0, 0)
        scale = Autoscale(
            mode="autoscale" if mode == "autoscale" else "fixed",
            min_nodes=min(floor[0], pool.nodes),
            warm_nodes=min(floor[1], pool.nodes),
            idle_timeout_s=idle_timeout_s,
            provision_delay_s=provision_delay_s,
            node_type="spot" if spot else "dedicated",
        )
        pools.append(pool.model_copy(update={"autoscale": scale}))
    return config.model_copy(update={"pools": pools})


def priced(config: ClusterConfig, dedicated: float | None, spot: float | None) -> ClusterConfig:
    """``config`` with every gpu type's price per GPU-hour (and spot price) set, when given."""
    update: dict[str, float] = {}
    if dedicated is not None:
        update["price_per_gpu_hour"] = dedicated
    if spot is not None:
        update["spot_price_per_gpu_hour"] = spot
    if not update:
        return config
    types = {name: t.model_copy(update=update) for name, t in config.gpu_types.items()}
    return config.model_copy(update={"gpu_types": types})


def _whole_type(config: ClusterConfig, gpu_type: str) -> Quota:
    """Every GPU, CPU and GB of a gpu type's pools (GPU-less work included)."""
    on = [p for p in config.pools if p.gpu_type == gpu_type]
    return Quota(
        nominal=sum(p.nodes * p.node.gpus for p in on),
        cpus=sum(p.nodes * p.node.cpus for p in on),
        memory_gb=sum(p.nodes * p.node.memory_gb for p in on),
    )


def _fifo_settings(settings: SchedulerSettings) -> SchedulerSettings:
    """Strict FIFO without preemption or reservations: the head simply waits for room."""
    never = Preemption(within_team="never", reclaim="never")
    return settings.model_copy(
        update={"queueing": "strict_fifo", "starvation_after_s": None, "preemption": never}
    )


@dataclass(frozen=True, slots=True)
class Shape:
    """A job as the scheduler sees it: ``gpus`` per node on ``nodes`` nodes."""

    gpus: int
    nodes: int

    @property
    def total(self) -> int:
        return self.gpus * self.nodes


def job_shape(gpus: int, nodes: int | None, node_gpus: int) -> Shape:
    """Jobs that fit one node take one node; larger ones are gangs of whole nodes (a 12-GPU
    job holds two 8-GPU nodes). With ``nodes`` given, the GPUs are spread evenly."""
    if nodes is not None:
        return Shape(math.ceil(gpus / nodes) if gpus else 0, nodes)
    if gpus <= node_gpus or node_gpus <= 0:
        return Shape(gpus, 1)
    return Shape(node_gpus, math.ceil(gpus / node_gpus))


def largest_node(config: ClusterConfig, gpu_types: tuple[str, ...]) -> int:
    sizes = [p.node.gpus for p in config.pools if not gpu_types or p.gpu_type in gpu_types]
    return max(sizes, default=0)


def never_runs(config: ClusterConfig, team: str, shape: Shape, gpu_types: tuple[str, ...]) -> str:
    """Why a job of ``team`` can never start under ``config`` ('' when it can): on every
    acceptable gpu type it needs more than the team may ever hold (nominal plus what it may
    borrow; for a GPU-less job, its cap on GPU-less work: the simulator's jobs ask for no CPUs,
    so each node counts the minimum) or than any pool it may use could hold when empty."""
    spec = config.teams.get(team)
    if spec is None:
        return f"team {team} is not in the configuration"
    types = gpu_types or tuple(config.gpu_types)
    why = []
    for gpu_type in types:
        pools = [
            p for p in config.pools if p.gpu_type == gpu_type and p.dedicated_to in (None, team)
        ]
        if not any(p.nodes >= shape.nodes and p.node.gpus >= shape.gpus for p in pools):
            why.append(f"no {gpu_type} pool holds {shape.nodes} x {shape.gpus} GPUs")
            continue
        if shape.gpus == 0:
            cap = config.gpuless_caps()[team][gpu_type][0]
            need = gpuless_charge(0.0, 0.0, shape.nodes)[0]
            if need > cap:
                why.append(
                    f"a GPU-less job of {shape.nodes} nodes counts {need:g} CPUs on {gpu_type}, "
                    f"{team} may hold {cap:g}"
                )
                continue
        limit = _quota_ceiling(config, team, gpu_type)
        if shape.total > limit:
            why.append(f"needs {shape.total} {gpu_type} GPUs, {team} may hold at most {limit}")
            continue
        return ""
    return "; ".join(why) or "no gpu type to run on"


def _quota_ceiling(config: ClusterConfig, team: str, gpu_type: str) -> int:
    spec = config.teams[team]
    own = spec.quota.get(gpu_type, Quota())
    if spec.cohort is None:
        return own.nominal
    lendable = sum(
        (q.nominal if q.lending_limit is None else min(q.lending_limit, q.nominal))
        for name, other in config.teams.items()
        if name != team and other.cohort == spec.cohort
        for t, q in other.quota.items()
        if t == gpu_type
    )
    borrow = lendable if own.borrowing_limit is None else min(own.borrowing_limit, lendable)
    return own.nominal + borrow


def scale_config(config: ClusterConfig, scale: float) -> ClusterConfig:
    """Every pool's nodes and every quota number times ``scale`` (at least one node a pool)."""
    if not scale > 0:
        raise ClusterError(f"--capacity-scale must be above 0, got {scale}")
    if scale == 1:
        return config

    def times(value: int | None) -> int | None:
        return None if value is None else round(value * scale)

    pools = [p.model_copy(update={"nodes": max(1, round(p.nodes * scale))}) for p in config.pools]
    teams = {
        name: team.model_copy(
            update={
                "quota": {
                    t: Quota(
                        nominal=round(q.nominal * scale),
                        borrowing_limit=times(q.borrowing_limit),
                        lending_limit=times(q.lending_limit),
                        cpus=None if q.cpus is None else q.cpus * scale,
                        memory_gb=None if q.memory_gb is None else q.memory_gb * scale,
                    )
                    for t, q in team.quota.items()
                }
            }
        )
        for name, team in config.teams.items()
    }
    return config.model_copy(update={"pools": pools, "teams": teams})
