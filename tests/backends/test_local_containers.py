"""Real containers through the real local backend: podman with the runc runtime, the busybox
image of scripts/podman/up.sh, real Unix users (D1, D3, X2, X3).

The module creates two users and two team groups (``useradd``/``groupadd``, removed after),
lays out the teams' storage as the server does, and runs alice's job in a container with the
identity the controller gives it, on GPUs 1 and 3 of four fake GPU device files. From inside
the container the job tries each access below and reports what it was allowed. Then: a
SIGKILL of the process that submitted (the server) and of the job's runner, mid-run, leaves
one container, which a new adapter re-attaches to; cancel and max_runtime_s stop the
container with SIGTERM, then SIGKILL after the grace period. Needs root.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    ContainerPolicy,
    JobHandle,
    JobSpec,
    RunState,
)
from gpupool.backends.errors import BackendRejected
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.local.runner import read_json
from gpupool.controller.loop import posix_identity
from gpupool.data.storage import default_base, ensure_team_layouts, home_dir, shared_dir
from gpupool.spec.load import parse_config
from support.podman import TEST_IMAGE, containers_of, podman_problem

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="creating Unix users and running containers as them needs root: run the tests "
        "as root (scripts/podman/up.sh sets podman up)",
    ),
]

POOL = "test-shared-dev-h100-pool"
FAKE = "/dev/gpupool-fake-nvidia{index}"  # made by scripts/podman/up.sh (and scripts/slurm)
WAIT_S = 60.0

# Each access alice's containerised job attempts; it prints "<name>=ok" or "<name>=denied".
PROBES = {
    "read-team-shared": 'cat "$A/shared/data.txt"',
    "write-team-shared": 'echo alice > "$A/shared/by-alice.txt"',
    "write-own-home": 'echo mine > "$A/home/$ME/out.txt"',
    "write-own-workdir": 'touch "$GPUPOOL_JOB_WORKDIR/scratch"',
    "write-team-root": 'touch "$A/planted"',
    "write-image-files": "touch /bin/planted",
    "list-bobs-home": 'ls "$A/home/$BOB"',
    "read-bobs-file": 'cat "$A/home/$BOB/secret.txt"',
    "read-other-team-shared": 'cat "$B/shared/data.txt"',
    "reach-the-network": "[ $(grep -c : /proc/net/dev) -gt 1 ]",  # any interface but lo
}


@dataclass(frozen=True)
class Case:
    probe: str
    allowed: bool


CASES = [
    pytest.param(Case("read-team-shared", True), id="reads team-a's shared area"),
    pytest.param(Case("write-team-shared", True), id="writes team-a's shared area"),
    pytest.param(Case("write-own-home", True), id="writes her own home"),
    pytest.param(Case("write-own-workdir", True), id="writes its work dir"),
    pytest.param(Case("write-team-root", False), id="cannot write the team's root"),
    pytest.param(Case("write-image-files", False), id="cannot write the image's files"),
    pytest.param(Case("list-bobs-home", False), id="cannot list bob's home"),
    pytest.param(Case("read-bobs-file", False), id="cannot read bob's file"),
    pytest.param(Case("read-other-team-shared", False), id="cannot read team-b's storage"),
    pytest.param(Case("reach-the-network", False), id="has no network"),
]


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def wait(backend: LocalBackend, handle: JobHandle, timeout_s: float = WAIT_S) -> BackendStatus:
    deadline = time.monotonic() + timeout_s
    while (status := backend.poll([handle])[handle.key]).state not in FINAL_STATES:
        assert time.monotonic() < deadline, f"{handle.key} still {status} after {timeout_s}s"
        time.sleep(0.05)
    return status


@dataclass(frozen=True)
class World:
    ctx: AdapterContext
    spec: JobSpec  # alice's, on GPUs 1 and 3
    root_a: Path
    output: dict[str, str]  # what the probe job printed: probe -> ok | denied, and more
    uid: int
    team_gid: int


def make_backend(ctx: AdapterContext) -> LocalBackend:
    return LocalBackend(ctx)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    if problem := podman_problem():
        pytest.skip(problem)
    suffix = secrets.token_hex(3)
    names = {key: f"gc{key[0]}{key[-1]}{suffix}" for key in ("alice", "bob", "team-a", "team-b")}
    users, groups = [names["alice"], names["bob"]], [names["team-a"], names["team-b"]]
    made_users: list[str] = []
    made_groups: list[str] = []
    dirs = [Path(tempfile.mkdtemp(prefix="gpupool-ct-")) for _ in range(2)]
    try:
        for group in groups:
            _run("groupadd", group)
            made_groups.append(group)
        for user in users:
            _run("useradd", "-M", "-U", "-s", "/usr/sbin/nologin", user)
            made_users.append(user)
        gid = {
            g: int(subprocess.check_output(["getent", "group", g], text=True).split(":")[2])
            for g in groups
        }
        ids = {u: pwd.getpwnam(u) for u in users}
        config = parse_config(
            f"""
