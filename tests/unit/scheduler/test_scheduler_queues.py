"""Queue order helpers: the fast sort agrees with the documented comparator."""

from __future__ import annotations

import random

import pytest

from gpupool.scheduler import PendingJob
from gpupool.scheduler.queues import TeamQueue, job_order, request_of, sort_jobs


def _jobs(seed: int) -> list[PendingJob]:
    rng = random.Random(seed)
    return [
        PendingJob(
            id=f"j{rng.randrange(1000):03d}-{i}",
            team="t",
            priority=rng.choice([0, 0, 10, 100]),
            submitted_at=float(rng.randrange(20)),
            gpus=rng.choice([1, 2, 8]),
            queued_at=rng.choice([None, float(rng.randrange(40))]),
        )
        for i in range(200)
    ]


@pytest.mark.parametrize("seed", range(5))
def test_sort_jobs_is_job_order(seed: int) -> None:
    jobs = _jobs(seed)

    def starving(job: PendingJob) -> bool:
        return job.waiting_since <= 10.0

    want = sorted(jobs, key=lambda job: job_order(job, starving(job)))
    assert sort_jobs(jobs, 10.0) == want
    assert sort_jobs(jobs) == sorted(jobs, key=job_order)


def test_skip_known_skips_a_run_of_the_heads_own_request() -> None:
    a1, a2, a3 = (PendingJob(f"a{i}", "t", 0, float(i), 1) for i in range(3))
    big = PendingJob("big", "t", 0, 5.0, 8)
    a4 = PendingJob("a4", "t", 0, 6.0, 1)
    queue = TeamQueue("t", [a1, a2, a3, big, a4])
    assert queue.skip_known({request_of(a1): "why"}) == ([a2, a3], ["why", "why"])
    assert queue.head == a1
    queue.advance()
    assert queue.head == big
    assert queue.skip_known({request_of(big): "why"}) == ([], [])
    assert queue.smallest == {(): 1}


def test_skip_known_stops_at_the_first_unknown_request() -> None:
    a1, a2 = (PendingJob(f"a{i}", "t", 0, float(i), 1) for i in range(2))
    b1 = PendingJob("b1", "t", 0, 2.0, 2)
    a3 = PendingJob("a3", "t", 0, 3.0, 1)
    c1 = PendingJob("c1", "t", 0, 4.0, 4)
    b2 = PendingJob("b2", "t", 0, 5.0, 2)
    queue = TeamQueue("t", [a1, a2, b1, a3, c1, b2])
    known = {request_of(a1): "why-a", request_of(b1): "why-b"}
    assert queue.skip_known(known) == ([a2, b1, a3], ["why-a", "why-b", "why-a"])
    assert queue.head == a1
    queue.advance()
    assert queue.head == c1
