"""Rules that relate the sections of a configuration to each other.

The models check each value on its own; these checks run on a ``ClusterConfig`` that parsed,
and find references to things that do not exist and settings that cannot do what they say.
Each check is a small function returning findings at the loc of the offending value, so that
the loader can point at its line; ``check_config`` runs them all and never stops at the first.

Decisions recorded here:

* Priority classes: at most one may be ``default: true``. None is fine — jobs that name no
  class then get the lowest-valued one (``ClusterConfig.default_priority_class``). At least
  one class must exist (an explicit empty ``priority_classes: {}`` leaves jobs without any).
* ``borrowing_limit`` / ``lending_limit`` on a team without a cohort is an error, not a
  silent no-op: whoever wrote it expected borrowing to happen.
* A pool of a gpu type other than ``cpu`` needs GPUs on its nodes, and a ``cpu`` pool none:
  otherwise the pool either offers nothing or hides GPUs the scheduler never hands out.
* A quota of the ``cpu`` type counts no GPUs: ``nominal``, ``borrowing_limit`` and
  ``lending_limit`` there are errors (they would bound nothing); ``cpus`` and ``memory_gb`` are
  what bound a team's jobs on ``cpu`` pools.
* A pool on a backend no adapter is registered for (``gpupool.backends.registry.ADAPTERS``
  decides) is an error, and so is ``autoscale.mode: autoscale`` on a backend nobody sizes.
  The controller sizes autoscaled ``local`` pools itself (:data:`AUTOSCALED_BY_CONTROLLER`);
  on ``azure-batch`` Batch's own formula sizes the pool. Either way ``nodes:`` is the most
  the pool may have (the scheduler plans and quotas are computed with it), and ``max_nodes``
  must agree with it (an autoscaled Batch pool must give it).
* A budget sets exactly one limit (``gpu_hours`` or ``amount``); only a ``custom`` period takes
  ``start`` and ``end``, and it needs both. Budget names are unique within a team (alerts and
  ``gpupool budget set`` name a budget by team and name), and so are webhook names.
* Names of gpu types, teams and cohorts follow the pool-name rule (DNS labels), because they
  become Kubernetes namespaces, labels and ResourceFlavor names (docs/requirements.md K1).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpupool.backends.registry import implemented
from gpupool.data.roots import RootProblem, parse_root
from gpupool.spec.currencies import ISO_4217
from gpupool.spec.models import BACKENDS, NAME_PATTERN, ClusterConfig, Pool, Quota
from gpupool.spec.problems import (
    Finding,
    did_you_mean,
    format_path,
    quoted_list,
    unknown_name_hint,
)
from gpupool.spec.schema_errors import NAME_RULE

CPU_TYPE = "cpu"

Check = Callable[[ClusterConfig], Iterator[Finding]]


def check_config(config: ClusterConfig) -> list[Finding]:
    """All cross-reference findings of ``config``, section by section."""
    return [finding for check in CHECKS for finding in check(config)]


def check_names(config: ClusterConfig) -> Iterator[Finding]:
    """Names that become Kubernetes names are DNS labels, like pool names."""
    sections: list[tuple[str, str, Iterable[str]]] = [
        ("gpu_types", "gpu type", config.gpu_types),
        ("teams", "team", config.teams),
        ("cohorts", "cohort", config.cohorts),
    ]
    for section, what, names in sections:
        for name in names:
            if not re.match(NAME_PATTERN, name):
                yield Finding((section, name), f"invalid {what} name {name!r}", NAME_RULE)


def check_pools(config: ClusterConfig) -> Iterator[Finding]:
    """Unique names, known gpu type and team, GPUs per node matching the type, sane autoscale."""
    first_index: dict[str, int] = {}
    for i, pool in enumerate(config.pools):
        if pool.name in first_index:
            yield Finding(
                ("pools", i, "name"),
                f"duplicate pool name {pool.name!r} (also pools[{first_index[pool.name]}])",
                "give every pool a unique name",
            )
        else:
            first_index[pool.name] = i
        if pool.gpu_type not in config.gpu_types:
            yield Finding(
                ("pools", i, "gpu_type"),
                f"unknown gpu type {pool.gpu_type!r}",
                unknown_name_hint(pool.gpu_type, "gpu_types", config.gpu_types),
            )
        if pool.dedicated_to is not None and pool.dedicated_to not in config.teams:
            yield Finding(
                ("pools", i, "dedicated_to"),
                f"unknown team {pool.dedicated_to!r}",
                unknown_name_hint(pool.dedicated_to, "teams", config.teams),
            )
        if pool.gpu_type != CPU_TYPE and pool.node.gpus == 0:
            yield Finding(
                ("pools", i, "node", "gpus"),
                f"pool {pool.name!r} of gpu type {pool.gpu_type!r} has no GPUs per node",
                f"set node.gpus to at least 1, or use gpu_type {CPU_TYPE!r} for GPU-less nodes",
            )
        if pool.gpu_type == CPU_TYPE and pool.node.gpus > 0:
            yield Finding(
                ("pools", i, "node", "gpus"),
                f"pool {pool.name!r} of gpu type {CPU_TYPE!r} has GPUs on its nodes",
                "set node.gpus: 0, or name the GPU model as the pool's gpu_type",
            )
        if not implemented(pool.backend):
            usable = ", ".join(b for b in BACKENDS if implemented(b))
            yield Finding(
                ("pools", i, "backend"),
                f"backend {pool.backend!r} has no adapter yet: jobs sent to pool {pool.name!r} "
                "could never run",
                f"use one of: {usable}",
            )
        scale = pool.autoscale
        if scale.mode == "autoscale" and pool.backend == "azure-batch":
            yield from _batch_autoscale(i, pool.name, pool.nodes, scale.max_nodes)
        elif scale.mode == "autoscale" and pool.backend in AUTOSCALED_BY_CONTROLLER:
            yield from _controller_autoscale(i, pool.name, pool.nodes, scale.max_nodes)
        elif scale.mode == "autoscale":
            yield Finding(
                ("pools", i, "autoscale", "mode"),
                f"autoscaling is not implemented yet: pool {pool.name!r} would never get more "
                "nodes than it has",
                "use 'mode: fixed' and set nodes: to the pool's size",
            )
        if scale.max_nodes is not None and scale.min_nodes > scale.max_nodes:
            yield Finding(
                ("pools", i, "autoscale", "max_nodes"),
                f"max_nodes {scale.max_nodes} is below min_nodes {scale.min_nodes}",
                f"set max_nodes to at least {scale.min_nodes}",
            )
        if scale.max_nodes is not None and scale.warm_nodes > scale.max_nodes:
            yield Finding(
                ("pools", i, "autoscale", "warm_nodes"),
                f"warm_nodes {scale.warm_nodes} is above max_nodes {scale.max_nodes}",
                f"set warm_nodes to at most {scale.max_nodes}",
            )
        if scale.mode == "autoscale" and scale.max_nodes is None:
            for key, value in (("min_nodes", scale.min_nodes), ("warm_nodes", scale.warm_nodes)):
                if value > pool.nodes:
                    yield Finding(
                        ("pools", i, "autoscale", key),
                        f"{key} {value} is above the pool's nodes: {pool.nodes}, its most",
                        f"set nodes: to at least {value}, or {key} to at most {pool.nodes}",
                    )


def _batch_autoscale(i: int, name: str, nodes: int, max_nodes: int | None) -> Iterator[Finding]:
    """An autoscaled Azure Batch pool is sized by Batch's formula (``gpupool export
    azure-batch``); the scheduler plans with ``nodes:``, the most the formula may start."""
    if max_nodes is None:
        yield Finding(
            ("pools", i, "autoscale", "max_nodes"),
            f"autoscaled azure-batch pool {name!r} has no max_nodes",
            f"set max_nodes: {nodes} (the same as nodes:, which the scheduler plans with)",
        )
    elif max_nodes != nodes:
        yield Finding(
            ("pools", i, "nodes"),
            f"autoscaled azure-batch pool {name!r} has nodes: {nodes} but max_nodes: {max_nodes}",
            f"set nodes: {max_nodes}: the scheduler plans with nodes:, the most Batch may start",
        )


# Backends whose pools the controller sizes itself (controller/autoscaler.py): their nodes are
# the controller's to add and release. Other backends size their pools themselves.
AUTOSCALED_BY_CONTROLLER = ("local",)


def _controller_autoscale(
    i: int, name: str, nodes: int, max_nodes: int | None
) -> Iterator[Finding]:
    """An autoscaled pool has at most ``nodes:`` nodes: quotas and caps are computed with it,
    so ``max_nodes``, when given, must say the same."""
    if max_nodes is not None and max_nodes != nodes:
        yield Finding(
            ("pools", i, "nodes"),
            f"autoscaled pool {name!r} has nodes: {nodes} but max_nodes: {max_nodes}",
            f"set nodes: {max_nodes} (the most nodes the pool may have), or leave max_nodes out",
        )


def check_backend_options(config: ClusterConfig) -> Iterator[Finding]:
    """Each pool's ``options:`` as its backend's adapter will parse them: unknown keys (with
    the nearest known one), missing keys and bad values, before any job is sent there."""
    from gpupool.backends.options import check_options  # no backend SDK is imported

    for i, pool in enumerate(config.pools):
        found = check_options(pool.backend, pool.name, pool.gpu_type, pool.options)
        for key in found.unknown:
            yield Finding(
                ("pools", i, "options", key),
                f"unknown {pool.backend} pool option {key!r}",
                f"{did_you_mean(key, found.known)}known options: {quoted_list(found.known)}",
            )
        if found.error is not None:
            yield Finding(
                ("pools", i, "options") if pool.options else ("pools", i, "backend"),
                found.error,
                f"see the {pool.backend} backend's README for its options",
            )


def check_priority_classes(config: ClusterConfig) -> Iterator[Finding]:
    """At least one class, at most one default (see the module docstring)."""
    classes = config.priority_classes
    if not classes:
        yield Finding(
            ("priority_classes",),
            "no priority classes",
            "define at least one, e.g. 'default: {value: 0}', or remove the key",
        )
    defaults = [name for name, cls in classes.items() if cls.default]
    for name in defaults[1:]:
        yield Finding(
            ("priority_classes", name, "default"),
            f"more than one default priority class ({', '.join(defaults)})",
            f"keep 'default: true' on one class only, e.g. {defaults[0]!r}",
        )


def check_teams(config: ClusterConfig) -> Iterator[Finding]:
    """Known cohort, default class and members; quota per gpu type via ``_check_quota``."""
    for name, team in config.teams.items():
        at = ("teams", name)
        if team.cohort is not None and team.cohort not in config.cohorts:
            yield Finding(
                (*at, "cohort"),
                f"unknown cohort {team.cohort!r}",
                unknown_name_hint(team.cohort, "cohorts", config.cohorts),
            )
        wanted = team.default_priority_class
        if wanted is not None and wanted not in config.priority_classes:
            yield Finding(
                (*at, "default_priority_class"),
                f"unknown priority class {wanted!r}",
                unknown_name_hint(wanted, "priority_classes", config.priority_classes),
            )
        for user in team.members:
            if user not in config.users:
                yield Finding(
                    (*at, "members", user),
                    f"{user!r} is not a user",
                    unknown_name_hint(user, "users", config.users),
                )
        yield from _check_quota(config, name)


def _check_quota(config: ClusterConfig, team_name: str) -> Iterator[Finding]:
    """Known gpu type; no GPU numbers on the cpu type; limits only inside a cohort; a team lends
    at most its nominal."""
    team = config.teams[team_name]
    for gpu_type, quota in team.quota.items():
        at = ("teams", team_name, "quota", gpu_type)
        if gpu_type not in config.gpu_types:
            yield Finding(
                at,
                f"unknown gpu type {gpu_type!r}",
                unknown_name_hint(gpu_type, "gpu_types", config.gpu_types),
            )
        if gpu_type == CPU_TYPE:
            yield from _check_cpu_quota(team_name, quota)
            continue
        if team.cohort is None:
            for limit in ("borrowing_limit", "lending_limit"):
                if getattr(quota, limit) is not None:
                    yield Finding(
                        (*at, limit),
                        f"{limit} has no effect: team {team_name!r} is in no cohort",
                        f"set 'cohort:' on {format_path(('teams', team_name))} or remove {limit}",
                    )
        if quota.lending_limit is not None and quota.lending_limit > quota.nominal:
            yield Finding(
                (*at, "lending_limit"),
                f"lending_limit {quota.lending_limit} is more than nominal {quota.nominal}",
                f"set lending_limit to at most {quota.nominal}: a team lends only its nominal",
            )


def _check_cpu_quota(team_name: str, quota: Quota) -> Iterator[Finding]:
    """The ``cpu`` type has no GPUs: only its ``cpus`` and ``memory_gb`` caps mean anything."""
    at = ("teams", team_name, "quota", CPU_TYPE)
    hint = (
        f"remove it and bound the team's jobs on {CPU_TYPE!r} pools with cpus: and memory_gb: "
        f"under {format_path(at)}"
    )
    if quota.nominal:
        yield Finding(
            (*at, "nominal"), f"nominal counts GPUs, and {CPU_TYPE!r} pools have none", hint
        )
    for limit in ("borrowing_limit", "lending_limit"):
        if getattr(quota, limit) is not None:
            yield Finding(
                (*at, limit),
                f"{limit} counts GPUs, and {CPU_TYPE!r} pools have none "
                "(GPU-less work never borrows)",
                hint,
            )


def check_scheduler(config: ClusterConfig) -> Iterator[Finding]:
    """``gpu_type_order`` lists known gpu types, each once."""
    seen: set[str] = set()
    for i, gpu_type in enumerate(config.scheduler.gpu_type_order):
        at = ("scheduler", "gpu_type_order", i)
        if gpu_type not in config.gpu_types:
            yield Finding(
                at,
                f"unknown gpu type {gpu_type!r}",
                unknown_name_hint(gpu_type, "gpu_types", config.gpu_types),
            )
        elif gpu_type in seen:
            yield Finding(at, f"gpu type {gpu_type!r} is listed twice", "list each type once")
        seen.add(gpu_type)


def check_storage(config: ClusterConfig) -> Iterator[Finding]:
    """Storage roots parse (see ``gpupool.data.roots``) and per-team roots name known teams."""
    storage = config.storage
    hint = "see docs/data.md (per-job data grants)"
    if storage.root is not None:
        # Every team without a root of its own gets one under the shared root: each must parse
        # (an az:// root becomes a container per team, and container names have rules).
        for team in [t for t in config.teams if t not in storage.teams] or ["team"]:
            try:
                parse_root(storage.root, team)
            except RootProblem as exc:
                yield Finding(("storage", "root"), f"team {team}: {exc}", hint)
                break
    for team, uri in storage.teams.items():
        at = ("storage", "teams", team)
        if team not in config.teams:
            yield Finding(
                at, f"unknown team {team!r}", unknown_name_hint(team, "teams", config.teams)
            )
        try:
            parse_root(uri, None)
        except RootProblem as exc:
            yield Finding(at, str(exc), hint)


def check_accounting(config: ClusterConfig) -> Iterator[Finding]:
    """The currency is an ISO 4217 code, the timezone an IANA zone this machine knows, and a
    ledger gap is longer than an accrual interval."""
    accounting = config.accounting
    if accounting.currency not in ISO_4217:
        yield Finding(
            ("accounting", "currency"),
            f"unknown currency {accounting.currency!r}",
            "use an ISO 4217 code in capitals, such as USD, EUR or GBP",
        )
    try:
        ZoneInfo(accounting.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        yield Finding(
            ("accounting", "timezone"),
            f"unknown timezone {accounting.timezone!r}",
            "use an IANA zone name such as UTC, Europe/Paris or America/New_York",
        )
    gap_after = accounting.gap_after_s
    if gap_after is not None and gap_after <= accounting.accrual_interval_s:
        yield Finding(
            ("accounting", "gap_after_s"),
            f"gap_after_s ({gap_after:g} s) is not longer than accrual_interval_s "
            f"({accounting.accrual_interval_s:g} s): every accrual would be a gap",
            "make it a few accrual intervals, or leave it out (3 x accrual_interval_s + 30 s)",
        )


def check_team_gids(config: ClusterConfig) -> Iterator[Finding]:
    """A team gid owns the team's ``shared/``: two teams with one gid would share it."""
    owner: dict[int, str] = {}
    for name, team in config.teams.items():
        if team.gid is None:
            continue
        if team.gid in owner:
            yield Finding(
                ("teams", name, "gid"),
                f"gid {team.gid} is also team {owner[team.gid]!r}'s",
                "give each team a group of its own",
            )
        else:
            owner[team.gid] = name


