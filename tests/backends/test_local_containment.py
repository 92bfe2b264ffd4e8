"""A local job's whole process tree is contained and reaped, with a process limit and a log cap.

Real jobs through the real local backend. Each job leaves processes that a process-group kill
misses (a ``setsid`` child and a double-forked daemon), or tries to start 5,000 processes, or
writes 50 MB of output. Both containments are run: a per-attempt cgroup (as root, where a
pids hierarchy is mounted) and the subreaper fallback (``cgroups: off``). As root each job
runs under a uid of its own (no passwd entry needed), so "nothing of the job is left" is
checked over every process of that uid, not only the pids the job reported.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    JobHandle,
    JobSpec,
    PosixIdentity,
    RunState,
)
from gpupool.backends.local import contain
from gpupool.backends.local.adapter import LocalBackend
from support.attack_jobs import CHATTY, ESCAPES, FORK_BOMB

pytestmark = pytest.mark.timeout(120)

POOL = "test-shared-dev-cpu-pool"
ROOT = os.geteuid() == 0
HAS_CGROUP = ROOT and contain.find_hierarchy() is not None
GONE_WITHIN_S = 5.0
# A Python every uid may run (the test's virtual environment may lie in root's private home).
JOB_PYTHON = next(
    (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)),
    sys.executable,
)


@dataclass(frozen=True)
class Mode:
    options: dict[str, Any]
    needs_cgroup: bool


MODES = [
    pytest.param(Mode({}, True), id="cgroup"),
    pytest.param(Mode({"cgroups": "off"}, False), id="subreaper"),
]


@dataclass
class Pool:
    backend: LocalBackend
    ctx: AdapterContext
    uid: int | None  # the job's own uid (as root), else None: the test's user

    def spec(self, name: str, script: str, **overrides: Any) -> JobSpec:
        identity = PosixIdentity(self.uid, self.uid, ()) if self.uid is not None else None
        return JobSpec(
            job_id=name,
            attempt=1,
            team="team-a",
            user="alice",
            command=(JOB_PYTHON if self.uid is not None else sys.executable, "-c", script),
            pool=POOL,
            gpu_type="cpu",
            gpus_per_node=0,
            posix=identity,
            max_runtime_s=60,
            **overrides,
        )

    def wait(self, handle: JobHandle, timeout: float = 60.0) -> BackendStatus:
        deadline = time.monotonic() + timeout
        while (status := self.backend.poll([handle])[handle.key]).state not in FINAL_STATES:
            assert time.monotonic() < deadline, f"{handle.key} still {status} after {timeout}s"
            time.sleep(0.05)
        return status

    def log(self, handle: JobHandle) -> str:
        return (Path(handle.data["dir"]) / "output.log").read_text(errors="replace")

    def wait_for_line(self, handle: JobHandle, prefix: str) -> list[str]:
        deadline = time.monotonic() + 30
        while True:
            final = self.backend.poll([handle])[handle.key].state in FINAL_STATES
            for line in self.log(handle).splitlines():
                if line.startswith(prefix):
                    return line.split()[1:]
            assert not final, f"the job ended without a {prefix!r} line: {self.log(handle)!r}"
            assert time.monotonic() < deadline, f"no {prefix!r} line: {self.log(handle)!r}"
            time.sleep(0.05)


def _processes_of(uid: int) -> list[int]:
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        uids = proc.info["uids"]
        if uids is not None and uids.real == uid and proc.info["status"] != "zombie":
            found.append(proc.pid)
    return found


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _left_behind(pool: Pool, pids: list[int]) -> list[int]:
    """What is still alive of the job GONE_WITHIN_S from now (every process of its uid, as
    root)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        left = _alive(pids) + (_processes_of(pool.uid) if pool.uid is not None else [])
        if not left or time.monotonic() > deadline:
            return sorted(set(left))
        time.sleep(0.05)


@pytest.fixture(params=MODES)
def pool(request: pytest.FixtureRequest, open_dir: Path) -> Iterator[Pool]:
    mode: Mode = request.param
    if mode.needs_cgroup and not HAS_CGROUP:
        pytest.skip("a per-job cgroup needs root and a mounted pids controller")
    uid = 61000 + secrets.randbelow(4000) if ROOT else None
    ctx = AdapterContext(
        pool=POOL,
        gpu_type="cpu",
        state_dir=open_dir / "state",
        options={**mode.options, "max_processes": 64, "max_log_bytes": 1_000_000},
    )
    try:
        yield Pool(LocalBackend(ctx), ctx, uid)
    finally:
        if uid is not None:  # a failed test must not leave its sleepers behind
            for pid in _processes_of(uid):
                os.kill(pid, signal.SIGKILL)


def test_processes_that_left_the_group_end_with_the_job(pool: Pool) -> None:
    handle = pool.backend.submit(pool.spec("escapes", ESCAPES))
    status = pool.wait(handle)
    assert status.state == RunState.SUCCEEDED, pool.log(handle)
    pids = [int(p) for p in pool.wait_for_line(handle, "pids")]

    assert _left_behind(pool, pids) == []


