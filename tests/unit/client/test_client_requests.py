"""What the sync SDK puts on the wire and how it reads the answers (docs/architecture.md §7)."""

from __future__ import annotations

import json

import httpx
import pytest

from gpupool.client.errors import NotFound
from gpupool.client.models import Job
from gpupool.client.sdk import Client
from gpupool.client.testing import (
    FakeApi,
    attempt_json,
    job_json,
    pool_json,
    team_json,
    whoami_json,
    why_json,
)

URL = "http://gpupool.test"  # as in conftest.py
TOKEN = "tok-s3cret-value"


def test_every_request_carries_the_bearer_token(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/whoami", json=whoami_json())

    client.whoami()

    assert api.last.headers["Authorization"] == f"Bearer {TOKEN}"
    assert api.last.headers["User-Agent"].startswith("gpupool-client/")
    assert str(api.last.url) == f"{URL}/v1/whoami"


def test_no_authorization_header_without_a_token(api: FakeApi) -> None:
    api.add("GET", "/healthz", json={"status": "ok"})

    with Client(URL, transport=api.transport) as anonymous:
        assert anonymous.health() == {"status": "ok"}

    assert "Authorization" not in api.last.headers


def test_submit_minimal_body_leaves_server_defaults_to_the_server(
    api: FakeApi, client: Client
) -> None:
    api.add("POST", "/v1/jobs", json=job_json(), status=201)

    job = client.submit(["python", "train.py"])

    assert api.last_json() == {
        "command": ["python", "train.py"],
        "resources": {"gpus": 1, "nodes": 1},
    }
    assert "Idempotency-Key" not in api.last.headers
    assert isinstance(job, Job)
    assert job.id == "j-0001"


def test_submit_full_body_and_idempotency_header(api: FakeApi, client: Client) -> None:
    api.add("POST", "/v1/jobs", json=job_json(), status=201)

    client.submit(
        ["torchrun", "train.py"],
        team="team-a",
        gpus=4,
        gpu_types=["h100", "a100"],
        nodes=2,
        cpus=16,
        memory_gb=128,
        priority_class="training",
        name="big",
        kind="training",
        env={"SEED": "1"},
        max_runtime_s=3600,
        checkpoint_interval_s=900,
        idempotency_key="retry-me",
        backend="slurm",
        inputs=["shared/data"],
        outputs=["out/"],
        image="ghcr.io/acme/train:1.4",
        container={"shm_size_gb": 2},
    )

    assert api.last.method == "POST"
    assert api.last.headers["Idempotency-Key"] == "retry-me"
    assert api.last_json() == {
        "name": "big",
        "team": "team-a",
        "command": ["torchrun", "train.py"],
        "resources": {
            "gpus": 4,
            "gpu_types": ["h100", "a100"],
            "nodes": 2,
            "cpus": 16,
            "memory_gb": 128,
        },
        "priority_class": "training",
        "kind": "training",
        "backend": "slurm",
        "env": {"SEED": "1"},
        "inputs": ["shared/data"],
        "outputs": ["out/"],
        "max_runtime_s": 3600,
        "checkpoint_interval_s": 900,
        "image": "ghcr.io/acme/train:1.4",
        "container": {"shm_size_gb": 2},
    }


def test_submit_same_idempotency_key_returns_the_same_job(api: FakeApi, client: Client) -> None:
    # The server answers 200 (not 201) for a replay; the SDK treats both as success.
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers["Idempotency-Key"])
        return httpx.Response(201 if len(calls) == 1 else 200, json=job_json(id="j-7"))

    api.add("POST", "/v1/jobs", handler)

    first = client.submit(["true"], idempotency_key="k")
    second = client.submit(["true"], idempotency_key="k")

    assert first.id == second.id == "j-7"
    assert calls == ["k", "k"]


def test_submit_rejects_a_string_command(client: Client) -> None:
    with pytest.raises(TypeError, match="list of arguments"):
        client.submit("python train.py")  # type: ignore[arg-type]


def test_jobs_sends_only_given_filters(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/jobs", json={"items": [job_json()], "next_cursor": "c2"})

    page = client.jobs(team="team-a", status="running", limit=10)

    assert dict(api.last.url.params) == {"team": "team-a", "status": "running", "limit": "10"}
    assert [job.id for job in page.items] == ["j-0001"]
    assert page.next_cursor == "c2"


def test_job_detail_parses_attempts(api: FakeApi, client: Client) -> None:
    attempts = [attempt_json(number=1, status="preempted"), attempt_json(number=2)]
    api.add("GET", "/v1/jobs/j-1", json=job_json(id="j-1", attempt=2, attempts=attempts))

    job = client.job("j-1")

    assert [(a.number, a.status) for a in job.attempts] == [(1, "preempted"), (2, "running")]
    assert job.attempts[1].devices == [[0]]


def test_job_ids_are_quoted_into_the_path(api: FakeApi, client: Client) -> None:
    # A crafted id must not be able to address another route.
    with pytest.raises(NotFound):
        client.job("../teams")

    assert api.last.url.raw_path == b"/v1/jobs/..%2Fteams"


def test_cancel_posts_to_the_cancel_route(api: FakeApi, client: Client) -> None:
    api.add("POST", "/v1/jobs/j-1/cancel", json=job_json(id="j-1", status="cancelled"))

    job = client.cancel("j-1")

    assert api.last.method == "POST"
    assert job.status == "cancelled"
    assert job.finished


def test_logs_reads_offset_headers(api: FakeApi, client: Client) -> None:
    api.add(
        "GET",
        "/v1/jobs/j-1/logs",
        content=b"epoch 2\n",
        headers={"X-Next-Offset": "20", "X-Log-Complete": "true"},
    )

    data, next_offset, complete = client.logs("j-1", offset=12)

    assert dict(api.last.url.params) == {"offset": "12"}
    assert (data, next_offset, complete) == (b"epoch 2\n", 20, True)


def test_logs_without_headers_advances_by_the_bytes_read(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/jobs/j-1/logs", content=b"abc")

    assert client.logs("j-1", offset=5) == (b"abc", 8, False)


def test_why_teams_team_pools_whoami(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/jobs/j-1/why", json=why_json(job_id="j-1"))
    api.add("GET", "/v1/teams", json={"items": [team_json(), team_json(name="team-b")]})
    api.add("GET", "/v1/teams/team-a", json=team_json(members={"alice": "admin"}))
    api.add("GET", "/v1/pools", json={"items": [pool_json()]})
    api.add("GET", "/v1/whoami", json=whoami_json(platform_admin=True))

    why = client.why("j-1")
    teams = client.teams()
    team = client.team("team-a")
    pools = client.pools()
    me = client.whoami()

    assert [(r.gpu_type, r.code) for r in why.reasons] == [
        ("h100", "quota_exhausted"),
        ("t4", "no_capacity"),
    ]
    assert [t.name for t in teams] == ["team-a", "team-b"]
    assert team.members == {"alice": "admin"}
    assert team.quota["h100"].used == 3
    assert pools[0].gpus_total == 8
    assert me.platform_admin


def test_unknown_fields_in_answers_are_ignored(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/jobs/j-1", json=job_json(id="j-1", added_in_v2={"x": 1}))

    job = client.job("j-1")

    assert job.id == "j-1"
    assert "added_in_v2" not in json.dumps(job.model_dump(mode="json"))