def check_budgets(config: ClusterConfig) -> Iterator[Finding]:
    """Each team's budgets: one limit, a period that can be computed, known gpu type, unique
    names; thresholds in (0, 1000] percent."""
    for team_name, team in config.teams.items():
        seen: dict[str, int] = {}
        for i, budget in enumerate(team.budgets):
            at = ("teams", team_name, "budgets", i)
            if budget.name in seen:
                yield Finding(
                    (*at, "name"),
                    f"duplicate budget name {budget.name!r} (also budgets[{seen[budget.name]}])",
                    "give each budget of a team its own name",
                )
            seen.setdefault(budget.name, i)
            if (budget.gpu_hours is None) == (budget.amount is None):
                yield Finding(
                    at,
                    f"budget {budget.name!r} needs exactly one limit: gpu_hours or amount",
                    f"set gpu_hours: N (GPU-hours) or amount: N ({config.accounting.currency})",
                )
            if budget.period == "custom":
                if budget.start is None or budget.end is None:
                    yield Finding(
                        at,
                        f"custom budget {budget.name!r} needs start and end",
                        "set start: and end: to dates (YYYY-MM-DD, both days included)",
                    )
                elif budget.end < budget.start:
                    yield Finding(
                        (*at, "end"),
                        f"end {budget.end} is before start {budget.start}",
                        f"set end to {budget.start} or later",
                    )
            else:
                for key in ("start", "end"):
                    if getattr(budget, key) is not None:
                        yield Finding(
                            (*at, key),
                            f"{key} applies to custom periods only, not {budget.period!r}",
                            f"remove {key}, or set period: custom",
                        )
            if budget.gpu_type is not None and budget.gpu_type not in config.gpu_types:
                yield Finding(
                    (*at, "gpu_type"),
                    f"unknown gpu type {budget.gpu_type!r}",
                    unknown_name_hint(budget.gpu_type, "gpu_types", config.gpu_types),
                )
            for j, threshold in enumerate(budget.thresholds):
                if not 0 < threshold <= 1000:
                    yield Finding(
                        (*at, "thresholds", j),
                        f"threshold {threshold:g} is not a percentage in (0, 1000]",
                        "use percents of the limit, e.g. [50, 80, 100]",
                    )


