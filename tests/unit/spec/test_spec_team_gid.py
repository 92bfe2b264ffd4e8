"""Team gids: validated on their own and unique across teams."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.spec.load import validate_config_text

BASE = """
gpu_types: {t4: {}}
users: {alice: {uid: 10001, gid: 20001}}
teams:
"""


@dataclass(frozen=True)
class Case:
    teams: str
    problems: list[tuple[str, str]]  # (path, part of "message; hint")


CASES = [
    pytest.param(Case("  team-a: {gid: 30001}\n  team-b: {gid: 30002}\n", []), id="distinct gids"),
    pytest.param(Case("  team-a: {}\n  team-b: {}\n", []), id="no gids"),
    pytest.param(
        Case(
            "  team-a: {gid: 30001}\n  team-b: {gid: 30001}\n",
            [("teams.team-b.gid", "gid 30001 is also team 'team-a''s")],
        ),
        id="shared gid",
    ),
    pytest.param(
        Case("  team-a: {gid: 0}\n", [("teams.team-a.gid", "0 is out of range; use a value >= 1")]),
        id="root group refused",
    ),
    pytest.param(
        Case("  team-a: {gid: abc}\n", [("teams.team-a.gid", "should be a whole number")]),
        id="not a number",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_team_gid(case: Case) -> None:
    problems = validate_config_text(BASE + case.teams, "c.yaml")
    found = [(p.path, f"{p.message}; {p.hint}") for p in problems]
    assert len(found) == len(case.problems), found
    for (path, text), (want_path, want_text) in zip(found, case.problems, strict=True):
        assert path == want_path
        assert want_text in text
