"""The POSIX identity a job runs with: its user's, plus the gid of the team it runs for."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.backends.base import PosixIdentity
from gpupool.controller.loop import posix_identity
from gpupool.spec.load import parse_config

CONFIG = parse_config(
    """
gpu_types: {t4: {}}
users:
  alice: {uid: 10001, gid: 20001, groups: [40000]}
  bob: {uid: 10002, gid: 20002, groups: [30001]}
teams:
  team-a: {gid: 30001, members: {alice: member, bob: member}}
  team-b: {gid: 30002, members: {alice: member}}
  team-c: {members: {alice: member}}
""",
    "test.yaml",
)


@dataclass(frozen=True)
class Case:
    user: str
    team: str
    expected: PosixIdentity | None


CASES = [
    pytest.param(
        Case("alice", "team-a", PosixIdentity(10001, 20001, (40000, 30001))),
        id="team gid added to the user's groups",
    ),
    pytest.param(
        Case("alice", "team-b", PosixIdentity(10001, 20001, (40000, 30002))),
        id="only the job's team, not the user's other teams",
    ),
    pytest.param(
        Case("alice", "team-c", PosixIdentity(10001, 20001, (40000,))),
        id="team without a gid adds nothing",
    ),
    pytest.param(
        Case("bob", "team-a", PosixIdentity(10002, 20002, (30001,))),
        id="no duplicate when the user already has it",
    ),
    pytest.param(Case("mallory", "team-a", None), id="unknown user: no identity"),
]


@pytest.mark.parametrize("case", CASES)
def test_posix_identity(case: Case) -> None:
    assert posix_identity(CONFIG, case.user, case.team) == case.expected
