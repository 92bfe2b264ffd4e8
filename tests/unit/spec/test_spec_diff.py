"""spec.diff: each kind of change reads as one line, in its section."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.spec.diff import diff, render, summarize
from gpupool.spec.load import parse_config


@dataclass(frozen=True)
class Case:
    edit: Callable[[dict[str, Any]], None]
    lines: list[str]
    summary: str


def _quota(d: dict[str, Any]) -> None:
    d["teams"]["team-a"]["quota"]["h100"]["nominal"] = 4


def _role(d: dict[str, Any]) -> None:
    d["teams"]["team-a"]["members"]["alice"] = "admin"


def _join(d: dict[str, Any]) -> None:
    d["teams"]["team-b"]["members"]["carol"] = "viewer"


def _drop_team(d: dict[str, Any]) -> None:
    del d["teams"]["team-c"]


def _drop_pool(d: dict[str, Any]) -> None:
    d["pools"] = d["pools"][:1]


def _admin(d: dict[str, Any]) -> None:
    d["users"]["bob"]["platform_admin"] = True


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(_quota, ["teams", "  ~ team-a quota.h100.nominal: 2 -> 4"], "teams: ~1"),
            id="a quota change",
        ),
        pytest.param(
            Case(_role, ["teams", "  ~ team-a: role of alice: member -> admin"], "teams: ~1"),
            id="a role change",
        ),
        pytest.param(
            Case(_join, ["teams", "  + team-b: carol joins as viewer"], "teams: ~1"),
            id="a member added",
        ),
        pytest.param(Case(_drop_team, ["teams", "  - team-c"], "teams: -1"), id="a team removed"),
        pytest.param(
            Case(_drop_pool, ["pools", "  - demo-shared-dev-t4-pool"], "pools: -1"),
            id="a pool removed",
        ),
        pytest.param(
            Case(_admin, ["users", "  ~ bob platform_admin: false -> true"], "users: ~1"),
            id="a user made platform admin",
        ),
    ],
)
def test_each_change_is_one_line_in_its_section(demo_path: Path, case: Case) -> None:
    data = yaml.safe_load(demo_path.read_text())
    old = parse_config(demo_path.read_text())
    case.edit(data)
    changes = diff(old, parse_config(yaml.safe_dump(data)))
    assert render(changes).splitlines() == case.lines
    assert summarize(changes) == case.summary


def test_the_same_configuration_has_no_changes(demo_path: Path) -> None:
    config = parse_config(demo_path.read_text())
    assert diff(config, config) == [] and render([]) == "no changes"
