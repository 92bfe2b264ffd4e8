"""Azurite for the Azure grant tests: started by scripts/azurite/up.sh, reached over HTTPS
with its self-signed CA, authenticated with OAuth tokens that Azurite's ``--oauth basic``
accepts (well-formed, unsigned: Azurite checks audience, issuer and times, not signatures).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "devstoreaccount1"
TENANT = "ab1f708d-50f6-404c-a006-d71b2ac7a606"
HOW = (
    "Azurite is needed: run scripts/azurite/up.sh (it installs azurite with npm and needs "
    "Node.js, openssl and curl); its log is in /tmp/gpupool-azurite/azurite.log"
)


@dataclass(frozen=True)
class Azurite:
    url: str  # account URL: https://127.0.0.1:10000/devstoreaccount1
    ca: str  # the CA certificate to verify it with


def start() -> Azurite | str:
    """Azurite, or why it could not start."""
    directory = Path(os.environ.get("GPUPOOL_AZURITE_DIR", "/tmp/gpupool-azurite"))
    port = os.environ.get("GPUPOOL_AZURITE_PORT", "10000")
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "azurite" / "up.sh")],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"scripts/azurite/up.sh took longer than 300 s. {HOW}"
    if done.returncode != 0:
        return f"scripts/azurite/up.sh failed: {done.stderr.strip()[-500:]}. {HOW}"
    return Azurite(f"https://127.0.0.1:{port}/{ACCOUNT}", str(directory / "cert.pem"))


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


class OAuthToken:
    """A ``TokenCredential`` returning tokens that Azurite's basic OAuth accepts."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        now = int(time.time())
        claims = {
            "aud": "https://storage.azure.com",
            "iss": f"https://sts.windows.net/{TENANT}/",
            "iat": now - 60,
            "nbf": now - 60,
            "exp": now + 3600,
            "oid": str(uuid.uuid4()),
            "tid": TENANT,
        }
        token = ".".join([_b64({"alg": "RS256", "typ": "JWT"}), _b64(claims), "c2ln"])
        return AccessToken(token, now + 3600)


def service(azurite: Azurite, url: str | None = None) -> Any:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient(
        url or azurite.url, credential=OAuthToken(), connection_verify=azurite.ca
    )
