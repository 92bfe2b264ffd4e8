"""Real Unix users through the real local backend: team storage isolation (D1, D3).

The test creates users and groups with ``useradd``/``groupadd`` (and removes them after), lays
out the teams' storage as the server does at start, and runs one real job as alice with the
identity the controller gives it. From inside the job it tries each access below; the job
reports what the kernel allowed. Needs root (to create users and to switch to them).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.backends.base import AdapterContext, JobSpec, RunState
from gpupool.backends.local.adapter import LocalBackend
from gpupool.controller.loop import posix_identity
from gpupool.data.storage import default_base, ensure_team_layouts, home_dir, shared_dir
from gpupool.spec.load import parse_config

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="creating Unix users and running jobs as them needs root: run the tests as root",
    ),
]

POOL = "test-shared-dev-cpu-pool"

# Each access alice's job attempts, run by `sh`; it prints "<name>=ok" or "<name>=denied".
PROBES = {
    "read-team-shared": 'cat "$A/shared/data.txt"',
    "write-team-shared": 'echo alice > "$A/shared/by-alice.txt"',
    "write-own-home": 'echo mine > "$A/home/$ME/out.txt"',
    "read-own-home": 'cat "$A/home/$ME/out.txt"',
    "list-bobs-home": 'ls "$A/home/$BOB"',
    "read-bobs-file": 'cat "$A/home/$BOB/secret.txt"',
    "write-bobs-home": 'touch "$A/home/$BOB/planted"',
    "enter-other-team": 'ls "$B"',
    "read-other-team-shared": 'cat "$B/shared/data.txt"',
    "write-own-workdir": 'touch "$GPUPOOL_JOB_WORKDIR/scratch"',
}


@dataclass(frozen=True)
class Case:
    probe: str
    allowed: bool


CASES = [
    pytest.param(Case("read-team-shared", True), id="reads team-a's shared area"),
    pytest.param(Case("write-team-shared", True), id="writes team-a's shared area"),
    pytest.param(Case("write-own-home", True), id="writes her own home"),
    pytest.param(Case("read-own-home", True), id="reads her own home"),
    pytest.param(Case("list-bobs-home", False), id="cannot list bob's home"),
    pytest.param(Case("read-bobs-file", False), id="cannot read bob's file"),
    pytest.param(Case("write-bobs-home", False), id="cannot write into bob's home"),
    pytest.param(Case("enter-other-team", False), id="cannot enter team-b's root"),
    pytest.param(Case("read-other-team-shared", False), id="cannot read team-b's shared area"),
    pytest.param(Case("write-own-workdir", True), id="writes its own work dir"),
]


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class World:
    home: Path  # GPUPOOL_HOME
    names: dict[str, str]  # alice/bob/team-a/team-b -> the real user or group name
    output: dict[str, str]  # probe -> "ok" | "denied"
    workdir: Path
    spec: JobSpec


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    suffix = secrets.token_hex(3)
    names = {key: f"gp{key[0]}{key[-1]}{suffix}" for key in ("alice", "bob", "team-a", "team-b")}
    users, groups = [names["alice"], names["bob"]], [names["team-a"], names["team-b"]]
    made_users: list[str] = []
    made_groups: list[str] = []
    dirs = [Path(tempfile.mkdtemp(prefix="gpupool-users-")) for _ in range(2)]
    try:
        for group in groups:
            _run("groupadd", group)
            made_groups.append(group)
        for user in users:
            # -U: a primary group of the user's own name, removed again by userdel.
            _run("useradd", "-M", "-U", "-s", "/usr/sbin/nologin", user)
            made_users.append(user)
        gid = {
            g: int(subprocess.check_output(["getent", "group", g], text=True).split(":")[2])
            for g in groups
        }
        ids = {u: pwd.getpwnam(u) for u in users}
        config = parse_config(
            f"""
gpu_types: {{cpu: {{}}}}
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
            os.chmod(d, 0o711)  # what an operator does for GPUPOOL_HOME when jobs switch users
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

        backend = LocalBackend(AdapterContext(pool=POOL, gpu_type="cpu", state_dir=state))
        script = "\n".join(
            f"if ({command}) >/dev/null 2>&1; then echo {name}=ok; else echo {name}=denied; fi"
            for name, command in PROBES.items()
        )
        spec = JobSpec(
            job_id="posix",
            attempt=1,
            team="team-a",
            user="alice",
            command=("sh", "-c", script),
            pool=POOL,
            gpu_type="cpu",
            gpus_per_node=0,
            env={"A": str(root_a), "B": str(root_b), "ME": "alice", "BOB": "bob"},
            posix=posix_identity(config, "alice", "team-a"),
            max_runtime_s=60,
        )
        handle = backend.submit(spec)
        deadline = time.monotonic() + 60
        while (status := backend.poll([handle])[handle.key]).state not in (
            RunState.SUCCEEDED,
            RunState.FAILED,
            RunState.LOST,
        ):
            assert time.monotonic() < deadline, "the job did not finish in 60s"
            time.sleep(0.05)
        log = backend.logs(handle).data.decode()
        assert status.state == RunState.SUCCEEDED, (status, log)
        output = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
        yield World(home, names, output, Path(handle.data["dir"]) / "work", spec)
    finally:
        for user in made_users:
            subprocess.run(["userdel", user], check=False, capture_output=True)
        for group in made_groups:
            subprocess.run(["groupdel", group], check=False, capture_output=True)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("case", CASES)
def test_alices_job_sees_only_what_it_may(world: World, case: Case) -> None:
    assert world.output[case.probe] == ("ok" if case.allowed else "denied"), world.output


def test_files_made_by_the_job_belong_to_alice_and_the_team(world: World) -> None:
    assert world.spec.posix is not None
    alice, team_gid = world.spec.posix.uid, world.spec.posix.groups[-1]
    root_a = default_base(world.home) / "team-a"
    made_shared = os.stat(shared_dir(root_a) / "by-alice.txt")
    made_home = os.stat(home_dir(root_a, "alice") / "out.txt")
    assert (made_shared.st_uid, made_shared.st_gid) == (alice, team_gid)  # setgid shared/
    assert made_home.st_uid == alice
    assert os.stat(world.workdir).st_uid == alice
    assert not (home_dir(root_a, "bob") / "planted").exists()
