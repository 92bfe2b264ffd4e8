"""The ``options:`` of an Azure Batch pool, validated once when the adapter is built and by
``gpupool config validate`` (no SDK import, no I/O).

Unknown keys are an error. No secret is ever an option: shared-key authentication names the
environment variable that holds the account key (``account_key_env``), read only when the
client is built, so a key cannot reach a configuration file, a log line or a ``repr``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from gpupool.backends.errors import BackendMisconfigured

# Batch ids: letters, digits, hyphens and underscores, at most 64 characters.
BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
IMAGE_KEYS = ("publisher", "offer", "sku", "version")
DEFAULT_IMAGE = {
    "publisher": "microsoft-dsvm",
    "offer": "ubuntu-hpc",
    "sku": "2204",
    "version": "latest",
}
DEFAULT_NODE_AGENT = "batch.node.ubuntu 22.04"


@dataclass(frozen=True)
class BatchOptions:
    account_url: str = ""  # https://<account>.<region>.batch.azure.com
    batch_pool_id: str | None = None  # the Batch pool; default: the gpupool pool's name
    job_id: str | None = None  # the per-pool Batch job; default: gpupool-<pool>
    task_id_prefix: str = ""  # namespaces task ids when installations share one job
    auth: Literal["entra", "shared-key"] = "entra"
    account_name: str | None = None  # shared-key only
    account_key_env: str | None = None  # shared-key only: the variable holding the key
    request_timeout_s: float = 30.0
    # The Batch pool's definition (gpupool export azure-batch; create_pool).
    vm_size: str | None = None  # e.g. Standard_NC40ads_H100_v5
    image: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGE))
    node_agent_sku_id: str = DEFAULT_NODE_AGENT
    create_pool: bool = False  # create the Batch pool (fixed size) when it does not exist
    task_slots_per_node: int = 1

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> BatchOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BackendMisconfigured(
                f"unknown azure-batch pool options: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = dict(raw)
        try:
            for name in (
                "account_url",
                "batch_pool_id",
                "job_id",
                "task_id_prefix",
                "account_name",
                "account_key_env",
                "vm_size",
                "node_agent_sku_id",
            ):
                if values.get(name) is not None and not isinstance(values[name], str):
                    raise TypeError(f"{name} must be a string")
            if "request_timeout_s" in values:
                values["request_timeout_s"] = float(values["request_timeout_s"])
                if values["request_timeout_s"] <= 0:
                    raise ValueError("request_timeout_s must be positive")
            if "task_slots_per_node" in values:
                values["task_slots_per_node"] = int(values["task_slots_per_node"])
                if values["task_slots_per_node"] < 1:
                    raise ValueError("task_slots_per_node must be at least 1")
            if "create_pool" in values and not isinstance(values["create_pool"], bool):
                raise TypeError("create_pool must be true or false")
            if "image" in values:
                values["image"] = _image(values["image"])
        except (TypeError, ValueError) as exc:
            raise BackendMisconfigured(f"invalid azure-batch pool options: {exc}") from exc
        options = cls(**values)
        options._check()
        return options

    def _check(self) -> None:
        if not self.account_url.startswith(("https://", "http://")):
            raise BackendMisconfigured(
                "azure-batch pool option account_url must be the Batch account's URL, "
                "e.g. https://myaccount.eastus.batch.azure.com"
                + (f"; got {self.account_url!r}" if self.account_url else "")
            )
        if self.auth not in ("entra", "shared-key"):
            raise BackendMisconfigured(
                f"azure-batch pool option auth must be 'entra' or 'shared-key', got {self.auth!r}"
            )
        shared = (self.account_name, self.account_key_env)
        if self.auth == "shared-key" and not all(shared):
            raise BackendMisconfigured(
                "azure-batch pool option auth: shared-key needs account_name and "
                "account_key_env (the environment variable holding the key)"
            )
        if self.auth == "entra" and any(shared):
            raise BackendMisconfigured(
                "azure-batch pool options account_name and account_key_env are for "
                "auth: shared-key; remove them or set auth: shared-key"
            )
        if self.account_key_env is not None and not _ENV_NAME.match(self.account_key_env):
            raise BackendMisconfigured(
                "azure-batch pool option account_key_env must name an environment variable, "
                f"got {self.account_key_env!r}"
            )
        for name in ("batch_pool_id", "job_id"):
            value = getattr(self, name)
            if value is not None and not BATCH_ID.match(value):
                raise BackendMisconfigured(
                    f"azure-batch pool option {name} must be 1-64 letters, digits, '-' or '_', "
                    f"got {value!r}"
                )
        if not re.fullmatch(r"[A-Za-z0-9_-]{0,16}", self.task_id_prefix):
            raise BackendMisconfigured(
                "azure-batch pool option task_id_prefix must be at most 16 letters, digits, "
                f"'-' or '_', got {self.task_id_prefix!r}"
            )
        if self.create_pool and not self.vm_size:
            raise BackendMisconfigured(
                "azure-batch pool option create_pool needs vm_size (e.g. Standard_NC4as_T4_v3)"
            )

    def pool_id(self, pool: str) -> str:
        return self.batch_pool_id or pool

    def job(self, pool: str) -> str:
        return self.job_id or f"gpupool-{pool}"[:64]


def _image(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise TypeError("image must be a mapping of publisher, offer, sku and version")
    unknown = sorted(set(raw) - set(IMAGE_KEYS))
    missing = [k for k in IMAGE_KEYS[:3] if not raw.get(k)]
    if unknown or missing:
        raise ValueError(
            "image takes publisher, offer, sku and version (default latest)"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    image = {k: str(raw[k]) for k in IMAGE_KEYS if raw.get(k) is not None}
    image.setdefault("version", "latest")
    return image
