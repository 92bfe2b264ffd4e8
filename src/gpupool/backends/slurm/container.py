"""Slurm jobs from an image: how the batch script runs the command in it (pure; golden-tested).

Three forms, by the pool's ``container_runtime``:

* ``pyxis``: ``srun --container-image=...`` (NVIDIA's pyxis plugin and enroot on the nodes).
  The image is pulled by enroot with its own credentials file; the job's GPUs are the
  allocation's, given to the container by enroot's NVIDIA hook. Enroot containers share the
  node's network: a pyxis pool must say so (``containers.network: true``, checked in the
  configuration).
* ``podman`` and ``apptainer``: a launcher script (``container.sh`` in the attempt dir,
  written by the batch script itself, so ``scontrol write batch_script`` still shows the whole
  job) runs on each node of the allocation (under ``srun`` for a gang). It gives the container
  the device files of the GPUs Slurm allocated on that node (``CUDA_VISIBLE_DEVICES``, mapped
  through the pool's ``gpu_device_files`` template, or CDI names) and numbers them from 0
  inside, as the local backend does; no network unless the pool allows it.

The environment contract reaches the container by name (``--env NAME``, ``APPTAINERENV_NAME``):
values stay in the batch script's environment, never on a command line. Mounts are the
attempt's work, inputs and outputs dirs and the team's storage at their host paths, and the
user's ``container.mounts``; the command replaces the image's entrypoint on every runtime.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.backends.base import JobSpec

RUNTIMES = ("pyxis", "podman", "apptainer")
LAUNCHER = "container.sh"
EOF_MARK = "GPUPOOL_CONTAINER_EOF"


@dataclass(frozen=True)
class ContainerScript:
    """What the batch script needs to run ``spec.command`` in ``image``."""

    runtime: str
    image: str
    name: str
    workdir: str
    home: str  # HOME inside: the user's team home when mounted, else the work dir
    mounts: tuple[tuple[str, str, bool], ...]  # (host path, path inside, read-only)
    env_names: tuple[str, ...]  # variables the batch script exports, passed by name
    network: bool = False
    read_only_root: bool = False
    shm_size_gb: float | None = None
    gpu_mode: str = "devices"  # devices | cdi | none
    device_template: str = "/dev/nvidia{index}"
    authfile: str | None = None
    binary: str | None = None  # default: the runtime's name


def pyxis_image(image: str) -> str:
    """Enroot separates the registry from the path with '#': ``ghcr.io#acme/train:1``."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def pyxis_flags(c: ContainerScript) -> list[str]:
    """The srun flags that run the step in the image (pyxis)."""
    mounts = ",".join(f"{h}:{i}" + (":ro" if ro else "") for h, i, ro in c.mounts)
    return [
        f"--container-image={pyxis_image(c.image)}",
        f"--container-mounts={mounts}",
        f"--container-workdir={c.workdir}",
        "--no-container-mount-home",
        "--container-readonly" if c.read_only_root else "--container-writable",
    ]


def launcher(spec: JobSpec, c: ContainerScript) -> list[str]:
    """The lines of ``container.sh`` (podman or apptainer), run on every node of the job."""
    lines = [
        "#!/bin/bash",
        "# Runs the job's command in its image on this node, with this node's GPUs of the job.",
        "set -u",
        "devices=()",
        "inside=",
        "n=0",
        "gpus=${CUDA_VISIBLE_DEVICES:-}",
        "for i in ${gpus//,/ }; do",
        *_device_lines(c),
        '    inside="$inside${inside:+,}$n"',
        "    n=$((n + 1))",
        "done",
    ]
    if c.runtime == "podman":
        lines += _podman_lines(spec, c)
    else:
        lines += _apptainer_lines(spec, c)
    return lines


def _device_lines(c: ContainerScript) -> list[str]:
    if c.gpu_mode == "none":
        return ["    :"]
    if c.gpu_mode == "cdi":
        if c.runtime == "apptainer":
            return ["    :  # apptainer --nv binds the allocation's GPUs"]
        return ['    devices+=(--device "nvidia.com/gpu=$i")']
    path = c.device_template.replace("{index}", "$i")
    if c.runtime == "apptainer":
        return [f'    devices+=(--bind "{path}")']
    return [f'    devices+=(--device "{path}:{path}")']


def _volume_args(mounts: Sequence[tuple[str, str, bool]], flag: str) -> list[str]:
    return [arg for h, i, ro in mounts for arg in (flag, f"{h}:{i}" + (":ro" if ro else ""))]


def _podman_lines(spec: JobSpec, c: ContainerScript) -> list[str]:
    binary = c.binary or "podman"
    name = f"{c.name}-$SLURM_NODEID"
    args = [
        "run",
        "--rm",
        "--log-driver=none",
        *([] if c.network else ["--network=none"]),
        f"--workdir={c.workdir}",
        *_volume_args(c.mounts, "--volume"),
        *([f"--shm-size={max(1, round(c.shm_size_gb * 1024))}m"] if c.shm_size_gb else []),
        *(["--read-only"] if c.read_only_root else []),
        *([f"--authfile={c.authfile}"] if c.authfile else []),
        f"--env=HOME={c.home}",
        *(f"--env={name}" for name in c.env_names),
        f"--entrypoint={spec.command[0]}",
    ]
    tail = [c.image, *spec.command[1:]]
    return [
        "# Root runs the container as root; anyone else as themselves (rootless, keep-id).",
        'if [ "$(id -u)" -eq 0 ]; then user=(--user 0:0); else user=(--userns keep-id); fi',
        # The runtime's client passes SIGTERM on to the container (once); this shell outlives
        # the signal, waits for the container's end and removes it. A client killed after the
        # grace leaves the container to the batch script, which removes it.
        f'{shlex.quote(binary)} {shlex.join(args[:1])} --name "{name}" "${{user[@]}}" '
        '"${devices[@]}" --env "CUDA_VISIBLE_DEVICES=$inside" '
        f"{shlex.join(args[1:])} {shlex.join(tail)} &",
        "pid=$!",
        "trap : TERM INT",
        'wait "$pid"; rc=$?',
        'while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done',
        f'{shlex.quote(binary)} rm -f "{name}" >/dev/null 2>&1',
        'exit "$rc"',
    ]


def _apptainer_lines(spec: JobSpec, c: ContainerScript) -> list[str]:
    binary = c.binary or "apptainer"
    args = [
        "exec",
        "--contain",
        "--cleanenv",
        "--no-home",
        *([] if c.network else ["--net", "--network=none"]),
        f"--pwd={c.workdir}",
        *_volume_args(c.mounts, "--bind"),
        *([f"--authfile={c.authfile}"] if c.authfile else []),
        *(["--nv"] if spec.gpus_per_node and c.gpu_mode != "none" else []),
        *([] if c.read_only_root else ["--writable-tmpfs"]),
        f"docker://{c.image}",
        *spec.command,
    ]
    return [
        "# --cleanenv: the container gets the job's variables only (APPTAINERENV_<name>).",
        *(f'export APPTAINERENV_{name}="${name}"' for name in c.env_names),
        f"export APPTAINERENV_HOME={shlex.quote(c.home)}",
        'export APPTAINERENV_CUDA_VISIBLE_DEVICES="$inside"',
        f'exec {shlex.quote(binary)} {shlex.join(args[:1])} "${{devices[@]}}" '
        f"{shlex.join(args[1:])}",
    ]
