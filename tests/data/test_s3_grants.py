"""S3 grants against a real S3-compatible server (moto): the presigned GET reads the declared
input and the presigned POST uploads below the attempt's output prefix. (The server does not
verify signatures; what each URL is limited to is tested in tests/unit/data.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.data.grants.base import Grant
from gpupool.data.grants.issuer import GrantIssuer
from gpupool.data.grants.local import Signer
from gpupool.spec.models import ClusterConfig, Storage, Team
from support import s3server

BUCKET = "gpupool-data"
INPUT = "shared/in.txt"
OUTPUT = "home/alice/out"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    try:
        endpoint = s3server.start()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    client = s3server.client(endpoint)
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    for team in ("team-a", "team-b"):
        client.put_object(Bucket=BUCKET, Key=f"teams/{team}/{INPUT}", Body=f"data of {team}")
    yield client


def mint(tmp_path: Path, endpoint: str) -> Grant:
    config = ClusterConfig(
        gpu_types={},
        teams={"team-a": Team(), "team-b": Team()},
        storage=Storage(root=f"s3://{BUCKET}/teams", endpoint=endpoint),
    )
    issuer = GrantIssuer(
        tmp_path,
        Signer(b"k" * 32),
        "http://unused",
        lambda: datetime.now(UTC),
        s3_client=s3server.client,
    )
    return issuer.issue(
        config,
        team="team-a",
        user="alice",
        job_id="j-1",
        attempt=1,
        inputs=[INPUT],
        outputs=[OUTPUT],
        max_runtime_s=600,
    )


def test_a_job_reads_its_input_and_uploads_below_its_prefix(s3: Any, tmp_path: Path) -> None:
    grant = mint(tmp_path, s3.meta.endpoint_url)
    assert httpx.get(grant.inputs[INPUT]).content == b"data of team-a"
    target = grant.outputs[OUTPUT]
    assert target.method == "POST"
    key = target.fields["key"].replace("${filename}", "model/weights.bin")
    response = httpx.post(
        target.url, data={**target.fields, "key": key}, files={"file": ("weights.bin", b"w")}
    )
    assert response.status_code in (200, 201, 204), response.text
    stored = s3.get_object(Bucket=BUCKET, Key=f"teams/team-a/{OUTPUT}/attempt-1/model/weights.bin")
    assert stored["Body"].read() == b"w"
