"""Budgets and webhooks in the configuration: each bad value is reported at its line, with a fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gpupool.spec import diff as spec_diff
from gpupool.spec.load import parse_config, validate_config_text

Build = Callable[..., Any]  # the `build` fixture of conftest.py


def team_with(budgets: str) -> str:
    return f"""
        teams:
          team-a:
            cohort: research
            quota:
              h100: {{nominal: 2}}
            budgets:
{budgets}
    """


@dataclass(frozen=True)
class Case:
    sections: dict[str, str]
    path: str
    message: str
    hint: str


CASES = [
    pytest.param(
        Case(
            {"teams": team_with("              - {name: m, gpu_hours: 5, amount: 9}  # <-")},
            "teams.team-a.budgets[0]",
            "needs exactly one limit",
            "set gpu_hours: N (GPU-hours) or amount: N (USD)",
        ),
        id="two limits",
    ),
    pytest.param(
        Case(
            {"teams": team_with("              - {name: m}  # <-")},
            "teams.team-a.budgets[0]",
            "needs exactly one limit",
            "gpu_hours",
        ),
        id="no limit",
    ),
    pytest.param(
        Case(
            {"teams": team_with("              - {name: m, period: custom, gpu_hours: 1}  # <-")},
            "teams.team-a.budgets[0]",
            "custom budget 'm' needs start and end",
            "YYYY-MM-DD",
        ),
        id="custom without days",
    ),
    pytest.param(
        Case(
            {
                "teams": team_with(
                    "              - name: m\n"
                    "                period: custom\n"
                    "                gpu_hours: 1\n"
                    "                start: 2027-03-01\n"
                    "                end: 2027-02-01  # <-"
                )
            },
            "teams.team-a.budgets[0].end",
            "end 2027-02-01 is before start 2027-03-01",
            "set end to 2027-03-01 or later",
        ),
        id="custom period ends before it starts",
    ),
    pytest.param(
        Case(
            {
                "teams": team_with(
                    "              - name: m\n"
                    "                gpu_hours: 1\n"
                    "                start: 2027-03-01  # <-"
                )
            },
            "teams.team-a.budgets[0].start",
            "start applies to custom periods only, not 'month'",
            "set period: custom",
        ),
        id="days on a monthly budget",
    ),
    pytest.param(
        Case(
            {"teams": team_with("              - {name: m, gpu_hours: 1, gpu_type: a100}  # <-")},
            "teams.team-a.budgets[0].gpu_type",
            "unknown gpu type 'a100'",
            "h100",
        ),
        id="unknown gpu type",
    ),
    pytest.param(
        Case(
            {
                "teams": team_with(
                    "              - {name: m, gpu_hours: 1}\n"
                    "              - {name: m, gpu_hours: 2}  # <-"
                )
            },
            "teams.team-a.budgets[1].name",
            "duplicate budget name 'm' (also budgets[0])",
            "its own name",
        ),
        id="duplicate names",
    ),
    pytest.param(
        Case(
            {
                "teams": team_with(
                    "              - name: m\n"
                    "                gpu_hours: 1\n"
                    "                thresholds: [50, 0]  # <-"
                )
            },
            "teams.team-a.budgets[0].thresholds[1]",
            "threshold 0 is not a percentage",
            "[50, 80, 100]",
        ),
        id="zero threshold",
    ),
    pytest.param(
        Case(
            {
                "teams": team_with(
                    "              - {name: m, gpu_hours: 1, enforcement: stop}  # <-"
                )
            },
            "teams.team-a.budgets[0].enforcement",
            "",
            "",
        ),
        id="unknown enforcement",
    ),
    pytest.param(
        Case(
            {
                "accounting": """
                    accounting:
                      webhooks:
                        - {name: ops, url: "https://h.example/x", secret: abc}  # <-
                """
            },
            "accounting.webhooks[0].secret",
            "",
            "",
        ),
        id="a secret in the file is refused",
    ),
    pytest.param(
        Case(
            {
                "accounting": """
                    accounting:
                      webhooks:
                        - {name: ops, url: "ftp://h.example/x"}  # <-
                """
            },
            "accounting.webhooks[0].url",
            "",
            "",
        ),
        id="not an http url",
    ),
    pytest.param(
        Case(
            {
                "accounting": """
                    accounting:
                      webhooks:
                        - {name: ops, url: "https://a.example/"}
                        - {name: ops, url: "https://b.example/"}  # <-
                """
            },
            "accounting.webhooks[1].name",
            "duplicate webhook name 'ops'",
            "its own name",
        ),
        id="duplicate webhook names",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_budget_problem(case: Case, build: Build) -> None:
    built = build(**case.sections)
    problems = validate_config_text(built.text, "c.yaml")

    assert len(problems) == 1, [str(p) for p in problems]
    (problem,) = problems
    assert (problem.file, problem.path, problem.line) == ("c.yaml", case.path, built.line)
    assert case.message in problem.message and case.hint in problem.hint and problem.hint


def test_a_valid_budget_and_webhook_parse(build: Build) -> None:
    built = build(
        teams=team_with("              - {name: q, period: quarter, amount: 900, gpu_type: h100}"),
        accounting="""
            accounting:
              webhooks:
                - {name: ops, url: "https://hooks.example/x", secret_env: HOOK_SECRET}
        """,
    )
    config = parse_config(built.text)
    (budget,) = config.teams["team-a"].budgets
    assert (budget.period, budget.amount, budget.thresholds, budget.enforcement) == (
        "quarter", 900.0, [50.0, 80.0, 100.0], "alert"
    )  # fmt: skip
    assert config.accounting.webhooks[0].secret_env == "HOOK_SECRET"


def test_diff_shows_budgets_by_name_and_accounting_changes(build: Build) -> None:
    old = parse_config(build().text)
    new = parse_config(
        build(
            teams=team_with("              - {name: m, gpu_hours: 10, enforcement: hold}"),
            accounting="""
                accounting:
                  timezone: Europe/Paris
            """,
        ).text
    )
    raised = parse_config(
        build(
            teams=team_with("              - {name: m, gpu_hours: 20, enforcement: hold}"),
            accounting="""
                accounting:
                  timezone: Europe/Paris
            """,
        ).text
    )
    added = spec_diff.render(spec_diff.diff(old, new))
    assert "+ team-a budgets.m: " in added and '"gpu_hours": 10.0' in added
    assert "~ timezone: UTC -> Europe/Paris" in added
    assert spec_diff.render(spec_diff.diff(new, raised)) == (
        "teams\n  ~ team-a budgets.m.gpu_hours: 10.0 -> 20.0"
    )
