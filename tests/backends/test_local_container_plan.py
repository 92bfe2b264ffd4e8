"""The container command line of a local attempt (backends.local.container.plan), pure: what
the job is given, flag by flag, as named cases."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gpupool.backends.base import ContainerPolicy, ContainerSpec, JobSpec, Mount, PosixIdentity
from gpupool.backends.errors import BackendRejected
from gpupool.backends.local.container import (
    MODE_AT,
    WRAPPER,
    check_image,
    container_name,
    env_file_text,
    plan,
)

ATTEMPT = Path("/state/local/p1/j-1.1")
IMAGE = "localhost/gpupool-test/busybox:1"


def job(**overrides: Any) -> JobSpec:
    base = JobSpec(
        job_id="j-1",
        attempt=1,
        team="team-a",
        user="alice",
        command=("python", "train.py", "--lr", "3e-4"),
        pool="p1",
        gpu_type="h100",
        gpus_per_node=2,
        devices=((1, 3),),
        image=IMAGE,
        posix=PosixIdentity(10001, 20001, (20001, 30001)),
    )
    return replace(base, **overrides)


@dataclass(frozen=True)
class Case:
    spec: JobSpec = field(default_factory=job)
    policy: ContainerPolicy = field(default_factory=lambda: ContainerPolicy(runtime="podman"))
    gpu_mode: str = "devices"
    template: str | None = None  # virtual GPUs: no device files
    want: tuple[tuple[str, ...], ...] = ()  # consecutive argument runs that must appear
    absent: tuple[str, ...] = ()


def _runs(argv: tuple[str, ...], run: tuple[str, ...]) -> bool:
    return any(argv[i : i + len(run)] == run for i in range(len(argv)))


CASES = [
    pytest.param(
        Case(
            want=(
                ("--user", "10001:20001"),
                ("--group-add", "20001", "--group-add", "30001"),
                ("--network", "none"),
                ("--workdir", f"{ATTEMPT}/work"),
                ("--volume", f"{ATTEMPT}/work:{ATTEMPT}/work"),
                ("--env-file", f"{ATTEMPT}/container.env"),
                ("--entrypoint", "python", IMAGE, "train.py", "--lr", "3e-4"),
            ),
            absent=("--device", "--read-only", "--shm-size", "--authfile"),
        ),
        id="identity, groups, no network, work dir, the command as entrypoint",
    ),
    pytest.param(
        Case(
            policy=ContainerPolicy(runtime="podman", network=True),
            absent=("--network",),
        ),
        id="the pool allows the network",
    ),
    pytest.param(
        Case(
            gpu_mode="cdi", want=(("--device", "nvidia.com/gpu=1", "--device", "nvidia.com/gpu=3"),)
        ),
        id="CDI names of the job's GPUs",
    ),
    pytest.param(Case(gpu_mode="none", absent=("--device",)), id="GPUs not passed"),
    pytest.param(
        Case(
            spec=job(
                container=ContainerSpec(
                    pull_secret="acme",
                    mounts=(Mount("shared/data", "/data", True),),
                    shm_size_gb=2,
                    read_only_root=True,
                )
            ),
            policy=ContainerPolicy(
                runtime="podman",
                pull_secrets={"acme": "/etc/auth/acme.json"},
                team_roots={"team-a": "/srv/team-a"},
            ),
            want=(
                ("--shm-size", "2048m"),
                ("--read-only",),
                ("--volume", "/srv/team-a/shared/data:/data:ro"),
                ("--authfile", "/etc/auth/acme.json"),
            ),
        ),
        id="mounts, shared memory, read-only root, pull secret",
    ),
    pytest.param(
        Case(spec=job(posix=None), absent=("--user", "--group-add")),
        id="no identity: the runtime's own user",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_container_command_line(case: Case) -> None:
    made = plan(
        case.spec,
        case.policy,
        binary="podman",
        attempt=ATTEMPT,
        identity=case.spec.posix,
        env={"GPUPOOL_JOB_ID": "j-1", "SECRET": "s3cr3t"},
        gpus=["1", "3"],
        gpu_mode=case.gpu_mode,
        device_template=case.template,
        max_processes=4096,
    )
    assert made.argv[:7] == (
        "/bin/sh",
        "-c",
        WRAPPER,
        "gpupool-container",
        "podman",
        made.name,
        "start",
    )
    assert made.argv[MODE_AT] == "start"  # a runner started again sets attach there
    assert made.name == container_name("p1", "j-1.1") == "gpupool-p1-j-1.1"
    for run in case.want:
        assert _runs(made.argv, run), (run, made.argv)
    for flag in case.absent:
        assert flag not in made.argv
    assert not any("s3cr3t" in arg for arg in made.argv)  # secrets only in the env file
    assert made.env["CUDA_VISIBLE_DEVICES"] == "0,1"  # the container's GPUs, from 0
    assert "SECRET=s3cr3t\n" in env_file_text(made.env)


def test_device_files_of_the_jobs_gpus_only(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"gpu{i}").touch()
    made = plan(
        job(),
        ContainerPolicy(runtime="podman"),
        binary="podman",
        attempt=ATTEMPT,
        identity=None,
        env={},
        gpus=["1", "3"],
        gpu_mode="devices",
        device_template=str(tmp_path / "gpu{index}"),
        max_processes=None,
    )
    devices = [made.argv[i + 1] for i, a in enumerate(made.argv) if a == "--device"]
    assert devices == [f"{tmp_path}/gpu1:{tmp_path}/gpu1", f"{tmp_path}/gpu3:{tmp_path}/gpu3"]


@dataclass(frozen=True)
class Refused:
    spec: JobSpec
    policy: ContainerPolicy
    message: str


REFUSED = [
    pytest.param(Refused(job(), ContainerPolicy(), "runs no images"), id="pool without runtime"),
    pytest.param(
        Refused(
            job(image="docker.io/evil:1"),
            ContainerPolicy(runtime="podman", allowed_images=("localhost/*",)),
            "allowed_images",
        ),
        id="image no longer allowed",
    ),
    pytest.param(
        Refused(job(), ContainerPolicy(runtime="pyxis", allowed_images=("*",)), "runs no images"),
        id="a runtime local pools do not use",
    ),
]


@pytest.mark.parametrize("case", REFUSED)
def test_the_adapter_refuses_what_the_pool_cannot_run(case: Refused) -> None:
    with pytest.raises(BackendRejected, match=case.message):
        check_image(case.spec, case.policy, case.policy.allowed_images)


def test_newlines_in_the_environment_are_refused() -> None:
    with pytest.raises(BackendRejected, match="newline"):
        plan(
            job(),
            ContainerPolicy(runtime="podman"),
            binary="podman",
            attempt=ATTEMPT,
            identity=None,
            env={"BAD": "a\nb"},
            gpus=[],
            gpu_mode="none",
            device_template=None,
            max_processes=None,
        )
