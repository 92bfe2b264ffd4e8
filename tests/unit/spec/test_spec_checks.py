"""Cross-reference checks: each problem kind is reported once, at its line, with a fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpupool.spec.load import parse_config, validate_config_text

Build = Callable[..., Any]  # the `build` fixture of conftest.py


@dataclass(frozen=True)
class Case:
    sections: dict[str, str | None]
    path: str
    message: str
    hint: str
    extra: dict[str, str] = field(default_factory=dict)


CASES = [
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: a100  # <-
                        node: {gpus: 4}
                """
            },
            path="pools[0].gpu_type",
            message="unknown gpu type 'a100'",
            hint="did you mean 'h100'? add 'a100' under gpu_types or use one of: h100, t4",
        ),
        id="pool on unknown gpu type",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - {name: p, backend: local, gpu_type: h100, node: {gpus: 4}}
                      - {name: p, backend: local, gpu_type: t4, node: {gpus: 4}}  # <-
                """
            },
            path="pools[1].name",
            message="duplicate pool name 'p' (also pools[0])",
            hint="unique name",
        ),
        id="duplicate pool names",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node: {gpus: 4}
                        dedicated_to: team-z  # <-
                """
            },
            path="pools[0].dedicated_to",
            message="unknown team 'team-z'",
            hint="add 'team-z' under teams or use one of: team-a",
        ),
        id="pool dedicated to unknown team",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node:
                          gpus: 0  # <-
                """
            },
            path="pools[0].node.gpus",
            message="has no GPUs per node",
            hint="set node.gpus to at least 1, or use gpu_type 'cpu'",
        ),
        id="gpu pool without gpus",
    ),
    pytest.param(
        Case(
            {
                "gpu_types": "gpu_types: {h100: {}, cpu: {}}",
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: cpu
                        node: {gpus: 2}  # <-
                """,
            },
            path="pools[0].node.gpus",
            message="has GPUs on its nodes",
            hint="set node.gpus: 0",
        ),
        id="cpu pool with gpus",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node: {gpus: 4}
                        autoscale: {mode: fixed, min_nodes: 3, max_nodes: 1}  # <-
                """
            },
            path="pools[0].autoscale.max_nodes",
            message="max_nodes 1 is below min_nodes 3",
            hint="set max_nodes to at least 3",
        ),
        id="autoscale max below min",
    ),
    *(
        pytest.param(
            Case(
                {
                    "pools": f"""
                        pools:
                          - name: p
                            backend: {backend}  # <-
                            gpu_type: h100
                            node: {{gpus: 4}}
                    """
                },
                path="pools[0].backend",
                message=f"backend '{backend}' has no adapter yet: jobs sent to pool 'p' could",
                hint="use one of: local, slurm, ray",
            ),
            id=f"pool on {backend}, which has no adapter",
        )
        for backend in ("kubernetes",)
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node: {gpus: 4}
                        autoscale: {mode: autoscale, min_nodes: 0, max_nodes: 4}  # <-
                """
            },
            path="pools[0].autoscale.mode",
            message="autoscaling is not implemented yet",
            hint="use 'mode: fixed'",
        ),
        id="autoscale mode, which nothing implements",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: azure-batch
                        gpu_type: h100
                        nodes: 4  # <-
                        node: {gpus: 4}
                        options: {account_url: "https://a.eastus.batch.azure.com"}
                        autoscale: {mode: autoscale, max_nodes: 2}
                """
            },
            path="pools[0].nodes",
            message="autoscaled azure-batch pool 'p' has nodes: 4 but max_nodes: 2",
            hint="set nodes: 2",
        ),
        id="autoscaled Batch pool whose nodes are not its max_nodes",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: azure-batch
                        gpu_type: h100
                        node: {gpus: 4}
                        options: {account_url: "https://a.eastus.batch.azure.com"}
                        autoscale: {mode: autoscale}  # <-
                """
            },
            path="pools[0].autoscale.max_nodes",
            message="autoscaled azure-batch pool 'p' has no max_nodes",
            hint="set max_nodes: 1",
        ),
        id="autoscaled Batch pool without max_nodes",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node: {gpus: 4}
                        autoscale: {max_nodes: 1, warm_nodes: 2}  # <-
                """
            },
            path="pools[0].autoscale.warm_nodes",
            message="warm_nodes 2 is above max_nodes 1",
            hint="set warm_nodes to at most 1",
        ),
        id="a warm floor above the maximum",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        quota:
                          a100: {nominal: 1}  # <-
                """
            },
            path="teams.team-a.quota.a100",
            message="unknown gpu type 'a100'",
            hint="add 'a100' under gpu_types or use one of: h100, t4",
        ),
        id="quota on unknown gpu type",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        cohort: reserch  # <-
                """
            },
            path="teams.team-a.cohort",
            message="unknown cohort 'reserch'",
            hint="did you mean 'research'? add 'reserch' under cohorts or use one of: research",
        ),
        id="team in unknown cohort",
    ),
    pytest.param(
        Case(
            {
                "cohorts": None,
                "teams": """
                    teams:
                      team-a: {cohort: research}  # <-
                """,
            },
            path="teams.team-a.cohort",
            message="unknown cohort 'research'",
            hint="add 'research' under cohorts",
        ),
        id="team in a cohort when none are defined",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        default_priority_class: urgent  # <-
                """
            },
            path="teams.team-a.default_priority_class",
            message="unknown priority class 'urgent'",
            hint="add 'urgent' under priority_classes or use one of: training, best-effort",
        ),
        id="unknown team default priority class",
    ),
    pytest.param(
        Case(
            {
                "priority_classes": """
                    priority_classes:
                      training: {value: 100, default: true}
                      best-effort: {value: 0, default: true}  # <-
                """
            },
            path="priority_classes.best-effort.default",
            message="more than one default priority class (training, best-effort)",
            hint="keep 'default: true' on one class only, e.g. 'training'",
        ),
        id="two default priority classes",
    ),
    pytest.param(
        Case(
            {"priority_classes": "priority_classes: {}  # <-"},
            path="priority_classes",
            message="no priority classes",
            hint="define at least one",
        ),
        id="empty priority classes",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        members:
                          alice: member
                          dave: admin  # <-
                """
            },
            path="teams.team-a.members.dave",
            message="'dave' is not a user",
            hint="add 'dave' under users or use one of: alice",
        ),
        id="member who is not a user",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-c:
                        quota:
                          h100:
                            nominal: 1
                            borrowing_limit: 2  # <-
                """
            },
            path="teams.team-c.quota.h100.borrowing_limit",
            message="borrowing_limit has no effect: team 'team-c' is in no cohort",
            hint="set 'cohort:' on teams.team-c or remove borrowing_limit",
        ),
        id="borrowing limit without cohort",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-c:
                        quota:
                          h100: {nominal: 1, lending_limit: 1}  # <-
                """
            },
            path="teams.team-c.quota.h100.lending_limit",
            message="lending_limit has no effect",
            hint="remove lending_limit",
        ),
        id="lending limit without cohort",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        cohort: research
                        quota:
                          h100:
                            nominal: 2
                            lending_limit: 3  # <-
                """
            },
            path="teams.team-a.quota.h100.lending_limit",
            message="lending_limit 3 is more than nominal 2",
            hint="set lending_limit to at most 2",
        ),
        id="lending limit above nominal",
    ),
    pytest.param(
        Case(
            {
                "gpu_types": "gpu_types: {h100: {}, cpu: {}}",
                "teams": """
                    teams:
                      team-a:
                        cohort: research
                        quota:
                          cpu: {nominal: 16}  # <-
                """,
            },
            path="teams.team-a.quota.cpu.nominal",
            message="nominal counts GPUs, and 'cpu' pools have none",
            hint="with cpus: and memory_gb: under teams.team-a.quota.cpu",
        ),
        id="cpu quota given in GPUs",
    ),
    pytest.param(
        Case(
            {
                "gpu_types": "gpu_types: {h100: {}, cpu: {}}",
                "teams": """
                    teams:
                      team-a:
                        cohort: research
                        quota:
                          cpu:
                            cpus: 16
                            borrowing_limit: 4  # <-
                """,
            },
            path="teams.team-a.quota.cpu.borrowing_limit",
            message="borrowing_limit counts GPUs, and 'cpu' pools have none",
            hint="remove it",
        ),
        id="cpu quota that borrows",
    ),
    pytest.param(
        Case(
            {
                "scheduler": """
                    scheduler:
                      gpu_type_order:
                        - t4
                        - a100  # <-
                """
            },
            path="scheduler.gpu_type_order[1]",
            message="unknown gpu type 'a100'",
            hint="add 'a100' under gpu_types or use one of: h100, t4",
        ),
        id="gpu type order names unknown type",
    ),
    pytest.param(
        Case(
            {
                "scheduler": """
                    scheduler:
                      gpu_type_order:
                        - t4
                        - t4  # <-
                """
            },
            path="scheduler.gpu_type_order[1]",
            message="gpu type 't4' is listed twice",
            hint="list each type once",
        ),
        id="gpu type order repeats a type",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      Team_A: {}  # <-
                """
            },
            path="teams.Team_A",
            message="invalid team name 'Team_A'",
            hint="lowercase letters, digits and '-'",
        ),
        id="team name that is not a DNS label",
    ),
    pytest.param(
        Case(
            {
                "accounting": """
                    accounting:
                      currency: usd  # <-
                """
            },
            path="accounting.currency",
            message="unknown currency 'usd'",
            hint="ISO 4217 code in capitals",
        ),
        id="currency that is not an ISO 4217 code",
    ),
    pytest.param(
        Case(
            {
                "accounting": """
                    accounting:
                      timezone: Mars/Olympus  # <-
                """
            },
            path="accounting.timezone",
            message="unknown timezone 'Mars/Olympus'",
            hint="IANA zone name",
        ),
        id="timezone that no zone database has",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: slurm
                        gpu_type: h100
                        node: {gpus: 4}
                        options:
                          partiton: h100  # <-
                """
            },
            path="pools[0].options.partiton",
            message="unknown slurm pool option 'partiton'",
            hint="did you mean 'partition'?",
        ),
        id="slurm option with a typo",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: slurm  # <-
                        gpu_type: h100
                        node: {gpus: 4}
                """
            },
            path="pools[0].backend",
            message="needs options.partition",
            hint="slurm backend's README",
        ),
        id="slurm pool without a partition",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: ray
                        gpu_type: h100
                        node: {gpus: 4}
                        options:  # <-
                          address: 127.0.0.1:8265
                """
            },
            path="pools[0].options",
            message="must be the dashboard's http(s):// URL",
            hint="ray backend's README",
        ),
        id="ray address without a scheme",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node: {gpus: 4}
                        options:
                          max_log_byte: 100  # <-
                """
            },
            path="pools[0].options.max_log_byte",
            message="unknown local pool option 'max_log_byte'",
            hint="did you mean 'max_log_bytes'?",
        ),
        id="local option with a typo",
    ),
    pytest.param(
        Case(
            {
                "accounting": """
                    accounting:
                      accrual_interval_s: 60
                      gap_after_s: 30  # <-
                """
            },
            path="accounting.gap_after_s",
            message="gap_after_s (30 s) is not longer than accrual_interval_s (60 s)",
            hint="leave it out",
        ),
        id="ledger gap shorter than an accrual interval",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_cross_reference_problem(case: Case, build: Build) -> None:
    built = build(**case.sections)
    problems = validate_config_text(built.text, "c.yaml")

    assert len(problems) == 1, [str(p) for p in problems]
    (problem,) = problems
    assert problem.file == "c.yaml"
    assert problem.path == case.path
    assert problem.line == built.line
    assert case.message in problem.message
    assert case.hint in problem.hint


def test_base_config_has_no_problems(build: Build) -> None:
    assert validate_config_text(build().text) == []


def test_no_default_priority_class_is_fine_and_lowest_value_wins(build: Build) -> None:
    built = build(
        priority_classes="""
            priority_classes:
              high: {value: 10}
              low: {value: 1}
        """
    )
    assert parse_config(built.text).default_priority_class() == "low"


def test_all_cross_reference_problems_are_reported_together(build: Build) -> None:
    built = build(
        pools="""
            pools:
              - {name: p, backend: local, gpu_type: a100, node: {gpus: 4}}
              - {name: p, backend: local, gpu_type: h100, node: {gpus: 4}, dedicated_to: x}
        """,
        teams="""
            teams:
              team-a:
                cohort: nowhere
                quota: {v100: {nominal: 1}}
                members: {zed: viewer}
        """,
    )
    paths = [p.path for p in validate_config_text(built.text)]
    assert paths == [
        "pools[0].gpu_type",
        "pools[1].name",
        "pools[1].dedicated_to",
        "teams.team-a.cohort",
        "teams.team-a.quota.v100",
        "teams.team-a.members.zed",
    ]