gpu_types: {{h100: {{}}}}
users:
  alice: {{uid: {ids[names["alice"]].pw_uid}, gid: {ids[names["alice"]].pw_gid}}}
  bob: {{uid: {ids[names["bob"]].pw_uid}, gid: {ids[names["bob"]].pw_gid}}}
teams:
  team-a: {{gid: {gid[names["team-a"]]}, members: {{alice: member, bob: member}}}}
  team-b: {{gid: {gid[names["team-b"]]}, members: {{bob: member}}}}
""",
            "users.yaml",
        )
        home, state = dirs
        for d in dirs:
            os.chmod(d, 0o711)
        ensure_team_layouts(config, home)
        base = default_base(home)
        root_a, root_b = base / "team-a", base / "team-b"
        for root in (root_a, root_b):
            data = shared_dir(root) / "data.txt"
            data.write_text("team data\n")
            data.chmod(0o640)
            os.chown(data, 0, config.teams[root.name].gid or 0)
        secret = home_dir(root_a, "bob") / "secret.txt"
        secret.write_text("bob's\n")
        secret.chmod(0o600)
        os.chown(secret, config.users["bob"].uid, config.users["bob"].gid)
        ctx = AdapterContext(
            pool=POOL,
            gpu_type="h100",
            state_dir=state,
            gpus_per_node=4,
            options={"gpu_device_files": FAKE, "max_runtime_grace_s": 1},
            container=ContainerPolicy(
                runtime="podman",
                allowed_images=("localhost/gpupool-test/*",),
                team_roots={"team-a": str(root_a), "team-b": str(root_b)},
            ),
        )
        backend = make_backend(ctx)
        script = "\n".join(
            [
                *(
                    f"if ({command}) >/dev/null 2>&1; then echo {name}=ok; "
                    f"else echo {name}=denied; fi"
                    for name, command in PROBES.items()
                ),
                'echo "devices=$(ls /dev | grep gpupool-fake | tr "\\n" " ")"',
                'echo "cuda=$CUDA_VISIBLE_DEVICES"',
                'echo "id=$(id -u):$(id -G)"',
                'echo "cwd=$(pwd)"',
                'echo "workdir=$GPUPOOL_JOB_WORKDIR"',
            ]
        )
        spec = JobSpec(
            job_id=f"ct{suffix}",
            attempt=1,
            team="team-a",
            user="alice",
            command=("sh", "-c", script),
            pool=POOL,
            gpu_type="h100",
            gpus_per_node=2,
            devices=((1, 3),),
            image=TEST_IMAGE,
            env={"A": str(root_a), "B": str(root_b), "ME": "alice", "BOB": "bob"},
            posix=posix_identity(config, "alice", "team-a"),
            max_runtime_s=60,
        )
        handle = backend.submit(spec)
        status = wait(backend, handle)
        log = backend.logs(handle).data.decode()
        assert status.state == RunState.SUCCEEDED, (status, log)
        output = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
        assert spec.posix is not None
        yield World(ctx, spec, root_a, output, spec.posix.uid, gid[names["team-a"]])
    finally:
        for user in made_users:
            subprocess.run(["userdel", user], check=False, capture_output=True)
        for group in made_groups:
            subprocess.run(["groupdel", group], check=False, capture_output=True)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("case", CASES)
def test_alices_container_sees_only_what_it_may(world: World, case: Case) -> None:
    assert world.output[case.probe] == ("ok" if case.allowed else "denied"), world.output


def test_the_job_sees_exactly_its_fake_gpus_numbered_from_zero(world: World) -> None:
    assert world.output["devices"].split() == ["gpupool-fake-nvidia1", "gpupool-fake-nvidia3"]
    assert world.output["cuda"] == "0,1"


def test_the_job_runs_as_alice_with_the_team_group_in_its_work_dir(world: World) -> None:
    uid, groups = world.output["id"].split(":")
    assert int(uid) == world.uid
    assert str(world.team_gid) in groups.split()
    assert world.output["cwd"] == world.output["workdir"]
    assert world.output["workdir"].endswith(f"/{world.spec.key}/work")
    made = os.stat(shared_dir(world.root_a) / "by-alice.txt")
    assert (made.st_uid, made.st_gid) == (world.uid, world.team_gid)  # setgid shared/


def test_the_attempts_container_is_removed_when_it_ends(world: World) -> None:
    assert containers_of(world.spec.key) == []


def test_a_disallowed_image_starts_no_container(world: World) -> None:
    spec = replace(world.spec, job_id=world.spec.job_id + "x", image="localhost/other/x:1")
    with pytest.raises(BackendRejected, match="allowed_images"):
        make_backend(world.ctx).submit(spec)
    assert containers_of(spec.key) == []


# The "server": submits, reports the handle's dir, then waits to be killed.
SERVER = """
import pickle, sys, time
from gpupool.backends.local.adapter import LocalBackend
ctx, spec = pickle.loads(bytes.fromhex(sys.argv[1]))
handle = LocalBackend(ctx).submit(spec)
print(handle.data["dir"], flush=True)
time.sleep(600)
"""

COUNTING_JOB = (
    'echo start >> "$GPUPOOL_JOB_WORKDIR/starts"; '
    "i=0; while [ $i -lt 12 ]; do echo line $i; i=$((i+1)); sleep 0.25; done"
)


@pytest.mark.parametrize("kill_runner", [False, True], ids=["server only", "server and runner"])
def test_sigkill_of_the_server_mid_run_leaves_one_container_which_is_reattached(
    world: World, kill_runner: bool
) -> None:
    import pickle

    spec = replace(
        world.spec,
        job_id=f"{world.spec.job_id}k{int(kill_runner)}",
        command=("sh", "-c", COUNTING_JOB),
        devices=((0,),),
        gpus_per_node=1,
    )
    payload = pickle.dumps((world.ctx, spec)).hex()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, payload],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        attempt = Path(server.stdout.readline().strip())  # type: ignore[union-attr]
        deadline = time.monotonic() + WAIT_S
        while b"line 2" not in _read(attempt / "output.log"):
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        server.send_signal(signal.SIGKILL)
        server.wait()
        if kill_runner:
            runner = read_json(attempt / "handle.json")
            assert runner is not None
            os.kill(int(runner["pid"]), signal.SIGKILL)
        assert len(containers_of(spec.key)) == 1  # the job lives on

        backend = make_backend(world.ctx)  # the restarted server
        handle = backend.submit(spec)  # the controller submits again: same key, no new run
        assert containers_of(spec.key) == [f"gpupool-{POOL}-{spec.key}"]
        status = wait(backend, handle)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()  # type: ignore[union-attr]
    assert status.state == RunState.SUCCEEDED, status
    log = backend.logs(handle).data.decode()
    assert log == "".join(f"line {i}\n" for i in range(12))  # whole, nothing twice
    assert (attempt / "work" / "starts").read_text() == "start\n"  # started once
    assert containers_of(spec.key) == []


def test_a_runner_started_again_never_runs_a_removed_container_again(world: World) -> None:
    spec = replace(
        world.spec,
        job_id=f"{world.spec.job_id}r",
        command=("sh", "-c", COUNTING_JOB),
        devices=((0,),),
        gpus_per_node=1,
    )
    backend = make_backend(world.ctx)
    handle = backend.submit(spec)
    attempt = Path(handle.data["dir"])
    deadline = time.monotonic() + WAIT_S
    while b"line 1" not in _read(attempt / "output.log"):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    runner = read_json(attempt / "handle.json")
    assert runner is not None
    os.kill(int(runner["pid"]), signal.SIGKILL)
    subprocess.run(
        ["podman", "rm", "-f", f"gpupool-{POOL}-{spec.key}"], check=True, capture_output=True
    )

    status = wait(backend, handle)  # a new runner finds no container, and runs none

    assert (status.state, status.exit_code) == (RunState.FAILED, 125), status
    assert "is gone" in backend.logs(handle).data.decode()
    assert (attempt / "work" / "starts").read_text() == "start\n"
    assert containers_of(spec.key) == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


@dataclass(frozen=True)
class Stop:
    command: str
    max_runtime_s: int | None
    cancel_grace_s: float | None
    want_state: RunState
    want_exit: int
    want_log: str


STOPS = [
    pytest.param(
        Stop(
            "trap 'echo got TERM; exit 7' TERM; echo up; while :; do sleep 0.1; done",
            None,
            10,
            RunState.CANCELLED,
            7,
            "up\ngot TERM\n",
        ),
        id="cancel: SIGTERM reaches the job, which exits in its grace",
    ),
    pytest.param(
        Stop(
            "trap '' TERM; echo up; while :; do sleep 0.1; done",
            None,
            1,
            RunState.CANCELLED,
            137,
            "up\n",
        ),
        id="cancel: a job ignoring SIGTERM is killed after the grace",
    ),
    pytest.param(
        Stop(
            "trap 'echo got TERM' TERM; echo up; while :; do sleep 0.1; done",
            2,
            None,
            RunState.FAILED,
            137,
            "up\ngot TERM\n",
        ),
        id="max_runtime_s: SIGTERM, then SIGKILL after the grace",
    ),
]


@pytest.mark.parametrize("case", STOPS)
def test_stopping_a_container(world: World, case: Stop) -> None:
    spec = replace(
        world.spec,
        job_id=f"{world.spec.job_id}s{secrets.token_hex(2)}",
        command=("sh", "-c", case.command),
        max_runtime_s=case.max_runtime_s,
    )
    backend = make_backend(world.ctx)
    handle = backend.submit(spec)
    deadline = time.monotonic() + WAIT_S
    while b"up" not in _read(Path(handle.data["dir"]) / "output.log"):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    if case.cancel_grace_s is not None:
        backend.cancel(handle, case.cancel_grace_s)
    status = wait(backend, handle)
    assert (status.state, status.exit_code) == (case.want_state, case.want_exit), status
    assert backend.logs(handle).data.decode() == case.want_log
    assert containers_of(spec.key) == []
