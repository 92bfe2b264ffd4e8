"""The shipped example configurations: the demo is valid and sets up the acceptance scenario;
the invalid example reports each marked mistake at its line."""

from __future__ import annotations

from pathlib import Path

from gpupool.spec.load import load_config, validate_config_file

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_demo_validates_cleanly() -> None:
    assert validate_config_file(EXAMPLES / "demo.yaml") == []


def test_demo_sets_up_the_acceptance_scenario() -> None:
    # alice submits three 1-GPU h100 jobs: two run, the third waits on team-a's h100 quota.
    config = load_config(EXAMPLES / "demo.yaml")

    team_a = config.teams["team-a"]
    assert team_a.members["alice"] == "member"
    assert (team_a.quota["h100"].nominal, team_a.quota["h100"].borrowing_limit) == (2, 0)
    h100_gpus = sum(p.nodes * p.node.gpus for p in config.pools if p.gpu_type == "h100")
    assert h100_gpus > 2  # the third job waits for quota, not for capacity

    assert config.default_priority_class() == "training"
    assert config.teams["team-c"].cohort is None
    assert {u for u, user in config.users.items() if user.platform_admin} == {"admin"}


def test_invalid_example_reports_every_marked_mistake() -> None:
    path = EXAMPLES / "invalid.yaml"
    marked = [
        n for n, line in enumerate(path.read_text().splitlines(), start=1) if "# mistake" in line
    ]
    problems = validate_config_file(path)

    assert [p.line for p in problems] == marked
    assert [p.path for p in problems] == [
        "pools[0].gpu_type",
        "pools[1].name",
        "priority_classes.low.default",
        "teams.team-a.cohort",
        "teams.team-a.quota.h100.lending_limit",
        "teams.team-a.members.dave",
        "teams.team-c.quota.t4.borrowing_limit",
    ]
