"""The attacked set-up, for real: Unix users, the server as root, jobs that run as their user.

Every test in this package replays an attack of a hostile tenant on the embedded default: the
local backend, SQLite, a ``gpupool server`` subprocess running as root (so each job runs under
its own user's uid), and jobs whose command is the attack. The fixtures below make the users and
groups with ``useradd``/``groupadd`` (removed again afterwards), write a configuration that maps
the configuration's users onto them, start the server and hand out one API client per user.

A job's program is ``[cluster.python, "-c", SCRIPT]``: a Python that every uid may execute (the
test's own virtual environment usually lies under root's private home), standard library only.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.server import ServerProcess

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "lost"})
POOL = "sec-h100-pool"
# Configuration users, their team and role. vera only views; admin manages everything.
PEOPLE = {"alice": "team-a", "carol": "team-a", "vera": "team-a", "bob": "team-b", "admin": ""}
TEAMS = ("team-a", "team-b")
JOB_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the attack tests create Unix users and run the server as root: run as root")


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _job_python() -> str:
    for candidate in JOB_PYTHONS:
        if os.access(candidate, os.X_OK) and os.stat(candidate).st_mode & 0o001:
            return candidate
    pytest.skip(
        "no Python that every uid may run (looked for "
        f"{', '.join(JOB_PYTHONS)}): install Debian's python3 (apt-get install python3)"
    )


@dataclass(frozen=True)
class UnixWorld:
    """Real accounts: configuration name -> the Unix user or group made for it."""

    users: dict[str, pwd.struct_passwd]
    groups: dict[str, int]  # team -> gid

    def uid(self, user: str) -> int:
        return self.users[user].pw_uid

    def gid(self, user: str) -> int:
        return self.users[user].pw_gid


@pytest.fixture(scope="session")
def unix_world() -> Iterator[UnixWorld]:
    _need_root()
    suffix = secrets.token_hex(3)
    made_users: list[str] = []
    made_groups: list[str] = []
    try:
        groups: dict[str, int] = {}
        for team in TEAMS:
            name = f"gp{team[-1]}{suffix}"
            _run("groupadd", name)
            made_groups.append(name)
            groups[team] = int(
                subprocess.check_output(["getent", "group", name], text=True).split(":")[2]
            )
        users: dict[str, pwd.struct_passwd] = {}
        for person in PEOPLE:
            name = f"gp{person[:3]}{suffix}"
            # -U: a primary group of the user's own name, removed again by userdel.
            _run("useradd", "-M", "-U", "-s", "/usr/sbin/nologin", name)
            made_users.append(name)
            users[person] = pwd.getpwnam(name)
        yield UnixWorld(users, groups)
    finally:
        for name in made_users:
            subprocess.run(["pkill", "-KILL", "-u", name], check=False, capture_output=True)
        time.sleep(0.2)
        for name in made_users:
            subprocess.run(["userdel", name], check=False, capture_output=True)
        for name in made_groups:
            subprocess.run(["groupdel", name], check=False, capture_output=True)


def cluster_config(world: UnixWorld) -> str:
    users = "\n".join(
        f"  {person}: {{uid: {world.uid(person)}, gid: {world.gid(person)}"
        + (", platform_admin: true}" if person == "admin" else "}")
        for person in PEOPLE
    )
    teams = []
    for team in TEAMS:
        members = ", ".join(
            f"{p}: {'viewer' if p == 'vera' else 'member'}" for p, t in PEOPLE.items() if t == team
        )
        teams.append(
            f"  {team}:\n    cohort: research\n    quota: {{h100: {{nominal: 4}}}}\n"
            f"    members: {{{members}}}\n    gid: {world.groups[team]}"
        )
    return f"""
gpu_types: {{h100: {{price_per_gpu_hour: 4.0}}}}
pools:
  - name: {POOL}
    backend: local
    gpu_type: h100
    nodes: 1
    node: {{gpus: 8, cpus: 32, memory_gb: 128}}
    data_access: grant
    options:
      {{cancel_grace_s: 1, max_runtime_grace_s: 1, max_processes: 256, max_log_bytes: 4000000}}