def check_webhooks(config: ClusterConfig) -> Iterator[Finding]:
    """Webhook names are unique: deliveries name their target."""
    seen: set[str] = set()
    for i, hook in enumerate(config.accounting.webhooks):
        if hook.name in seen:
            yield Finding(
                ("accounting", "webhooks", i, "name"),
                f"duplicate webhook name {hook.name!r}",
                "give each webhook its own name",
            )
        seen.add(hook.name)


# Which runtimes each backend can run images with (docs/containers.md).
# Backends whose adapters run every job from an image by nature (a pod's container, an Azure ML
# environment): their pools run images without a ``container_runtime``, and ``allowed_images``
# alone says which.
NATIVE_IMAGE_BACKENDS = ("kubernetes", "azure-ml")


def runs_images(pool: Pool) -> bool:
    """Whether jobs with an ``image`` may run on ``pool``."""
    return pool.container_runtime is not None or pool.backend in NATIVE_IMAGE_BACKENDS


RUNTIMES_BY_BACKEND: dict[str, tuple[str, ...]] = {
    "local": ("podman", "docker"),
    "slurm": ("pyxis", "podman", "apptainer"),
    "ray": ("podman",),
}


def check_containers(config: ClusterConfig) -> Iterator[Finding]:
    """A pool's container runtime fits its backend, and images are allowed only with one."""
    for i, pool in enumerate(config.pools):
        runtime = pool.container_runtime
        fits = RUNTIMES_BY_BACKEND.get(pool.backend, ())
        if runtime is not None and runtime not in fits:
            yield Finding(
                ("pools", i, "container_runtime"),
                f"{pool.backend} pools cannot run images with {runtime}",
                f"use one of: {', '.join(fits)}" if fits else "remove container_runtime",
            )
        if not runs_images(pool) and pool.allowed_images:
            yield Finding(
                ("pools", i, "allowed_images"),
                f"pool {pool.name!r} allows images but has no container_runtime to run them",
                f"set container_runtime ({', '.join(fits) or 'none fits this backend'}), "
                "or remove allowed_images",
            )
        shares_network = runtime in fits and pool.backend in ("slurm", "ray")
        shares_network = shares_network and (runtime == "pyxis" or pool.backend == "ray")
        if shares_network and not pool.containers.network:
            yield Finding(
                ("pools", i, "containers"),
                f"{'enroot (pyxis)' if runtime == 'pyxis' else 'Ray'} containers share the "
                f"node's network: pool {pool.name!r} cannot run images without it",
                "set containers: {network: true} to accept that, or use podman on a local "
                "or slurm pool",
            )
        if runtime == "pyxis" and pool.containers.pull_secrets:
            yield Finding(
                ("pools", i, "containers", "pull_secrets"),
                "pyxis pulls with enroot's own credentials file on the nodes, not per job",
                "remove pull_secrets and configure enroot's credentials on the nodes",
            )
        for j, pattern in enumerate(pool.allowed_images):
            if not pattern.strip() or any(c.isspace() for c in pattern):
                yield Finding(
                    ("pools", i, "allowed_images", j),
                    f"image pattern {pattern!r} is empty or contains whitespace",
                    "write a glob of image references, e.g. ghcr.io/acme/*",
                )


CHECKS: tuple[Check, ...] = (
    check_names,
    check_pools,
    check_backend_options,
    check_priority_classes,
    check_teams,
    check_team_gids,
    check_scheduler,
    check_storage,
    check_accounting,
    check_budgets,
    check_webhooks,
    check_containers,
)
