"""The Azure Batch backend: each attempt is one task in a per-pool Batch job
(docs/azure.md).

``adapter.AzureBatchBackend`` is the adapter. Importing this package (or gpupool) never
imports the Azure SDK: only :mod:`gpupool.backends.azure_batch.client` does, inside the
function that builds the client.
"""
