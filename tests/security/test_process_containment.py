"""M4 and L6: processes that escape a job, a fork bomb, and a job that logs without end.

The attack: bob's job started a ``setsid`` child (and a double-forked daemon), which outlived
the job's cleanup by minutes, because the runner killed the job's process group only; another
job ran 3,004 processes; another wrote a 1 GiB log. Here bob's real jobs, through the real
server as root, do the same; the pool allows 256 processes and a 4,000,000-byte log
(``support.hostile``). Bob's uid runs nothing but this module's jobs, so "nothing of the job
is left" is checked over every process of his uid.
"""

from __future__ import annotations

import time

import psutil
import pytest

from support.attack_jobs import CHATTY, ESCAPES, FORK_BOMB
from support.hostile import SecureCluster

pytestmark = pytest.mark.timeout(180)

GONE_WITHIN_S = 5.0
MAX_PROCESSES = 256  # the pool's max_processes in support.hostile
MAX_LOG_BYTES = 4_000_000  # the pool's max_log_bytes


def processes_of(uid: int) -> list[str]:
    found = []
    for proc in psutil.process_iter(["uids", "status", "cmdline"]):
        uids = proc.info["uids"]
        if uids is not None and uids.real == uid and proc.info["status"] != "zombie":
            found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
    return found


def left_behind(uid: int) -> list[str]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := processes_of(uid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def wait_for_log(cluster: SecureCluster, user: str, job_id: str, text: str) -> str:
    deadline = time.monotonic() + 30
    while text not in (log := cluster.logs(user, job_id)):
        assert time.monotonic() < deadline, f"no {text!r} in the log: {log!r}"
        time.sleep(0.1)
    return log


def test_a_setsid_child_and_a_daemon_end_with_their_job(cluster: SecureCluster) -> None:
    job, log = cluster.run("bob", [cluster.python, "-c", ESCAPES])

    assert job["status"] == "succeeded", log
    assert "pids" in log
    assert left_behind(cluster.uid("bob")) == []


def test_cancel_kills_the_processes_that_left_the_group(cluster: SecureCluster) -> None:
    job = cluster.submit("bob", [cluster.python, "-c", ESCAPES], env={"HOLD": "1"})
    wait_for_log(cluster, "bob", job["id"], "pids")
    assert len(processes_of(cluster.uid("bob"))) >= 3  # the job, its setsid child, the daemon

    reply = cluster.client("bob").post(f"/v1/jobs/{job['id']}/cancel")
    assert reply.status_code == 200, reply.text

    assert cluster.wait("bob", job["id"])["status"] == "cancelled"
    assert left_behind(cluster.uid("bob")) == []


def test_a_fork_bomb_is_capped_at_the_pools_limit_and_cleaned_up(cluster: SecureCluster) -> None:
    job, log = cluster.run("bob", [cluster.python, "-c", FORK_BOMB])

    assert job["status"] == "succeeded", log
    spawned = int(log.split("spawned", 1)[1].split()[0])
    assert spawned < MAX_PROCESSES, log  # the job's own process counts too
    assert "refused" in log
    assert left_behind(cluster.uid("bob")) == []


def test_a_job_that_logs_50_mb_keeps_a_capped_log_and_runs_to_its_end(
    cluster: SecureCluster,
) -> None:
    job, log = cluster.run("bob", [cluster.python, "-c", CHATTY])

    assert job["status"] == "succeeded"
    assert MAX_LOG_BYTES <= len(log) <= MAX_LOG_BYTES + 100
    assert log.endswith(f"\ngpupool: log truncated at {MAX_LOG_BYTES} bytes\n")
    assert set(log[:MAX_LOG_BYTES]) == {"x", "\n"}


def test_the_job_cannot_write_its_log_file_past_the_runner(cluster: SecureCluster) -> None:
    """The cap holds only if the job cannot write output.log itself (it is the runner's)."""
    probe = (
        "import os, pathlib\n"
        "log = pathlib.Path(os.environ['GPUPOOL_JOB_WORKDIR']).parent / 'output.log'\n"
        "try:\n"
        "    open(log, 'ab').write(b'forged')\n"
        "    print('wrote')\n"
        "except OSError as exc:\n"
        "    print('denied', exc.errno)\n"
    )
    job, log = cluster.run("bob", [cluster.python, "-c", probe])

    assert job["status"] == "succeeded", log
    assert log.startswith("denied"), log
