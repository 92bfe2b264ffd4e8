"""Which GPUs a local job may see: scheduler device indices -> ``CUDA_VISIBLE_DEVICES``.

The scheduler owns GPU assignment: ``JobSpec.devices[0]`` holds the indices (0 ..
gpus_per_node-1) of the pool's node that this attempt was given, and no two running attempts
share one. This module only translates them:

* ``devices: virtual`` (default): the indices are used as they are. Laptops, CI and demos
  have no GPUs (or fewer than the pool claims); the job still sees a consistent value.
* ``devices: nvidia``: the machine's GPUs are detected once with ``nvidia-smi`` and scheduler
  index ``i`` becomes the ``i``-th GPU in nvidia-smi's (PCI bus) order. Jobs also get
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA numbers GPUs the way nvidia-smi does (its
  default, fastest-first, may differ on mixed machines).

The command runner is injected so the parser and the mapping are tested on recorded output.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpupool.backends.errors import BackendMisconfigured

CommandRunner = Callable[[Sequence[str]], str]  # argv -> stdout; raises on failure

NVIDIA_QUERY = ("--query-gpu=index,uuid", "--format=csv,noheader")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str


def run_command(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=30).stdout


def parse_nvidia_smi(text: str) -> tuple[GpuInfo, ...]:
    """Parse ``nvidia-smi --query-gpu=index,uuid --format=csv,noheader``, sorted by index."""
    gpus = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not fields[0].isdigit() or not fields[1]:
            raise ValueError(f"line {number}: expected 'index, uuid', got {line!r}")
        gpus.append(GpuInfo(index=int(fields[0]), uuid=fields[1]))
    return tuple(sorted(gpus, key=lambda g: g.index))


class GpuMapper(Protocol):
    def environment(self, devices: Sequence[int]) -> dict[str, str]:
        """The variables that restrict a job to the scheduler's ``devices``."""
        ...


class VirtualGpus:
    def environment(self, devices: Sequence[int]) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in devices)}


class NvidiaGpus:
    def __init__(self, gpus: Sequence[GpuInfo], gpus_per_node: int) -> None:
        if len(gpus) < gpus_per_node:
            raise BackendMisconfigured(
                f"the pool declares {gpus_per_node} GPUs per node but nvidia-smi shows {len(gpus)}"
            )
        self.gpus = tuple(gpus)

    @classmethod
    def detect(
        cls, gpus_per_node: int, runner: CommandRunner = run_command, nvidia_smi: str = "nvidia-smi"
    ) -> NvidiaGpus:
        try:
            out = runner([nvidia_smi, *NVIDIA_QUERY])
            gpus = parse_nvidia_smi(out)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise BackendMisconfigured(
                f"devices: nvidia, but GPUs cannot be listed with {nvidia_smi}: {exc}"
            ) from exc
        return cls(gpus, gpus_per_node)

    def environment(self, devices: Sequence[int]) -> dict[str, str]:
        real = []
        for d in devices:
            if not 0 <= d < len(self.gpus):
                raise BackendMisconfigured(f"device {d} does not exist ({len(self.gpus)} GPUs)")
            real.append(str(self.gpus[d].index))
        return {"CUDA_VISIBLE_DEVICES": ",".join(real), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def gpus_from_options(
    options: Mapping[str, Any], gpus_per_node: int, runner: CommandRunner = run_command
) -> GpuMapper:
    mode = options.get("devices", "virtual")
    if mode == "virtual":
        return VirtualGpus()
    if mode == "nvidia":
        return NvidiaGpus.detect(
            gpus_per_node, runner, str(options.get("nvidia_smi", "nvidia-smi"))
        )
    raise BackendMisconfigured(f"local pool option devices={mode!r}: use 'virtual' or 'nvidia'")
