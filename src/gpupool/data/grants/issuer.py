"""Mint the grant of one attempt with the minter that fits its team's storage root.

The controller calls :meth:`GrantIssuer.issue` when it dispatches an attempt on a pool with
``data_access: grant``, naming the job's user: a local grant is made out to that user, whose
permissions the artifact endpoints apply on disk. Minters are built on first use and cached
(one Azure client per account endpoint, one S3 client per endpoint and region), so that
Azure's delegation key is reused across attempts. Clients for Azure and S3 are made by
injectable factories: tests point them at Azurite and a local S3 server; the defaults use
the platform's credential chain (``DefaultAzureCredential``, boto3's default chain).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gpupool.data.grants.azure import AzureMinter, account_url
from gpupool.data.grants.base import Grant, GrantError, scope_for
from gpupool.data.grants.local import LocalMinter, Signer
from gpupool.data.grants.s3 import S3Minter, make_client
from gpupool.data.roots import AzureRoot, LocalRoot, RootProblem, S3Root, team_root
from gpupool.spec.models import ClusterConfig

AzureFactory = Callable[[str], Any]  # account URL -> BlobServiceClient
S3Factory = Callable[[str | None, str | None], Any]  # endpoint, region -> S3 client


def default_azure_service(url: str) -> Any:
    try:
        from azure.identity import DefaultAzureCredential  # type: ignore[import-untyped]
        from azure.storage.blob import BlobServiceClient
    except ImportError as exc:
        raise GrantError(
            "Azure storage needs azure-storage-blob and azure-identity: "
            "pip install 'gpupool[azure]' azure-identity"
        ) from exc
    return BlobServiceClient(url, credential=DefaultAzureCredential())


class GrantIssuer:
    def __init__(
        self,
        home: Path,
        signer: Signer,
        base_url: str,
        clock: Callable[[], datetime],
        azure_service: AzureFactory = default_azure_service,
        s3_client: S3Factory = make_client,
    ) -> None:
        self._home = home
        self._local = LocalMinter(signer, base_url)
        self._clock = clock
        self._azure_service = azure_service
        self._s3_client = s3_client
        self._azure: dict[str, AzureMinter] = {}
        self._s3: dict[tuple[str | None, str | None], S3Minter] = {}
        self._lock = threading.Lock()

    def issue(
        self,
        config: ClusterConfig,
        *,
        team: str,
        user: str,
        job_id: str,
        attempt: int,
        inputs: Sequence[str],
        outputs: Sequence[str],
        max_runtime_s: int | None,
    ) -> Grant:
        storage = config.storage
        scope = scope_for(
            team=team,
            user=user,
            job_id=job_id,
            attempt=attempt,
            inputs=inputs,
            outputs=outputs,
            now=self._clock(),
            max_runtime_s=max_runtime_s,
            default_runtime_s=storage.grant_default_runtime_s,
            margin_s=storage.grant_margin_s,
        )
        try:
            root = team_root(storage, team, self._home)
        except RootProblem as exc:
            raise GrantError(f"storage root of team {team}: {exc}") from exc
        if isinstance(root, LocalRoot):
            return self._local.mint(scope, outputs)
        if isinstance(root, AzureRoot):
            return self._azure_minter(account_url(root.account, storage.endpoint)).mint(
                root, scope, outputs
            )
        assert isinstance(root, S3Root)
        return self._s3_minter(storage.endpoint, storage.region).mint(root, scope, outputs)

    def _azure_minter(self, url: str) -> AzureMinter:
        with self._lock:
            if url not in self._azure:
                self._azure[url] = AzureMinter(self._azure_service(url), self._clock)
            return self._azure[url]

    def _s3_minter(self, endpoint: str | None, region: str | None) -> S3Minter:
        with self._lock:
            key = (endpoint, region)
            if key not in self._s3:
                self._s3[key] = S3Minter(self._s3_client(endpoint, region), self._clock)
            return self._s3[key]
