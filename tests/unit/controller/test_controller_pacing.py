"""The loop's pacing: under a storm of submits it rests after a long tick (so the API keeps
most of the process), but a submit alone is scheduled at once, and a backend's answer (a poll
that freed GPUs, a submission to record) cuts the rest short, so freed GPUs are given out
again without waiting it out."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpupool.config import sqlite_url
from gpupool.controller import loop
from gpupool.controller.clock import SystemClock
from gpupool.controller.loop import Controller, TickStats
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, SchedulerSettings
from gpupool.state.db import make_engine, session_factory, upgrade

LONG_TICK_S = 0.3  # the rest after it: 3 x 0.3 s


class Ticks:
    """A tick that takes LONG_TICK_S the first time and nothing after; when each began."""

    def __init__(self) -> None:
        self.began: list[float] = []
        self.first_done = threading.Event()
        self.second = threading.Event()

    def __call__(self) -> TickStats:
        self.began.append(time.monotonic())
        if len(self.began) == 1:
            time.sleep(LONG_TICK_S)
            self.first_done.set()
        else:
            self.second.set()
        return TickStats()


@pytest.fixture
def controller(tmp_path: Path) -> Controller:
    engine = make_engine(sqlite_url(tmp_path / "s.db"))
    upgrade(engine)
    config = ClusterConfig(
        gpu_types={"gpu": GpuType()},
        pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=1))],
        scheduler=SchedulerSettings(cycle_interval_s=30),
    )
    return Controller(session_factory(engine), lambda: config, None, SystemClock())  # type: ignore[arg-type]


def second_tick_after(controller: Controller, urgent: bool, wakes: int = 1) -> float:
    """Seconds from the end of the long first tick to the start of the next one, woken
    (``wakes`` times) right after it ends."""
    ticks = Ticks()
    controller.tick = ticks  # type: ignore[method-assign]
    controller.start()
    try:
        assert ticks.first_done.wait(10)
        ended = time.monotonic()
        for _ in range(wakes - 1):
            controller.wake()
        controller.wake(reschedule=False, urgent=urgent)
        assert ticks.second.wait(10)
        return ticks.began[1] - ended
    finally:
        controller._stop.set()
        controller._urgent.set()
        controller._wake.set()


def test_a_storm_of_wakes_waits_out_the_rest_after_a_long_tick(controller: Controller) -> None:
    waited = second_tick_after(controller, urgent=False, wakes=loop.STORM_WAKES + 1)
    assert waited >= 3 * LONG_TICK_S - LONG_TICK_S - 0.05


def test_a_single_wake_is_scheduled_after_the_short_gap(controller: Controller) -> None:
    assert second_tick_after(controller, urgent=False) < 3 * LONG_TICK_S - LONG_TICK_S - 0.1


def test_a_backend_answer_cuts_the_rest_short(controller: Controller) -> None:
    waited = second_tick_after(controller, urgent=True, wakes=loop.STORM_WAKES + 1)
    assert waited < 3 * LONG_TICK_S - LONG_TICK_S - 0.1
    assert loop.MIN_URGENT_GAP_S < loop.MIN_TICK_GAP_S
