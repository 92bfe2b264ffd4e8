"""The ``options:`` of a Slurm pool, validated once when the adapter is built.

Unknown keys are an error (``partiton: t4`` must not silently submit to the default partition).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpupool.backends.base import AdapterContext
from gpupool.backends.errors import BackendMisconfigured

# Values that end up in #SBATCH lines: no whitespace, quotes or shell metacharacters.
_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*\Z")
_PATH = re.compile(r"/[A-Za-z0-9._/+-]*\Z")


@dataclass(frozen=True)
class SlurmOptions:
    partition: str
    gres_type: str
    workdir_root: Path  # shared by the control plane and every node, at the same path
    account: str | None = None
    qos: str | None = None
    max_runtime_grace_s: float = 10.0  # SIGTERM -> SIGKILL when max_runtime_s is exceeded
    command_timeout_s: float = 30.0  # per Slurm command (an unreachable controller blocks)
    slurm_conf: str | None = None  # SLURM_CONF for the commands; default: Slurm's own
    # Jobs are found by name: installations sharing a cluster (staging, production) need
    # distinct prefixes, or one would adopt the other's job of the same key.
    job_name_prefix: str = "gpupool-"

    @classmethod
    def parse(cls, ctx: AdapterContext) -> SlurmOptions:
        raw: Mapping[str, Any] = ctx.options
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BackendMisconfigured(
                f"unknown slurm pool options: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        if not raw.get("partition"):
            raise BackendMisconfigured(f"slurm pool {ctx.pool!r} needs options.partition")
        values: dict[str, Any] = dict(raw)
        values.setdefault("gres_type", ctx.gpu_type)
        root = values.get("workdir_root") or Path(ctx.state_dir) / "slurm" / ctx.pool
        values["workdir_root"] = Path(root).absolute()
        try:
            for name in ("max_runtime_grace_s", "command_timeout_s"):
                if name in values:
                    values[name] = float(values[name])
        except (TypeError, ValueError) as exc:
            raise BackendMisconfigured(f"invalid slurm pool options: {exc}") from exc
        opts = cls(**values)
        for name in ("partition", "gres_type", "account", "qos", "job_name_prefix"):
            value = getattr(opts, name)
            if value is not None and not _SLURM_NAME.match(str(value)):
                raise BackendMisconfigured(f"slurm pool option {name}={value!r} is not a name")
        if not _PATH.match(str(opts.workdir_root)):
            raise BackendMisconfigured(
                f"slurm workdir_root {str(opts.workdir_root)!r} must be a path without spaces "
                "or special characters (it is written into #SBATCH lines)"
            )
        return opts
