"""Azure grants: user-delegation SAS scoped to the team's container.

The control plane holds an Entra ID (OAuth) identity with a data role on the storage account;
pools hold none. Per attempt it signs, with a user delegation key:

* per declared input, a blob SAS with read permission on exactly that blob;
* per declared output, a container SAS with create permission only (``c``): the job can
  upload new blobs, under ``<output>/attempt-<n>/`` by convention, and can neither read,
  list, overwrite nor delete anything. A SAS cannot be limited to a blob prefix without a
  hierarchical namespace, so the write grant's hard boundary is the team's container.

Each team has its own container, so a grant never reaches another team's data. Delegation
keys are cached and reused while they outlive the grant being minted (Azure allows 7 days).
``azure-storage-blob`` is imported lazily: install the ``azure`` extra to use this.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from gpupool.data.grants.base import Grant, GrantError, GrantScope, OutputTarget
from gpupool.data.roots import AzureRoot

if TYPE_CHECKING:
    from azure.storage.blob import BlobServiceClient

MAX_KEY_LIFETIME = timedelta(days=7)
MIN_KEY_LIFETIME = timedelta(hours=6)
CLOCK_SKEW = timedelta(minutes=5)  # SAS start a little in the past: clocks differ
WRITE_PERMISSION = "c"  # create only: no read, list, overwrite or delete
BLOB_TYPE_HEADER = {"x-ms-blob-type": "BlockBlob"}


def account_url(account: str, endpoint: str | None) -> str:
    """The blob endpoint: ``endpoint`` when configured (Azurite: ``https://host:10000/<acct>``)."""
    return (endpoint or f"https://{account}.blob.core.windows.net").rstrip("/")


class AzureMinter:
    kind: Literal["azure"] = "azure"

    def __init__(
        self,
        service: BlobServiceClient,
        clock: Callable[[], datetime],
    ) -> None:
        self._service = service
        self._clock = clock
        self._key: Any = None
        self._key_expiry: datetime | None = None
        self._lock = threading.Lock()

    def _delegation_key(self, until: datetime) -> Any:
        now = self._clock()
        with self._lock:
            if self._key is not None and self._key_expiry is not None and self._key_expiry > until:
                return self._key
            expiry = min(max(until, now + MIN_KEY_LIFETIME), now + MAX_KEY_LIFETIME)
            if until > expiry:
                raise GrantError(
                    "an Azure grant can last at most 7 days; lower the job's max_runtime_s "
                    "or storage.grant_default_runtime_s"
                )
            try:
                self._key = self._service.get_user_delegation_key(now - CLOCK_SKEW, expiry)
            except Exception as exc:  # azure-core errors, auth errors, network errors
                raise GrantError(
                    f"cannot get a user delegation key from {self._service.url}: "
                    f"{type(exc).__name__}; check the control plane's identity has the "
                    "'Storage Blob Delegator' role and the endpoint is reachable"
                ) from exc
            self._key_expiry = expiry
            return self._key

    def mint(self, root: AzureRoot, scope: GrantScope, outputs: Sequence[str]) -> Grant:
        from azure.storage.blob import generate_blob_sas, generate_container_sas

        key = self._delegation_key(scope.expires_at)
        start = self._clock() - CLOCK_SKEW
        base = f"{self._service.url.rstrip('/')}/{root.container}"
        inputs = {
            path: f"{base}/{quote(path)}?"
            + generate_blob_sas(
                root.account,
                root.container,
                path,
                user_delegation_key=key,
                permission="r",
                expiry=scope.expires_at,
                start=start,
            )
            for path in scope.reads
        }
        targets: dict[str, OutputTarget] = {}
        if scope.writes:
            sas = generate_container_sas(
                root.account,
                root.container,
                user_delegation_key=key,
                permission=WRITE_PERMISSION,
                expiry=scope.expires_at,
                start=start,
            )
            targets = {
                output: OutputTarget(f"{base}/{quote(prefix)}?{sas}", headers=BLOB_TYPE_HEADER)
                for output, prefix in zip(outputs, scope.writes, strict=True)
            }
        return Grant(kind="azure", scope=scope, inputs=inputs, outputs=targets)
