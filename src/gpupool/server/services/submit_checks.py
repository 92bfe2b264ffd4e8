"""Checks of a submit body against the applied configuration.

Each check returns problems as ``{"field", "message"}`` dicts so that one 422 can name
every offending field at once. Nothing here touches the store.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpupool.auth.principal import Action, Principal
from gpupool.backends.registry import runs_gangs
from gpupool.config import LIMIT_VARIABLES, ServerLimits
from gpupool.core.errors import InvalidRequest
from gpupool.data.paths import check_job_paths
from gpupool.server.schemas import SERVER_OWNED, JobSubmit
from gpupool.spec.models import ClusterConfig

RESERVED_ENV_PREFIXES = ("GPUPOOL_",)
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES"})


def describe_validation_error(error: Any) -> dict[str, str]:
    """One pydantic error as ``{"field", "message"}``, naming server-owned fields as such."""
    loc = [str(p) for p in error["loc"]]
    where = loc[0] if loc else ""
    field = ".".join(loc[1:] if where in ("body", "query", "path", "header") else loc) or "body"
    if error["type"] == "extra_forbidden":
        if where == "body" and len(loc) == 2 and loc[1] in SERVER_OWNED:
            return {
                "field": field,
                "message": f"'{field}' is set by the server and cannot be submitted; remove it",
            }
        return {"field": field, "message": f"unknown field '{field}'; remove it"}
    return {"field": field, "message": str(error["msg"])}


def _summary(problems: list[dict[str, str]]) -> str:
    fields = ", ".join(p["field"] for p in problems)
    return f"invalid job: {len(problems)} problem(s) in {fields}"


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _over(field: str, what: str, limit: str, setting: str) -> dict[str, str]:
    variable = LIMIT_VARIABLES[setting]
    return {"field": field, "message": f"{what}; the limit is {limit} ({variable})"}


def check_sizes(body: JobSubmit, limits: ServerLimits) -> None:
    """One 422 naming each field of ``body`` past a size limit, and the limit: a job row is
    read by every list and status query, so its size is bounded however large the body."""
    problems: list[dict[str, str]] = []
    if len(body.env) > limits.max_env_entries:
        problems.append(
            _over(
                "env", f"{len(body.env)} variables", str(limits.max_env_entries), "max_env_entries"
            )
        )
    env_bytes = sum(_utf8(k) + _utf8(v) for k, v in body.env.items())
    if env_bytes > limits.max_env_bytes:
        problems.append(
            _over(
                "env",
                f"{env_bytes} bytes of names and values",
                f"{limits.max_env_bytes} bytes",
                "max_env_bytes",
            )
        )
    if len(body.command) > limits.max_command_args:
        problems.append(
            _over(
                "command",
                f"{len(body.command)} arguments",
                str(limits.max_command_args),
                "max_command_args",
            )
        )
    command_bytes = sum(_utf8(part) for part in body.command)
    if command_bytes > limits.max_command_bytes:
        problems.append(
            _over(
                "command",
                f"{command_bytes} bytes of arguments",
                f"{limits.max_command_bytes} bytes",
                "max_command_bytes",
            )
        )
    for field in ("inputs", "outputs"):
        count = len(getattr(body, field))
        if count > limits.max_data_paths:
            problems.append(
                _over(field, f"{count} paths", str(limits.max_data_paths), "max_data_paths")
            )
    if problems:
        raise InvalidRequest(_summary(problems), problems)


def request_digest(body: JobSubmit, team: str) -> str:
    """What an idempotency key stands for: the submit as the server reads it (defaults filled
    in, the team resolved), so two bodies that ask for the same job digest the same, however
    they are spelt. The key itself is left out."""
    fields = body.model_dump(mode="json", exclude={"idempotency_key"})
    if fields.get("checkpoint_interval_s") is None:
        del fields["checkpoint_interval_s"]  # unset: the digest keys stored before it had
    for name in ("image", "image_pull_secret", "container"):
        if fields.get(name) is None:
            del fields[name]  # likewise: a job without an image digests as before images
    fields["team"] = team
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def resolve_team(body: JobSubmit, principal: Principal, config: ClusterConfig) -> str:
    if body.team is not None:
        if body.team not in config.teams:
            known = ", ".join(sorted(config.teams))
            raise InvalidRequest(
                f"unknown team '{body.team}'",
                [{"field": "team", "message": f"unknown team; known teams: {known}"}],
            )
        return body.team
    writable = sorted(t for t in principal.roles if principal.can(Action.MUTATE, t))
    if len(writable) == 1:
        return writable[0]
    choices = ", ".join(writable) or "none"
    raise InvalidRequest(
        "team is required",
        [{"field": "team", "message": f"name the team to submit for (yours: {choices})"}],
    )


def check_data_paths(body: JobSubmit, user: str) -> tuple[list[str], list[str]]:
    """Canonical inputs and outputs of the body (see ``gpupool.data.paths``), or one 422
    naming each bad path as ``inputs[i]`` / ``outputs[i]``."""
    inputs, outputs, problems = check_job_paths(body.inputs, body.outputs, user)
    if problems:
        raise InvalidRequest(_summary(problems), problems)
    return inputs, outputs


def check_against_config(body: JobSubmit, team: str, config: ClusterConfig) -> list[str]:
    """Validate names and feasibility; returns the gpu types the job may use, in order."""
    problems: list[dict[str, str]] = []
    if body.priority_class is not None and body.priority_class not in config.priority_classes:
        known = ", ".join(config.priority_classes)
        problems.append(
            {"field": "priority_class", "message": f"unknown priority class; use one of: {known}"}
        )
    unknown = [t for t in body.resources.gpu_types if t not in config.gpu_types]
    if unknown:
        known = ", ".join(config.gpu_types)
        problems.append(
            {
                "field": "resources.gpu_types",
                "message": f"unknown gpu type(s) {', '.join(unknown)}; use any of: {known}",
            }
        )
    backends = sorted({p.backend for p in config.pools})
    if body.backend != "auto" and body.backend not in backends:
        problems.append(
            {
                "field": "backend",
                "message": f"no pool uses backend '{body.backend}'; use auto or one of: "
                + ", ".join(backends),
            }
        )
    for key in body.env:
        if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
            problems.append(
                {"field": f"env.{key}", "message": "reserved: gpupool sets this variable itself"}
            )
    if any(not part for part in body.command[:1]):
        problems.append({"field": "command", "message": "the program name must not be empty"})
    if problems:
        raise InvalidRequest(_summary(problems), problems)
    types = body.resources.gpu_types or config.gpu_type_order()
    usable = _feasible_types(body, team, config, types)
    if not usable and body.resources.nodes > 1:
        sized = _feasible_types(body, team, config, types, gangs_only=False)
        if sized:  # large enough pools exist, but none whose backend runs multi-node jobs
            raise InvalidRequest(
                "no pool could ever run this job",
                [{"field": "resources.nodes", "message": _no_gang_message(body, config, sized)}],
            )
    if not usable:
        raise InvalidRequest(
            "no pool could ever run this job",
            [{"field": "resources", "message": _infeasible_message(body, team, config, types)}],
        )
    # A job pinned to one backend may only use gpu types that backend offers.
    return list(body.resources.gpu_types) if body.backend == "auto" else usable


def _pools_for(team: str, config: ClusterConfig, gpu_type: str, backend: str) -> list[Any]:
    return [
        p
        for p in config.pools
        if p.gpu_type == gpu_type
        and p.dedicated_to in (None, team)
        and (backend == "auto" or p.backend == backend)
    ]


def _feasible_types(
    body: JobSubmit, team: str, config: ClusterConfig, types: list[str], gangs_only: bool = True
) -> list[str]:
    """The gpu types with a pool large enough for the job, and, for a multi-node job (unless
    ``gangs_only`` is off), whose backend runs multi-node jobs."""
    res = body.resources
    return [
        t
        for t in types
        if any(
            p.node.gpus >= res.gpus
            and p.nodes >= res.nodes
            and p.node.cpus >= res.cpus
            and p.node.memory_gb >= res.memory_gb
            and (res.nodes == 1 or not gangs_only or runs_gangs(p.backend))
            for p in _pools_for(team, config, t, body.backend)
        )
    ]


def _no_gang_message(body: JobSubmit, config: ClusterConfig, types: list[str]) -> str:
    single = sorted({p.backend for p in config.pools if p.gpu_type in types})
    gangs = sorted({p.backend for p in config.pools if runs_gangs(p.backend)})
    fix = f"use a pool on {', '.join(gangs)}" if gangs else "no configured backend runs them"
    return (
        f"asked for {body.resources.nodes} nodes, but the pools that could hold them run on "
        f"{', '.join(single)}, which run single-node jobs only; use nodes: 1, or {fix}"
    )


def _infeasible_message(body: JobSubmit, team: str, config: ClusterConfig, types: list[str]) -> str:
    res = body.resources
    parts = []
    for t in types:
        pools = _pools_for(team, config, t, body.backend)
        if not pools:
            parts.append(f"{t}: no pool team {team} may use")
            continue
        biggest = max(pools, key=lambda p: (p.node.gpus, p.nodes))
        parts.append(
            f"{t}: largest pool has {biggest.nodes} node(s) of {biggest.node.gpus} GPUs, "
            f"{biggest.node.cpus:g} cpus, {biggest.node.memory_gb:g} GB"
        )
    asked = f"{res.nodes} node(s) x {res.gpus} GPUs, {res.cpus:g} cpus, {res.memory_gb:g} GB"
    return f"asked for {asked}; " + "; ".join(parts)
