"""The Azure Machine Learning backend: each attempt is one command job on a named compute
cluster of a workspace (docs/azure.md).

``adapter.AzureMLBackend`` is the adapter. Importing this package (or gpupool) never imports
the Azure SDK: only :mod:`gpupool.backends.azure_ml.client` does, when the client is built.
"""
