"""Shell completion: job ids, teams and gpu types come from the server; failures are silent."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli import completion
from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, job_json, pool_json, team_json


def test_job_ids_complete_from_the_newest_jobs(api: FakeApi) -> None:
    items = [
        job_json(id="j-1a"),
        job_json(id="j-2b"),
        job_json(id="a-9_0", array_id="a-9", array_index=0),
    ]
    api.add("GET", "/v1/jobs", json={"items": items, "next_cursor": None})
    assert completion.job_ids("j-") == ["j-1a", "j-2b"]
    assert completion.job_ids("a-") == ["a-9", "a-9_0"]
    assert api.last.url.params["limit"] == str(completion.LIMIT)


def test_teams_and_gpu_types_complete(api: FakeApi) -> None:
    api.add("GET", "/v1/teams", json={"items": [team_json(), team_json(name="team-b")]})
    api.add(
        "GET",
        "/v1/pools",
        json={"items": [pool_json(), pool_json(name="t", gpu_type="t4"), pool_json(name="h2")]},
    )
    assert completion.teams("team-") == ["team-a", "team-b"]
    assert completion.gpu_types("") == ["h100", "t4"]


def test_a_server_that_fails_gives_no_candidates_and_no_noise(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.add("GET", "/v1/teams", lambda request: httpx.Response(500, json={}))
    assert completion.teams("") == []
    assert capsys.readouterr() == ("", "")


def test_the_shell_gets_the_candidates(api: FakeApi) -> None:
    api.add("GET", "/v1/jobs", json={"items": [job_json(id="j-77")], "next_cursor": None})
    env = {"_GPUPOOL_COMPLETE": "complete_bash", "COMP_WORDS": "gpupool why j-", "COMP_CWORD": "2"}
    result = CliRunner().invoke(app, [], env=env, prog_name="gpupool")
    assert "j-77" in result.stdout
