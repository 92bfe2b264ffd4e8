"""S3 grants: presigned URLs (SigV4) under the team's prefix.

Per attempt the control plane, with its own AWS credentials (pools hold none), presigns:

* per declared input, a ``GET`` of exactly that object (``<team prefix><input>``);
* per declared output, a ``POST`` policy whose key must start with
  ``<team prefix><output>/attempt-<n>/``: the job can upload any number of new objects below
  that prefix and nothing else. (A presigned ``PUT`` would name one key; the POST policy's
  ``starts-with`` condition is what scopes a write to a prefix.)

SigV4 presigned requests last at most 7 days. ``boto3`` is imported lazily: install the
``s3`` extra to use this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from gpupool.data.grants.base import Grant, GrantError, GrantScope, OutputTarget
from gpupool.data.roots import S3Root

MAX_EXPIRY_S = 7 * 24 * 3600
FILENAME = "${filename}"


def make_client(endpoint: str | None, region: str | None) -> Any:
    """A SigV4 S3 client with the default credential chain (env, profile, instance role)."""
    try:
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]
    except ImportError as exc:
        raise GrantError("S3 storage needs boto3: pip install 'gpupool[s3]'") from exc
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region or "us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


class S3Minter:
    kind: Literal["s3"] = "s3"

    def __init__(self, client: Any, clock: Callable[[], datetime]) -> None:
        self._client = client
        self._clock = clock

    def mint(self, root: S3Root, scope: GrantScope, outputs: Sequence[str]) -> Grant:
        seconds = int((scope.expires_at - self._clock()).total_seconds())
        if seconds > MAX_EXPIRY_S:
            raise GrantError(
                "an S3 presigned URL lasts at most 7 days; lower the job's max_runtime_s "
                "or storage.grant_default_runtime_s"
            )
        seconds = max(seconds, 1)
        inputs = {
            path: self._client.generate_presigned_url(
                "get_object",
                Params={"Bucket": root.bucket, "Key": root.key(path)},
                ExpiresIn=seconds,
            )
            for path in scope.reads
        }
        targets = {}
        for output, prefix in zip(outputs, scope.writes, strict=True):
            under = root.key(prefix) + "/"
            post = self._client.generate_presigned_post(
                root.bucket,
                under + FILENAME,
                Conditions=[["starts-with", "$key", under]],
                ExpiresIn=seconds,
            )
            targets[output] = OutputTarget(post["url"], method="POST", fields=post["fields"])
        return Grant(kind="s3", scope=scope, inputs=inputs, outputs=targets)
