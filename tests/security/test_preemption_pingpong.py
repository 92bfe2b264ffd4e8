"""M3 of issue 10, replayed: the room a reclaim frees goes to its preemptor, not back to the victim.

The attack was no attack, only two teams borrowing from each other in one cohort: a job of
team-b reclaimed a GPU that team-a had borrowed; the victim, requeued with its old submit time,
was given the freed GPUs back about 15 ms after it ended; the preemptor then preempted again.
1,935 preemptions in 3 minutes, one job 408 attempts.

Here, on the real server as root with real jobs (team-a and team-b, nominal 4 each of the 8-GPU
pool, one cohort):

1. bob's team-b first runs the whole pool for a few seconds, so that its usage history is the
   larger one: when both teams are owed their guarantee and borrow nothing, team-a's queue is
   decided first (history breaks the tie; before any history, the older submit time does);
2. alice runs ``a1`` (1 GPU) and then ``v`` (4 GPUs: team-a borrows one); bob runs ``b1``
   (3 GPUs): the pool is full. alice queues ``a3`` (1 GPU), which makes team-a owed its
   guarantee as soon as ``v`` is gone;
3. bob submits ``p`` (1 GPU, within team-b's nominal): it reclaims ``v``, the most recently
   started job of the borrowing team. ``v`` ignores SIGTERM and is killed after its grace.

Before nominations the cycle after ``v`` ended decided team-a first: ``v`` (the head of its
queue) got its 4 GPUs back, borrowing again, and ``p``, still short, preempted ``a1``: two
preemption decisions for one wait, and ``p`` ran on ``a1``'s GPU. Now ``p`` is decided first on
the room ``v`` freed. What is checked, from the jobs' attempts as the API shows them: ``p``
preempted exactly one job, ``v``, once; nothing else was preempted; ``p`` started on ``v``'s GPUs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from support.hostile import SecureCluster

# Waits until the file named by argv[2] exists; with argv[1] == "ignore" it ignores SIGTERM (a
# victim that uses its whole grace period, then is killed).
HOLD = """
import os, signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
"""
WARM_UP_S = 5  # team-b's 8 GPUs for this long: 40 GPU-seconds of history before team-a starts
RUNNING = frozenset({"running"})


def _attempts(cluster: SecureCluster, user: str, job_id: str) -> list[dict[str, Any]]:
    attempts: list[dict[str, Any]] = cluster.job(user, job_id)["attempts"] or []
    return attempts


def _devices(attempt: dict[str, Any]) -> set[int]:
    return {d for placement in attempt["devices"] for d in placement}


def test_a_reclaimed_gpu_goes_to_its_preemptor_not_back_to_the_victim(
    cluster: SecureCluster,
) -> None:
    gate = Path(tempfile.mkdtemp(prefix="gpupool-m3-"))
    gate.chmod(0o755)  # the jobs, as alice and bob, look for the stop file here
    stop = gate / "stop"

    def hold(user: str, gpus: int, mode: str = "exit") -> dict[str, Any]:
        return cluster.submit(user, [cluster.python, "-c", HOLD, mode, str(stop)], gpus=gpus)

    jobs: dict[str, tuple[str, str]] = {}  # name -> (user, id)
    try:
        warm = cluster.submit(
            "bob", [cluster.python, "-c", f"import time; time.sleep({WARM_UP_S})"], gpus=8
        )
        assert cluster.wait("bob", warm["id"], timeout=60)["status"] == "succeeded"
        for name, user, gpus, mode in (
            ("a1", "alice", 1, "exit"),
            ("v", "alice", 4, "ignore"),
            ("b1", "bob", 3, "exit"),
        ):
            job = hold(user, gpus, mode)
            jobs[name] = (user, job["id"])
            cluster.wait(user, job["id"], timeout=60, until=RUNNING)
        jobs["a3"] = ("alice", hold("alice", 1)["id"])
        jobs["p"] = ("bob", hold("bob", 1)["id"])
        p_id = jobs["p"][1]
        cluster.wait("bob", p_id, timeout=60, until=RUNNING)
        time.sleep(1.0)  # a few more cycles: any further preemption by p would be decided now
        during = {name: _attempts(cluster, user, job_id) for name, (user, job_id) in jobs.items()}
    finally:
        stop.touch()
        for user, job_id in jobs.values():
            cluster.wait(user, job_id, timeout=60)
        shutil.rmtree(gate, ignore_errors=True)

    after = {name: _attempts(cluster, user, job_id) for name, (user, job_id) in jobs.items()}
    by_p = [
        (name, attempt["number"])
        for name, attempts in after.items()
        for attempt in attempts
        if attempt["message"] == f"preempted for {p_id}"
    ]
    assert by_p == [("v", 1)], f"p preempted {by_p}, wanted v once: {during}"
    preempted = [
        (name, attempt["number"], attempt["message"])
        for name, attempts in after.items()
        for attempt in attempts
        if attempt["status"] == "preempted"
    ]
    assert preempted == [("v", 1, f"preempted for {p_id}")], during
    first_v, first_p = after["v"][0], after["p"][0]
    assert _devices(first_p) <= _devices(first_v), (
        f"p ran on {_devices(first_p)}, not on the GPUs v freed ({_devices(first_v)})"
    )
    # The victim did not get its room back while p waited: its next attempt came after p's.
    assert all(a["admitted_at"] >= first_p["admitted_at"] for a in after["v"][1:]), during
