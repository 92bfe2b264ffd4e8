"""The ``options:`` of an Azure ML pool, validated when the adapter is built and by
``gpupool config validate`` (no SDK import, no I/O). Unknown keys are an error; no option
holds a secret (the identity comes from ``azure-identity``'s default chain)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpupool.backends.errors import BackendMisconfigured

_AML_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,254}\Z")
_GUIDISH = re.compile(r"[0-9a-fA-F-]{8,64}\Z")


@dataclass(frozen=True)
class AzureMLOptions:
    subscription_id: str = ""
    resource_group: str = ""
    workspace: str = ""
    compute: str = ""  # the compute cluster's name in the workspace
    environment: str | None = None  # a registered environment: azureml:<name>:<version>
    experiment_name: str | None = None  # default: gpupool-<pool>
    job_name_prefix: str = ""  # namespaces job names when installations share a workspace
    output_datastore: str | None = None  # outputs upload here; "{team}" is the job's team
    arm_endpoint: str | None = None  # Resource Manager URL of a private or sovereign cloud
    request_timeout_s: float = 30.0

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> AzureMLOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BackendMisconfigured(
                f"unknown azure-ml pool options: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = dict(raw)
        try:
            for name in known - {"request_timeout_s"}:
                if values.get(name) is not None and not isinstance(values[name], str):
                    raise TypeError(f"{name} must be a string")
            if "request_timeout_s" in values:
                values["request_timeout_s"] = float(values["request_timeout_s"])
                if values["request_timeout_s"] <= 0:
                    raise ValueError("request_timeout_s must be positive")
        except (TypeError, ValueError) as exc:
            raise BackendMisconfigured(f"invalid azure-ml pool options: {exc}") from exc
        options = cls(**values)
        options._check()
        return options

    def _check(self) -> None:
        missing = [
            name
            for name in ("subscription_id", "resource_group", "workspace", "compute")
            if not getattr(self, name)
        ]
        if missing:
            raise BackendMisconfigured(
                f"azure-ml pool options need {', '.join(missing)} (the workspace and the "
                "compute cluster jobs run on)"
            )
        if not _GUIDISH.match(self.subscription_id):
            raise BackendMisconfigured(
                "azure-ml pool option subscription_id must be the subscription's id (a GUID), "
                f"got {self.subscription_id!r}"
            )
        for name in ("compute", "experiment_name"):
            value = getattr(self, name)
            if value is not None and not _AML_NAME.match(value):
                raise BackendMisconfigured(
                    f"azure-ml pool option {name} must be letters, digits, '-' or '_', "
                    f"got {value!r}"
                )
        if not re.fullmatch(r"[A-Za-z0-9_-]{0,16}", self.job_name_prefix):
            raise BackendMisconfigured(
                "azure-ml pool option job_name_prefix must be at most 16 letters, digits, '-' "
                f"or '_', got {self.job_name_prefix!r}"
            )
        if self.environment is not None and not self.environment.startswith("azureml:"):
            raise BackendMisconfigured(
                "azure-ml pool option environment must name a registered environment, "
                f"azureml:<name>:<version> or azureml:<name>@latest; got {self.environment!r}"
            )
        if self.arm_endpoint is not None and not self.arm_endpoint.startswith("https://"):
            raise BackendMisconfigured(
                f"azure-ml pool option arm_endpoint must be an https:// URL, "
                f"got {self.arm_endpoint!r}"
            )

    def experiment(self, pool: str) -> str:
        return self.experiment_name or f"gpupool-{pool}"
