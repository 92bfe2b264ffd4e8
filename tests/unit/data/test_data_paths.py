"""Job input/output paths: what is accepted, its canonical form, and why the rest is not."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.data.paths import PathProblem, attempt_prefix, check_job_paths, check_path, within


@dataclass(frozen=True)
class Case:
    path: str
    output: bool = False
    canonical: str | None = None  # None: rejected
    problem: str = ""  # part of the message when rejected


CASES = [
    pytest.param(Case("shared/datasets/x", canonical="shared/datasets/x"), id="shared file"),
    pytest.param(Case("shared", canonical="shared"), id="the whole shared area as an input"),
    pytest.param(Case("home/alice/ckpt", canonical="home/alice/ckpt"), id="own home"),
    pytest.param(Case("shared/x/", canonical="shared/x"), id="one trailing slash is dropped"),
    pytest.param(Case("shared/x", output=True, canonical="shared/x"), id="output in shared"),
    pytest.param(
        Case("home/alice/out", output=True, canonical="home/alice/out"), id="output in own home"
    ),
    pytest.param(Case("", problem="empty path"), id="empty"),
    pytest.param(Case("   ", problem="empty path"), id="blank"),
    pytest.param(Case("/etc/passwd", problem="absolute path"), id="absolute"),
    pytest.param(Case("~/x", problem="absolute path"), id="home-relative"),
    pytest.param(Case("shared/../../etc", problem="contains '..'"), id="dot-dot"),
    pytest.param(Case("shared/a/..", problem="contains '..'"), id="trailing dot-dot"),
    pytest.param(Case("shared//x", problem="empty or '.' component"), id="double slash"),
    pytest.param(Case("shared/./x", problem="empty or '.' component"), id="dot component"),
    pytest.param(Case("shared\\x", problem="contains '\\'"), id="backslash"),
    pytest.param(Case("shared/a\nb", problem="control character"), id="newline"),
    pytest.param(Case("shared/" + "a" * 1100, problem="longer than"), id="too long"),
    pytest.param(Case("datasets/x", problem="not under shared/ or home/alice/"), id="other area"),
    pytest.param(Case("home", problem="not under shared/ or home/alice/"), id="all homes"),
    pytest.param(Case("home/bob/x", problem="another user's home"), id="another user's home"),
    pytest.param(
        Case("home/bob/x", output=True, problem="another user's home"),
        id="output in another user's home",
    ),
    pytest.param(
        Case("shared", output=True, problem="needs a name below shared/"), id="output = area"
    ),
    pytest.param(
        Case("home/alice", output=True, problem="needs a name below home/alice/"),
        id="output = own home",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_check_path(case: Case) -> None:
    if case.canonical is not None:
        assert check_path(case.path, "alice", output=case.output) == case.canonical
    else:
        with pytest.raises(PathProblem, match=None) as info:
            check_path(case.path, "alice", output=case.output)
        assert case.problem in str(info.value)


def test_job_paths_name_each_bad_field_and_index() -> None:
    inputs, outputs, problems = check_job_paths(
        ["shared/a", "/abs", "home/bob/x"],
        ["home/alice/out/", "shared/../x", "home/alice/out"],
        "alice",
    )
    assert inputs == ["shared/a"]
    assert outputs == ["home/alice/out"]
    assert [p["field"] for p in problems] == ["inputs[1]", "inputs[2]", "outputs[1]", "outputs[2]"]
    assert problems[-1]["message"] == "same as outputs[0]"


@dataclass(frozen=True)
class Within:
    path: str
    scope: str
    inside: bool


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Within("shared/x", "shared/x", True), id="the scope itself"),
        pytest.param(Within("shared/x/a.csv", "shared/x", True), id="below"),
        pytest.param(Within("shared/xy", "shared/x", False), id="a sibling with the same prefix"),
        pytest.param(Within("shared", "shared/x", False), id="above"),
    ],
)
def test_within(case: Within) -> None:
    assert within(case.path, case.scope) is case.inside


def test_each_attempt_writes_under_its_own_prefix() -> None:
    assert attempt_prefix("home/alice/ckpt", 3) == "home/alice/ckpt/attempt-3"
