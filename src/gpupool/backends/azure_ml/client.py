"""Build the Azure ML SDK client (``azure.ai.ml.MLClient``) for a pool.

The SDK is imported here and in the adapter's calls, never when gpupool is imported. The
credential is ``azure-identity``'s ``DefaultAzureCredential`` unless a test injects one.
``arm_endpoint`` selects a cloud whose Resource Manager lives elsewhere (sovereign or private
clouds, and the tests' stand-in): the SDK's ``cloud`` / ``cloud_metadata`` arguments. Telemetry
is off: the control plane sends nothing but its requests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from gpupool.backends.azure_ml.options import AzureMLOptions

# () -> a TokenCredential
CredentialFactory = Callable[[], Any]


def default_credential() -> Any:
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def ml_client(options: AzureMLOptions, credential: Any) -> Any:
    from azure.ai.ml import MLClient

    kwargs: dict[str, Any] = {
        "enable_telemetry": False,
        "show_progress": False,
        "connection_timeout": options.request_timeout_s,
        "read_timeout": options.request_timeout_s,
        "retry_total": 2,
    }
    if options.arm_endpoint:
        url = options.arm_endpoint.rstrip("/")
        host = urlsplit(url).netloc
        kwargs["cloud"] = f"gpupool-{hashlib.sha256(url.encode()).hexdigest()[:12]}"
        kwargs["cloud_metadata"] = {
            "azure_portal": url,
            "resource_manager": url,
            "active_directory": "https://login.microsoftonline.com",
            "aml_resource_id": url,
            "storage_endpoint": host,
            "registry_discovery_endpoint": url,
        }
    return MLClient(
        credential,
        subscription_id=options.subscription_id,
        resource_group_name=options.resource_group,
        workspace_name=options.workspace,
        **kwargs,
    )


def run_details(client: Any, name: str) -> Any:
    """The run-history details of job ``name`` (times, error, log file URLs): what
    ``jobs.stream`` reads, through the same operations object (the SDK has no public call
    that returns them)."""
    return client.jobs._runs_operations.get_run_details(name)