priority_classes:
  training: {{value: 100, default: true}}
  urgent: {{value: 1000}}
cohorts: {{research: {{}}}}
teams:
{chr(10).join(teams)}
users:
{users}
scheduler: {{cycle_interval_s: 0.2, grace_period_s: 1}}
"""


@dataclass
class SecureCluster:
    world: UnixWorld
    server: ServerProcess
    python: str
    _clients: dict[str, httpx.Client] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.server.home

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def config_path(self) -> Path:
        return self.server.config

    def uid(self, user: str) -> int:
        return self.world.uid(user)

    def gid(self, user: str) -> int:
        return self.world.gid(user)

    def team_gid(self, team: str) -> int:
        return self.world.groups[team]

    def storage(self, team: str) -> Path:
        return self.home / "storage" / team

    def token(self, user: str) -> str:
        return self.server.tokens[user]

    def client(self, user: str) -> httpx.Client:
        if user not in self._clients:
            self._clients[user] = self.server.client(user)
        return self._clients[user]

    def submit(
        self,
        user: str,
        command: Sequence[str],
        *,
        gpus: int = 1,
        team: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "command": list(command),
            "team": team or PEOPLE[user],
            "resources": {"gpus": gpus, "gpu_types": ["h100"], "cpus": 1, "memory_gb": 1},
            **fields,
        }
        reply = self.client(user).post("/v1/jobs", json=body)
        assert reply.status_code == 201, f"submit failed: {reply.status_code} {reply.text}"
        job: dict[str, Any] = reply.json()
        return job

    def job(self, user: str, job_id: str) -> dict[str, Any]:
        reply = self.client(user).get(f"/v1/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        job: dict[str, Any] = reply.json()
        return job

    def wait(
        self,
        user: str,
        job_id: str,
        timeout: float = 60.0,
        until: frozenset[str] = TERMINAL,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(user, job_id)
            if job["status"] in until:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} is {job['status']} after {timeout:g}s, not one of "
                    f"{sorted(until)}:\n{self.logs(user, job_id)}\n{self.server_log()}"
                )
            time.sleep(0.1)

    def logs(self, user: str, job_id: str) -> str:
        """The whole log of the job's current attempt, as the API serves it."""
        out, offset = [], 0
        for _ in range(10_000):
            reply = self.client(user).get(f"/v1/jobs/{job_id}/logs", params={"offset": offset})
            if reply.status_code != 200:
                return f"<logs: {reply.status_code} {reply.text}>"
            out.append(reply.text)
            offset = int(reply.headers.get("X-Next-Offset", offset))
            if not reply.content or reply.headers.get("X-Log-Complete") == "true":
                break
        return "".join(out)

    def run(
        self, user: str, command: Sequence[str], timeout: float = 60.0, **fields: Any
    ) -> tuple[dict[str, Any], str]:
        """Submit, wait for the end, and return the job and its log."""
        job = self.submit(user, command, **fields)
        done = self.wait(user, job["id"], timeout)
        return done, self.logs(user, job["id"])

    def server_log(self) -> str:
        try:
            return "server log (tail):\n" + self.server.log.read_text()[-4000:]
        except OSError:
            return ""

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self.server.stop()


@pytest.fixture(scope="module")
def cluster(unix_world: UnixWorld) -> Iterator[SecureCluster]:
    """A fresh server as root over a fresh GPUPOOL_HOME, per test module."""
    python = _job_python()
    base = Path(tempfile.mkdtemp(prefix="gpupool-sec-"))
    base.chmod(0o711)  # jobs traverse to their work dirs and storage below GPUPOOL_HOME
    config = base / "cluster.yaml"
    config.write_text(cluster_config(unix_world))
    server = ServerProcess(base / "home", config)
    server.start()
    secure = SecureCluster(unix_world, server, python)
    try:
        yield secure
    finally:
        secure.close()
        for person in PEOPLE:
            subprocess.run(
                ["pkill", "-KILL", "-u", str(unix_world.uid(person))],
                check=False,
                capture_output=True,
            )
        shutil.rmtree(base, ignore_errors=True)
