"""Loading: YAML syntax, document shape, duplicate keys and model errors, each with its line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupool.core.errors import ConfigInvalid
from gpupool.spec.load import load_config, parse_config, validate_config_text
from gpupool.spec.problems import Problem, format_problems

Build = Callable[..., Any]  # the `build` fixture of conftest.py


@dataclass(frozen=True)
class Case:
    sections: dict[str, str | None]
    path: str
    message: str
    hint: str
    not_in_hint: str = ""


SCHEMA_CASES = [
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        quota:
                          h100: {nomnial: 2}  # <-
                """
            },
            path="teams.team-a.quota.h100.nomnial",
            message="unknown key 'nomnial'",
            hint="did you mean 'nominal'? keys allowed in teams.team-a.quota.h100: "
            "nominal, borrowing_limit, lending_limit",
        ),
        id="misspelt key suggests the close one",
    ),
    pytest.param(
        Case(
            {"gpu_typse": "gpu_typse: {}  # <-"},
            path="gpu_typse",
            message="unknown key 'gpu_typse'",
            hint="did you mean 'gpu_types'? keys allowed in the top level: gpu_types, pools,",
        ),
        id="unknown top-level key",
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
                        colour: red  # <-
                """
            },
            path="pools[0].colour",
            message="unknown key 'colour'",
            hint="keys allowed in pools[0]: name, backend, gpu_type, nodes, node, autoscale",
            not_in_hint="did you mean",
        ),
        id="unknown key with nothing close lists the allowed keys",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p  # <-
                        backend: local
                        gpu_type: h100
                """
            },
            path="pools[0].node",
            message="missing required key 'node'",
            hint="add 'node: {gpus: 4, cpus: 16, memory_gb: 64}' under pools[0]",
        ),
        id="missing required key points at its parent",
    ),
    pytest.param(
        Case(
            {"gpu_types": None, "pools": "pools: []  # <-"},
            path="gpu_types",
            message="missing required key 'gpu_types'",
            hint="at the top level",
        ),
        id="missing top-level section",
    ),
    pytest.param(
        Case(
            {"users": 'users:\n  alice: {uid: "10001", gid: 20001}  # <-'},
            path="users.alice.uid",
            message="value should be a whole number, not the text '10001'",
            hint="without quotes",
        ),
        id="quoted number",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        quota:
                          h100:
                            nominal: yes  # <-
                """
            },
            path="teams.team-a.quota.h100.nominal",
            message="not the boolean true",
            hint="write a whole number",
        ),
        id="boolean where a count belongs",
    ),
    pytest.param(
        Case(
            {
                "teams": """
                    teams:
                      team-a:
                        quota:
                          h100: {nominal: -1}  # <-
                """
            },
            path="teams.team-a.quota.h100.nominal",
            message="-1 is out of range",
            hint="use a value >= 0",
        ),
        id="below minimum",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: local
                        gpu_type: h100
                        node: {gpus: 65}  # <-
                """
            },
            path="pools[0].node.gpus",
            message="65 is out of range",
            hint="use a value <= 64",
        ),
        id="above maximum",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: p
                        backend: lcoal  # <-
                        gpu_type: h100
                        node: {gpus: 4}
                """
            },
            path="pools[0].backend",
            message="'lcoal' is not allowed here",
            hint="did you mean 'local'? use one of: local, slurm, ray, kubernetes, azure-batch",
        ),
        id="unknown backend",
    ),
    pytest.param(
        Case(
            {"teams": "teams:\n  team-a:\n    members: {alice: owner}  # <-"},
            path="teams.team-a.members.alice",
            message="'owner' is not allowed here",
            hint="use one of: admin, member, viewer",
        ),
        id="unknown role",
    ),
    pytest.param(
        Case(
            {
                "pools": """
                    pools:
                      - name: Shared_H100  # <-
                        backend: local
                        gpu_type: h100
                        node: {gpus: 4}
                """
            },
            path="pools[0].name",
            message="'Shared_H100' is not a valid name",
            hint="lowercase letters, digits and '-'",
        ),
        id="invalid pool name",
    ),
    pytest.param(
        Case(
            {"teams": "teams: [team-a]  # <-"},
            path="teams",
            message="value should be a mapping, not a list",
            hint="key: value pairs",
        ),
        id="list where a mapping belongs",
    ),
    pytest.param(
        Case(
            {"teams": "teams:\n  team-a:\n    groups: TeamA  # <-"},
            path="teams.team-a.groups",
            message="value should be a list, not the text 'TeamA'",
            hint="write a list, e.g. [a, b]",
        ),
        id="text where a list belongs",
    ),
    pytest.param(
        Case(
            {"teams": "teams:\n  team-a:\n    quota:\n      100: {nominal: 1}  # <-"},
            path="teams.team-a.quota.100",
            message="key should be text, not the number 100",
            hint="quote the key, e.g. '100'",
        ),
        id="numeric mapping key",
    ),
    pytest.param(
        Case(
            {
                "gpu_types": """
                    gpu_types:
                      h100: {price_per_gpu_hour: 4.0}
                      t4: {price_per_gpu_hour: 0.35}
                      h100: {price_per_gpu_hour: 5.0}  # <-
                """
            },
            path="gpu_types.h100",
            message="duplicate key 'h100' (first on line 2)",
            hint="YAML silently uses the last one",
        ),
        id="duplicate key",
    ),
]


@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_schema_problem(case: Case, build: Build) -> None:
    built = build(**case.sections)
    problems = validate_config_text(built.text, "c.yaml")

    assert len(problems) == 1, [str(p) for p in problems]
    (problem,) = problems
    assert (problem.file, problem.path, problem.line) == ("c.yaml", case.path, built.line)
    assert case.message in problem.message
    assert case.hint in problem.hint
    if case.not_in_hint:
        assert case.not_in_hint not in problem.hint


@pytest.mark.parametrize(
    ("text", "line", "message", "hint"),
    [
        pytest.param(
            "gpu_types:\n  h100: {price: 1\nteams: {}\n",
            3,
            "invalid YAML",
            "close every quote and bracket",
            id="unclosed flow mapping",
        ),
        pytest.param(
            "gpu_types:\n  h100: {}\n\tt4: {}\n",
            3,
            "found character '\\t'",
            "YAML does not allow tabs",
            id="tab indentation",
        ),
        pytest.param(
            "gpu_types:\n  h100: {}\n t4: {}\n",
            3,
            "invalid YAML",
            "indent with spaces",
            id="bad indentation",
        ),
        pytest.param(
            "gpu_types: {h100: {}}\n---\nteams: {}\n",
            2,
            "expected a single document",
            "remove the '---' separator",
            id="two documents",
        ),
        pytest.param(
            "- gpu_types\n- teams\n",
            1,
            "the top level must be a mapping of sections, not a list",
            "gpu_types:",
            id="top level is a list",
        ),
        pytest.param(
            "gpu_types\n",
            1,
            "not a single value",
            "gpu_types:",
            id="top level is a scalar",
        ),
        pytest.param(
            "gpu_types: {h100: {}}\x1f\n",
            None,
            "special characters are not allowed",
            "",
            id="a control character",
        ),
        pytest.param(
            "# only a comment\n",
            None,
            "the file is empty",
            "gpu_types:",
            id="empty file",
        ),
    ],
)
def test_document_problem(text: str, line: int | None, message: str, hint: str) -> None:
    (problem,) = validate_config_text(text, "c.yaml")
    assert (problem.line, problem.path) == (line, "")
    assert message in problem.message
    assert hint in problem.hint


def test_problems_of_every_stage_are_reported_together_in_line_order(build: Build) -> None:
    built = build(
        gpu_types="""
            gpu_types:
              h100: {}
              h100: {price_per_gpu_hour: 4.0}
        """,
        users="""
            users:
              alice: {uid: -1, gid: 20001, shell: bash}
        """,
    )
    problems = validate_config_text(built.text, "c.yaml")
    assert [(p.line, p.path) for p in problems] == [
        (3, "gpu_types.h100"),
        (21, "users.alice.uid"),
        (21, "users.alice.shell"),
    ]


def test_merge_keys_are_not_duplicates(build: Build) -> None:
    built = build(
        gpu_types="""
            gpu_types:
              h100: &gpu {price_per_gpu_hour: 4.0, spot_price_per_gpu_hour: 1.0}
              t4:
                <<: *gpu
                price_per_gpu_hour: 0.35
        """
    )
    config = parse_config(built.text)
    assert config.gpu_types["t4"].price_per_gpu_hour == 0.35
    assert config.gpu_types["t4"].spot_price_per_gpu_hour == 1.0


def test_parse_config_raises_with_every_problem_as_details(build: Build) -> None:
    built = build(teams="teams:\n  team-a: {cohort: nowhere, members: {zed: member}}")
    with pytest.raises(ConfigInvalid) as info:
        parse_config(built.text, source="team.yaml")

    assert info.value.message == "2 problems in team.yaml"
    assert info.value.code == "config_invalid"
    assert [p.path for p in info.value.details] == [
        "teams.team-a.cohort",
        "teams.team-a.members.zed",
    ]
    assert all(isinstance(p, Problem) for p in info.value.details)


def test_load_config_names_the_file(tmp_path: Path, build: Build) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(build(users="users: {}").text)
    with pytest.raises(ConfigInvalid) as info:
        load_config(path)
    assert info.value.message == f"1 problem in {path}"
    assert info.value.details[0].file == str(path)


def test_load_config_of_a_missing_file_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(ConfigInvalid) as info:
        load_config(path)
    (problem,) = info.value.details
    assert (problem.file, problem.line) == (str(path), None)
    assert "cannot read" in problem.message


def test_format_problems() -> None:
    problems = [
        Problem(
            "demo.yaml",
            12,
            "teams.team-a.quota.a100",
            "unknown gpu type 'a100'",
            "add 'a100' under gpu_types or use one of: h100, t4",
        ),
        Problem("demo.yaml", None, "", "the file is empty", "add gpu_types:"),
    ]
    assert format_problems(problems) == (
        "demo.yaml:12: teams.team-a.quota.a100: unknown gpu type 'a100'"
        " — hint: add 'a100' under gpu_types or use one of: h100, t4\n"
        "demo.yaml: the file is empty — hint: add gpu_types:"
    )
