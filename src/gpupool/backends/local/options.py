"""The ``options:`` of a local pool, validated once when the adapter is built.

Unknown keys are an error (a typo such as ``device: nvidia`` must not silently run jobs on
virtual GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpupool.backends.errors import BackendMisconfigured

# The server's variables a job inherits; everything else it gets comes from the contract and
# the user's ``env``. Secrets in the server's environment must not reach jobs.
DEFAULT_INHERIT_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_SECONDS = (
    "cancel_grace_s",
    "max_runtime_grace_s",
    "launch_timeout_s",
    "startup_timeout_s",
    "poll_wait_s",
)
_POSITIVE_INTS = ("max_processes", "max_log_bytes")
CGROUP_MODES = ("auto", "required", "off")
CONTAINER_GPU_MODES = ("devices", "cdi", "none")


@dataclass(frozen=True)
class LocalOptions:
    devices: str = "virtual"  # virtual | nvidia (see gpus.py)
    nvidia_smi: str = "nvidia-smi"
    cancel_grace_s: float = 10.0  # grace when the runner is signalled without a cancel file
    max_runtime_grace_s: float = 10.0  # SIGTERM -> SIGKILL when max_runtime_s is exceeded
    inherit_env: tuple[str, ...] = DEFAULT_INHERIT_ENV
    launch_timeout_s: float = 5.0  # how long submit() waits for the runner's handle.json
    startup_timeout_s: float = 30.0  # a claimed attempt without a runner after this is LOST
    # How long poll() may wait for an attempt to start or end when it has nothing new to
    # report (0: answer at once): the controller then hears of an end within milliseconds
    # instead of at its next poll. A runner that dies silently is noticed within this.
    poll_wait_s: float = 1.0
    # Processes (threads included) one job may have at once: its cgroup's pids.max, else
    # RLIMIT_NPROC, which the kernel counts per uid (see contain.py).
    max_processes: int = 4096
    max_log_bytes: int = 100 << 20  # output.log keeps this much, then says it was truncated
    cgroups: str = "auto"  # auto: a per-job cgroup when possible | required | off (subreaper)
    # As root, a job without a POSIX identity (its user left users: while it was queued) is
    # refused, never run as root. True: run it as the server's user (tests of the backend).
    run_without_identity: bool = False
    # Jobs from an image (pool container_runtime, docs/containers.md): the runtime's program
    # (default: podman or docker, as the pool names it), how the job's GPUs reach the
    # container (devices: their device files; cdi: nvidia.com/gpu=N; none), and the device
    # file of GPU {index} (default /dev/nvidia{index} with devices: nvidia, none with virtual).
    container_binary: str | None = None
    container_gpus: str = "devices"
    gpu_device_files: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> LocalOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BackendMisconfigured(
                f"unknown local pool options: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = dict(raw)
        try:
            for name in _SECONDS:
                if name in values:
                    values[name] = float(values[name])
            for name in _POSITIVE_INTS:
                if name in values:
                    value = values[name]
                    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
            if not isinstance(values.get("run_without_identity", False), bool):
                raise ValueError("run_without_identity must be true or false")
            if values.get("cgroups", "auto") not in CGROUP_MODES:
                raise ValueError(
                    f"cgroups must be one of {', '.join(CGROUP_MODES)}, got {values['cgroups']!r}"
                )
            if values.get("container_gpus", "devices") not in CONTAINER_GPU_MODES:
                raise ValueError(
                    f"container_gpus must be one of {', '.join(CONTAINER_GPU_MODES)}, "
                    f"got {values['container_gpus']!r}"
                )
            template = values.get("gpu_device_files")
            if template is not None and "{index}" not in str(template):
                raise ValueError(
                    f"gpu_device_files must contain {{index}}, e.g. /dev/nvidia{{index}}, "
                    f"got {template!r}"
                )
            if "inherit_env" in values:
                if isinstance(values["inherit_env"], str):
                    raise TypeError("inherit_env must be a list of variable names")
                values["inherit_env"] = tuple(str(v) for v in values["inherit_env"])
        except (TypeError, ValueError) as exc:
            raise BackendMisconfigured(f"invalid local pool options: {exc}") from exc
        return cls(**values)
