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
    # Jobs from an image (pool container_runtime, docs/containers.md), podman and apptainer
    # forms: the runtime's program on the nodes, how the allocation's GPUs reach the container
    # (devices: device files; cdi: nvidia.com/gpu=N; none) and the device file of GPU {index}
    # (index as in the job's CUDA_VISIBLE_DEVICES, which Slurm sets from the gres allocation).
    container_binary: str | None = None
    container_gpus: str = "devices"
    gpu_device_files: str = "/dev/nvidia{index}"

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
        if opts.container_gpus not in ("devices", "cdi", "none"):
            raise BackendMisconfigured(
                f"slurm pool option container_gpus={opts.container_gpus!r}: "
                "use devices, cdi or none"
            )
        template = opts.gpu_device_files
        if "{index}" not in template or not _PATH.match(template.replace("{index}", "0")):
            raise BackendMisconfigured(
                f"slurm pool option gpu_device_files={template!r} must be a path with {{index}}, "
                "e.g. /dev/nvidia{index}"
            )
        binary = opts.container_binary
        if binary is not None and not (_PATH.match(binary) or _SLURM_NAME.match(binary)):
            raise BackendMisconfigured(
                f"slurm pool option container_binary={binary!r} is not a program name or path"
            )
        if not _PATH.match(str(opts.workdir_root)):
            raise BackendMisconfigured(
                f"slurm workdir_root {str(opts.workdir_root)!r} must be a path without spaces "
                "or special characters (it is written into #SBATCH lines)"
            )
        return opts