def test_cancel_kills_the_whole_tree(pool: Pool) -> None:
    handle = pool.backend.submit(pool.spec("escapes-cancel", ESCAPES, env={"HOLD": "1"}))
    pids = [int(p) for p in pool.wait_for_line(handle, "pids")]

    pool.backend.cancel(handle, grace_s=0.5)

    assert pool.wait(handle).state == RunState.CANCELLED
    assert _left_behind(pool, pids) == []


@pytest.mark.skipif(not HAS_CGROUP, reason="needs root and a mounted pids cgroup controller")
def test_cancel_after_the_runner_died_kills_the_whole_tree(open_dir: Path) -> None:
    uid = 61000 + secrets.randbelow(4000)
    ctx = AdapterContext(pool=POOL, gpu_type="cpu", state_dir=open_dir / "state")
    pool = Pool(LocalBackend(ctx), ctx, uid)
    try:
        handle = pool.backend.submit(pool.spec("orphaned", ESCAPES, env={"HOLD": "1"}))
        pids = [int(p) for p in pool.wait_for_line(handle, "pids")]
        os.kill(int(handle.data["pid"]), signal.SIGKILL)  # the runner crashes
        assert pool.wait(handle).state == RunState.LOST

        LocalBackend(ctx).cancel(handle, grace_s=5)  # a restarted server reaps the LOST attempt

        assert _left_behind(pool, pids) == []
        cgroups = Path(contain.find_hierarchy().base)  # type: ignore[union-attr]
        assert not [p for p in cgroups.iterdir() if p.name.startswith("orphaned.1.")]
    finally:
        for pid in _processes_of(uid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not ROOT, reason="the process limit is checked under a uid of the job's own")
def test_a_fork_bomb_is_capped_and_cleaned_up(pool: Pool) -> None:
    handle = pool.backend.submit(pool.spec("fork-bomb", FORK_BOMB))
    status = pool.wait(handle)
    assert status.state == RunState.SUCCEEDED, pool.log(handle)
    (spawned,) = pool.wait_for_line(handle, "spawned")

    assert "refused" in pool.log(handle)
    assert int(spawned) < 64  # max_processes, the leader included
    assert _left_behind(pool, []) == []


def test_a_chatty_job_keeps_only_the_log_cap_and_is_not_killed(pool: Pool) -> None:
    handle = pool.backend.submit(pool.spec("chatty", CHATTY))
    status = pool.wait(handle)
    log = (Path(handle.data["dir"]) / "output.log").read_bytes()

    assert status.state == RunState.SUCCEEDED
    assert 1_000_000 <= len(log) <= 1_000_100
    assert log.endswith(b"\ngpupool: log truncated at 1000000 bytes\n")
    assert log[:1_000_000] == (b"x" * 999 + b"\n") * 1000


@dataclass(frozen=True)
class MountCase:
    mounts: list[str]
    own: str
    controllers: str  # what the cgroup2 mount offers
    want: tuple[int, str] | None


V1_PIDS = "39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids"
V2 = "41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            MountCase([V1_PIDS, V2], "8:pids:/\n0::/\n", "hugetlb", (1, "pids/gpupool")),
            id="hybrid host: v1 pids, the v2 mount lacks pids",
        ),
        pytest.param(
            MountCase([V1_PIDS, V2], "8:pids:/\n0::/\n", "cpu pids", (2, "unified/gpupool")),
            id="v2 with pids is preferred",
        ),
        pytest.param(
            MountCase(
                [V1_PIDS],
                "8:pids:/system.slice/gp.service\n",
                "",
                (1, "pids/system.slice/gp.service/gpupool"),
            ),
            id="v1 below the server's own cgroup",
        ),
        pytest.param(MountCase([V2], "0::/\n", "cpu memory", None), id="v2 without pids"),
        pytest.param(MountCase([], "0::/\n", "", None), id="no cgroup mounted"),
    ],
)
def test_the_hierarchy_is_found_from_mountinfo(tmp_path: Path, case: MountCase) -> None:
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text(case.controllers + "\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("".join(m.format(root=tmp_path) + "\n" for m in case.mounts))
    own = tmp_path / "cgroup"
    own.write_text(case.own)

    found = contain.find_hierarchy(str(mountinfo), str(own))

    want = None if case.want is None else (case.want[0], str(tmp_path / case.want[1]))
    assert (None if found is None else (found.version, found.base)) == want


UNIFIED = Path("/sys/fs/cgroup/unified")


V2_MOUNT = next(
    (m for m in (UNIFIED, Path("/sys/fs/cgroup")) if (m / "cgroup.controllers").exists()), None
)


@pytest.mark.skipif(not ROOT or V2_MOUNT is None, reason="needs root and a cgroup v2 mount")
def test_a_v2_cgroup_takes_a_process_kills_it_and_goes() -> None:
    assert V2_MOUNT is not None
    # Without a pids controller here, but enter, cgroup.kill and removal are the same.
    group = contain.Cgroup(2, str(V2_MOUNT / f"gpupool-test-{secrets.token_hex(4)}"))
    os.mkdir(group.path)
    try:
        child = subprocess.Popen(["sleep", "60"], preexec_fn=group.enter)
        assert group.members() == [child.pid]
        assert contain.kill_all(group.members, group.kill_all, reap=lambda: None)
        child.wait(timeout=5)
        assert child.returncode == -signal.SIGKILL
        assert group.members() == []
        assert group.remove()
        assert not os.path.exists(group.path)
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(group.path)
