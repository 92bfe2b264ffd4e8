"""Build the Azure Batch SDK client (``azure.batch.BatchClient``) for a pool.

The SDK is imported here, lazily, and nowhere else in gpupool. Credentials:

* ``auth: entra`` (default): ``azure.identity.DefaultAzureCredential`` (managed identity,
  workload identity, environment variables, Azure CLI login, in that order), which needs the
  role on the Batch account listed in docs/azure.md;
* ``auth: shared-key``: the account name and the key read from the environment variable
  named by ``account_key_env``, at build time only.

Each request gets ``request_timeout_s`` for connecting and reading, and azure-core's retry
policy is kept short: the controller has its own backoff for an unavailable pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpupool.backends.azure_batch.options import BatchOptions
from gpupool.backends.errors import BackendMisconfigured

# (options, environ) -> BatchClient. Tests pass one that points the SDK at the stand-in.
ClientFactory = Callable[[BatchOptions, Mapping[str, str]], Any]


def batch_client(options: BatchOptions, environ: Mapping[str, str]) -> Any:
    from azure.batch import BatchClient

    credential: Any
    if options.auth == "shared-key":
        from azure.core.credentials import AzureNamedKeyCredential

        assert options.account_name and options.account_key_env
        key = environ.get(options.account_key_env, "")
        if not key:
            raise BackendMisconfigured(
                f"azure-batch pool option account_key_env names {options.account_key_env}, "
                "which is not set or empty"
            )
        credential = AzureNamedKeyCredential(options.account_name, key)
    else:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential()
    return BatchClient(
        options.account_url,
        credential,
        connection_timeout=options.request_timeout_s,
        read_timeout=options.request_timeout_s,
        retry_total=2,
        retry_backoff_factor=0.2,
    )
