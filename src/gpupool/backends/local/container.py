"""Local jobs from an image: the container runtime's command line for one attempt (pure).

The runner (:mod:`.runner`) supervises a container exactly as a process, through a small
shell *wrapper* it runs as root: ``run -d`` the container unless one of its name exists, then
follow its log (``logs -f``) and exit with its exit code (``wait``). Start and re-attach are
the same command, so a runner started again after a crash finds the running container by its
name and never starts a second one; the runtime itself refuses a second container of a name.

Invariants:

* **The name is the attempt key's**: :func:`container_name`. One key, at most one container.
* **Nothing secret on a command line.** The job's environment (grants included) goes through
  an env file (0600, root's) in the attempt dir, never ``--env K=V`` (visible in ``ps``) and
  never the runtime's own environment (a user's ``LD_PRELOAD`` must not reach a root process).
* **The job gets only what is listed here**: its user (``--user uid:gid`` and its groups), its
  work, inputs and outputs dirs and its team's storage at the same paths as on the host, its
  own GPUs' device files (or CDI names), no network unless the pool allows it.
* Inside, ``CUDA_VISIBLE_DEVICES`` numbers the job's GPUs from 0: CUDA in a container sees
  only the devices the container holds, and numbers them from 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpupool.backends import containers
from gpupool.backends.base import ContainerPolicy, JobSpec, PosixIdentity
from gpupool.backends.errors import BackendRejected

RUNTIMES = ("podman", "docker")
ENV_FILE = "container.env"
_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# NVIDIA's control devices: a CUDA process needs them besides its GPUs' own files.
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

# $1: the runtime, $2: the container's name, $3: start or attach, the rest: the arguments of
# `run -d`. Errors of the runtime reach the job's log (stderr is the log pipe too); 125 is the
# runtimes' own code for "the container could not be run". attach (a runner started again
# after its first died) never runs a container: a missing one means it was removed.
WRAPPER = """\
rt=$1; name=$2; mode=$3; shift 3
if ! "$rt" container inspect --format '{{.Id}}' "$name" >/dev/null 2>&1; then
    if [ "$mode" = attach ]; then
        echo "gpupool: container $name is gone" >&2
        exit 125
    fi
    "$rt" run -d --name "$name" "$@" >/dev/null || exit 125
fi
"$rt" logs -f "$name" 2>&1
code=$("$rt" wait "$name") || exit 125
exit "$code"
"""
MODE_AT = 6  # where start|attach is in the wrapper's argv


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """What the runner needs: the wrapper's argv, and how to reach the container."""

    argv: tuple[str, ...]
    binary: str
    name: str
    env: dict[str, str]  # written to ENV_FILE by the adapter


def container_name(pool: str, key: str) -> str:
    return f"gpupool-{pool}-{key}"


def check_image(spec: JobSpec, policy: ContainerPolicy, allowed: Sequence[str]) -> str:
    """The runtime to use for ``spec.image`` on this pool (see backends.containers)."""
    policy = replace(policy, allowed_images=tuple(allowed))
    return containers.check_image(spec, policy, RUNTIMES, "local")


def plan(
    spec: JobSpec,
    policy: ContainerPolicy,
    *,
    binary: str,
    attempt: Path,
    identity: PosixIdentity | None,
    env: Mapping[str, str],
    gpus: Sequence[str],
    gpu_mode: str,
    device_template: str | None,
    max_processes: int | None,
) -> ContainerPlan:
    """The wrapper's argv for ``spec``'s container. ``env`` is the job's environment as on
    the host; ``gpus`` the host indices of its GPUs (what ``CUDA_VISIBLE_DEVICES`` would be
    outside); ``gpu_mode`` ``devices`` (device files from ``device_template``), ``cdi`` or
    ``none``."""
    assert spec.image is not None
    name = container_name(spec.pool, spec.key)
    if not _NAME_OK.match(name):
        raise BackendRejected(f"container name {name!r} is not valid")
    runtime = policy.runtime or "podman"
    work, inputs, outputs = (str(attempt / d) for d in ("work", "inputs", "outputs"))
    args = [
        "--label",
        f"gpupool.key={spec.key}",
        "--label",
        f"gpupool.pool={spec.pool}",
        "--env-file",
        str(attempt / ENV_FILE),
        "--workdir",
        work,
        "--log-driver",
        "k8s-file" if runtime == "podman" else "json-file",
    ]
    if not policy.network:
        args += ["--network", "none"]
    if identity is not None:
        args += ["--user", f"{identity.uid}:{identity.gid}"]
        for group in dict.fromkeys(identity.groups):
            args += ["--group-add", str(group)]
    if max_processes:
        args += ["--pids-limit", str(max_processes)]
    container = spec.container
    if container is not None and container.shm_size_gb:
        args += ["--shm-size", f"{max(1, round(container.shm_size_gb * 1024))}m"]
    if container is not None and container.read_only_root:
        args.append("--read-only")
    for path in (work, inputs, outputs):
        args += ["--volume", f"{path}:{path}"]
    mounts, home_inside = containers.storage_mounts(spec, policy, work)
    for host, inside, read_only in mounts:
        args += ["--volume", f"{host}:{inside}" + (":ro" if read_only else "")]
    args += _gpu_args(gpus, gpu_mode, device_template)
    if container is not None and container.pull_secret is not None:
        auth = policy.pull_secrets.get(container.pull_secret)
        if auth is None:
            raise BackendRejected(f"unknown image_pull_secret {container.pull_secret!r}")
        if runtime != "podman":
            raise BackendRejected(
                "docker pools pull with the daemon's own login; remove image_pull_secret"
            )
        args += ["--authfile", auth]
    inside = dict(env)
    inside["HOME"] = home_inside
    inside["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
    bad = sorted(k for k, v in inside.items() if "\n" in v or "\n" in k or "=" in k)
    if bad:
        raise BackendRejected(f"environment variables with a newline or '=' in a container: {bad}")
    argv0, *rest = spec.command
    args += ["--entrypoint", argv0, spec.image, *rest]
    return ContainerPlan(
        argv=("/bin/sh", "-c", WRAPPER, "gpupool-container", binary, name, "start", *args),
        binary=binary,
        name=name,
        env=inside,
    )


def env_file_text(env: Mapping[str, str]) -> str:
    """The env file both runtimes read: one ``NAME=value`` a line, taken as it is."""
    return "".join(f"{k}={v}\n" for k, v in sorted(env.items()))


def _gpu_args(gpus: Sequence[str], mode: str, template: str | None) -> list[str]:
    if not gpus or mode == "none":
        return []
    if mode == "cdi":
        return [arg for index in gpus for arg in ("--device", f"nvidia.com/gpu={index}")]
    if template is None:
        return []  # virtual GPUs without device files: nothing to pass
    args: list[str] = []
    for index in gpus:
        path = template.format(index=index)
        if not os.path.exists(path):
            raise BackendRejected(
                f"GPU {index}'s device file {path} does not exist on this node "
                "(local pool option gpu_device_files)"
            )
        args += ["--device", f"{path}:{path}"]
    if template.startswith("/dev/nvidia"):
        args += [a for dev in CONTROL_DEVICES if os.path.exists(dev) for a in ("--device", dev)]
    return args
