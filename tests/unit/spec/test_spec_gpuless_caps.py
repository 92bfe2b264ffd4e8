"""The caps on GPU-less work in a team's quota (``cpus``, ``memory_gb``; issue 10, M1): how they
are validated and what they default to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.spec.load import load_config, parse_config, validate_config_text

BASE = """
gpu_types: {h100: {}, t4: {}, cpu: {}}
pools:
  - {name: h, backend: local, gpu_type: h100, nodes: 2, node: {gpus: 4, cpus: 16, memory_gb: 64}}
  - {name: h2, backend: local, gpu_type: h100, node: {gpus: 8, cpus: 16, memory_gb: 256}}
  - {name: c, backend: local, gpu_type: cpu, nodes: 2, node: {gpus: 0, cpus: 32, memory_gb: 128}}
cohorts: {research: {}}
teams:
"""


@dataclass(frozen=True)
class Case:
    teams: str
    problems: list[tuple[str, str]]  # (path, part of "message; hint")


CASES = [
    pytest.param(
        Case("  a: {quota: {h100: {nominal: 2, cpus: 6, memory_gb: 12.5}}}\n", []),
        id="caps on a gpu type",
    ),
    pytest.param(Case("  a: {quota: {cpu: {cpus: 8, memory_gb: 32}}}\n", []), id="caps on cpu"),
    pytest.param(Case("  a: {quota: {cpu: {cpus: 0}}}\n", []), id="a zero cap"),
    pytest.param(
        Case(
            "  a: {quota: {h100: {nominal: 1, cpus: -1}}}\n",
            [("teams.a.quota.h100.cpus", "-1 is out of range; use a value >= 0")],
        ),
        id="negative cpus",
    ),
    pytest.param(
        Case(
            "  a: {quota: {h100: {memory_gb: lots}}}\n",
            [("teams.a.quota.h100.memory_gb", "should be a number")],
        ),
        id="memory that is not a number",
    ),
    pytest.param(
        Case(
            "  a: {quota: {cpu: {nominal: 4, cpus: 4}}}\n",
            [("teams.a.quota.cpu.nominal", "nominal counts GPUs, and 'cpu' pools have none")],
        ),
        id="nominal on the cpu type",
    ),
    pytest.param(
        Case(
            "  a: {cohort: research, quota: {cpu: {cpus: 4, lending_limit: 0}}}\n",
            [("teams.a.quota.cpu.lending_limit", "lending_limit counts GPUs")],
        ),
        id="lending limit on the cpu type",
    ),
    pytest.param(
        Case(
            "  a: {quota: {h100: {nominal: 1, cpu_limit: 4}}}\n",
            [("teams.a.quota.h100.cpu_limit", "unknown key")],
        ),
        id="misspelt cap",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_gpuless_cap_validation(case: Case) -> None:
    problems = validate_config_text(BASE + case.teams, "c.yaml")
    found = [(p.path, f"{p.message}; {p.hint}") for p in problems]
    assert len(found) == len(case.problems), found
    for (path, text), (want_path, want_text) in zip(found, case.problems, strict=True):
        assert path == want_path
        assert want_text in text


# h100: 2 x 16 + 16 = 48 CPUs and 2 x 64 + 256 = 384 GB for 2 x 4 + 8 = 16 GPUs: 3 CPUs per GPU,
# 8 GB per CPU. cpu: 64 CPUs and 256 GB, 4 GB per CPU. t4: no pool.
DEFAULTS = [
    pytest.param("h100: {nominal: 2}", "h100", (6.0, 48.0), id="a GPU type: the nominal share"),
    pytest.param("h100: {nominal: 0}", "h100", (0.0, 0.0), id="nominal 0: no GPU-less work"),
    pytest.param("t4: {nominal: 2}", "h100", (0.0, 0.0), id="no quota entry: no GPU-less work"),
    pytest.param("t4: {nominal: 2}", "t4", (0.0, 0.0), id="a type without pools: nothing"),
    pytest.param("h100: {nominal: 2, cpus: 10}", "h100", (10.0, 80.0), id="memory follows cpus"),
    pytest.param("h100: {nominal: 2, memory_gb: 5}", "h100", (6.0, 5.0), id="memory alone"),
    pytest.param("h100: {nominal: 2}", "cpu", (0.0, 0.0), id="the cpu type: none unless set"),
    pytest.param("cpu: {cpus: 8}", "cpu", (8.0, 32.0), id="the cpu type with cpus set"),
    pytest.param("cpu: {cpus: 8, memory_gb: 1}", "cpu", (8.0, 1.0), id="both set"),
]


@pytest.mark.parametrize(("quota", "gpu_type", "want"), DEFAULTS)
def test_gpuless_caps_default_to_the_teams_share(
    quota: str, gpu_type: str, want: tuple[float, float]
) -> None:
    config = parse_config(BASE + f"  a: {{quota: {{{quota}}}}}\n  b: {{}}\n")
    caps = config.gpuless_caps()
    assert caps["a"][gpu_type] == pytest.approx(want)
    assert caps["b"] == {"h100": (0.0, 0.0), "t4": (0.0, 0.0), "cpu": (0.0, 0.0)}


def test_demo_team_a_may_run_16_cpus_of_gpu_less_work(demo_path: Path) -> None:
    """The README's numbers: h100 and t4 nominal 2 each, 4 CPUs and 16 GB per GPU."""
    caps = load_config(demo_path).gpuless_caps()
    assert caps["team-a"] == {"h100": (8.0, 32.0), "t4": (8.0, 32.0)}
    assert caps["team-c"] == {"h100": (0.0, 0.0), "t4": (8.0, 32.0)}
