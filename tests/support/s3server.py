"""The S3-compatible server of the S3 grant tests (moto, started by scripts/s3/up.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOW = (
    "an S3-compatible server is needed: run scripts/s3/up.sh (it installs moto[server] into "
    ".venv); its log is in /tmp/gpupool-s3/moto.log"
)


def start() -> str:
    """The server's endpoint URL; raises RuntimeError saying why it could not start."""
    port = os.environ.get("GPUPOOL_S3_PORT", "5900")
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "s3" / "up.sh")],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"scripts/s3/up.sh took longer than 300 s; {HOW}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"scripts/s3/up.sh failed: {done.stderr.strip()[-500:]}; {HOW}")
    return f"http://127.0.0.1:{port}"


def client(endpoint: str | None, region: str | None = None) -> Any:
    """An S3 client with fixed test credentials (moto accepts any)."""
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region or "us-east-1",
        aws_access_key_id="AKIDGPUPOOLTEST",
        aws_secret_access_key="gpupool-test-secret",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
