"""The snapshot the replay hands each cycle: the shortcuts the engine takes to build it (usage
kept as attempts start and end, team views built field by field) give what the plain
construction gives."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpupool.scheduler import held_gpus
from gpupool.sim.cluster import policy_setup
from gpupool.sim.engine import Simulation
from gpupool.sim.trace import TraceJob
from gpupool.spec.load import load_config

CONFIG = """
gpu_types: {h100: {}, a100: {}}
pools:
  - {name: h100-pool, backend: local, gpu_type: h100, nodes: 2, node: {gpus: 4}}
  - {name: a100-pool, backend: local, gpu_type: a100, nodes: 1, node: {gpus: 4}}
cohorts: {shared: {}}
teams:
  team-a: {cohort: shared, weight: 2, quota: {h100: {nominal: 4}, a100: {nominal: 2}}}
  team-b: {cohort: shared, quota: {h100: {nominal: 4}}}
"""

TRACE = [
    TraceJob("a1", 0, 300, 4, "team-a", "h100"),
    TraceJob("a2", 10, 50, 2, "team-a", "a100"),
    TraceJob("b1", 20, 100, 4, "team-b", "h100"),
    TraceJob("b2", 30, 100, 4, "team-b", "h100"),
    TraceJob("a3", 40, 100, 1, "team-a", "h100"),
]


class Watched(Simulation):
    """A simulation that checks every snapshot it hands a cycle."""

    checked = 0

    def _cycle(self) -> bool:
        snapshot, _ = self.snapshot_now()
        usage = self._usage()
        assert usage == held_gpus(snapshot.running)
        usage_history = self.meter.usage(self.now)
        for name, view in snapshot.teams.items():
            base = self._teams[name]
            if name in usage_history:
                assert view == replace(base, usage_history=usage_history[name])
            else:
                assert view is base
        Watched.checked += 1
        return super()._cycle()


def test_each_cycle_gets_the_usage_and_team_views_of_the_plain_construction(
    tmp_path: Path,
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    setup = policy_setup(load_config(tmp_path / "c.yaml"), "gpupool")
    outcome = Watched(setup, TRACE, {"team-a": 6, "team-b": 4}).run()
    assert Watched.checked > len(TRACE)
    assert all(record.end is not None for record in outcome.jobs)
