"""Pool probes: asked at start and every PROBE_EVERY_S; a failure backs the pool off, shows
its reason and plans it with no node; an answer after a failure makes it available again."""

from __future__ import annotations

from concurrent.futures import Future

from gpupool.backends.base import PoolCapacity
from gpupool.backends.errors import BackendMisconfigured, BackendUnavailable
from gpupool.controller.backoff import Backoff
from gpupool.controller.probes import NO_NODE, PROBE_EVERY_S, Probes


class Answers:
    """What each pool's next probe gives: a capacity, None, or an error to raise."""

    def __init__(self) -> None:
        self.next: dict[str, PoolCapacity | Exception | None] = {}
        self.asked: list[str] = []

    def start(self, pool: str) -> Future[PoolCapacity | None]:
        self.asked.append(pool)
        future: Future[PoolCapacity | None] = Future()
        answer = self.next.get(pool)
        if isinstance(answer, Exception):
            future.set_exception(answer)
        else:
            future.set_result(answer)
        return future


def test_probes_at_start_then_on_their_period() -> None:
    answers, backoff = Answers(), Backoff()
    probes = Probes(backoff, answers.start, lambda: None)
    answers.next = {"slurm": PoolCapacity(3, 8), "local": None}
    probes.refresh(["slurm", "local"], now=0.0)
    assert answers.asked == ["slurm", "local"]
    assert probes.refresh(["slurm", "local"], now=1.0)  # the answers change what is planned
    assert probes.capacity == {"slurm": PoolCapacity(3, 8)}
    probes.refresh(["slurm", "local"], now=PROBE_EVERY_S - 1)
    assert len(answers.asked) == 2  # not due yet
    probes.refresh(["slurm", "local"], now=PROBE_EVERY_S + 1)
    assert len(answers.asked) == 4


def test_a_failed_probe_backs_off_shows_why_and_plans_no_node() -> None:
    answers, backoff = Answers(), Backoff()
    probes = Probes(backoff, answers.start, lambda: None)
    answers.next = {
        "ray": BackendUnavailable("connection refused"),
        "k": BackendMisconfigured("no module named kubernetes"),
    }
    probes.refresh(["ray", "k"], now=0.0)
    assert probes.refresh(["ray", "k"], now=0.1)
    assert probes.capacity == {"ray": NO_NODE, "k": NO_NODE}
    ray, k = backoff.health("ray"), backoff.health("k")
    assert not ray.available and ray.message == "unreachable: connection refused"
    assert not k.available and k.message == "misconfigured: no module named kubernetes"
    # Asked again as soon as the backoff ends, not a whole period later.
    answers.next = {"ray": None, "k": BackendMisconfigured("no module named kubernetes")}
    probes.refresh(["ray", "k"], now=0.5)
    assert answers.asked.count("ray") == 1  # still backed off
    probes.refresh(["ray", "k"], now=1.5)
    probes.refresh(["ray", "k"], now=1.6)
    assert answers.asked.count("ray") == 2
    assert backoff.health("ray").available and "ray" not in probes.capacity
    assert not backoff.health("k").available and probes.capacity["k"] == NO_NODE


def test_a_removed_pool_is_forgotten() -> None:
    answers, backoff = Answers(), Backoff()
    probes = Probes(backoff, answers.start, lambda: None)
    answers.next = {"slurm": PoolCapacity(3, 8)}
    probes.refresh(["slurm"], now=0.0)
    probes.refresh(["slurm"], now=0.1)
    probes.refresh([], now=0.2)
    assert probes.capacity == {}
