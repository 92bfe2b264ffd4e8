"""S3 grants, on the signed documents: the one key each GET URL signs, its expiry, and the
POST policy that confines uploads to the attempt's prefix. Presigning is offline."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlsplit

import pytest

from gpupool.data.grants.base import GrantError, GrantScope, scope_for
from gpupool.data.grants.s3 import S3Minter
from gpupool.data.roots import S3Root
from support import s3server

NOW = datetime.now(UTC).replace(microsecond=0)
ROOT = S3Root("bkt", "teams/team-a/")


def scope(runtime_s: int, now: datetime = NOW) -> GrantScope:
    return scope_for(
        team="team-a",
        user="alice",
        job_id="j-1",
        attempt=3,
        inputs=["shared/in.csv"],
        outputs=["home/alice/out"],
        now=now,
        max_runtime_s=runtime_s,
        default_runtime_s=86400,
        margin_s=600,
    )


def test_get_urls_sign_one_key_until_the_grant_expires() -> None:
    grant = S3Minter(s3server.client(None), lambda: NOW).mint(
        ROOT,
        scope(3000),
        ["home/alice/out"],
    )
    url = urlsplit(grant.inputs["shared/in.csv"])
    assert url.path == "/bkt/teams/team-a/shared/in.csv"
    query = dict(parse_qsl(url.query))
    assert query["X-Amz-Expires"] == "3600"
    assert query["X-Amz-SignedHeaders"] == "host"


def test_the_post_policy_confines_uploads_to_the_attempt_prefix() -> None:
    # boto3 dates a POST policy from the real clock, so this test's "now" must be real too.
    now = datetime.now(UTC).replace(microsecond=0)
    grant = S3Minter(s3server.client(None), lambda: now).mint(
        ROOT,
        scope(3000, now),
        ["home/alice/out"],
    )
    target = grant.outputs["home/alice/out"]
    prefix = "teams/team-a/home/alice/out/attempt-3/"
    assert target.fields["key"] == prefix + "${filename}"
    policy = json.loads(base64.b64decode(target.fields["policy"]))
    assert ["starts-with", "$key", prefix] in policy["conditions"]
    assert {"bucket": "bkt"} in policy["conditions"]
    expires = datetime.fromisoformat(policy["expiration"].replace("Z", "+00:00"))
    assert abs(expires - (now + timedelta(seconds=3600))) < timedelta(seconds=2)
    assert "X-Amz-Signature" not in repr(grant) and "policy" not in repr(grant)


def test_grants_beyond_seven_days_are_refused() -> None:
    minter = S3Minter(s3server.client(None), lambda: NOW)
    with pytest.raises(GrantError, match="at most 7 days"):
        minter.mint(ROOT, scope(7 * 24 * 3600), ["home/alice/out"])
