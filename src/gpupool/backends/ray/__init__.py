"""The Ray backend: each attempt is one Ray Job, submitted through the Jobs API
(docs/architecture.md §6).

``adapter.RayBackend`` is the adapter. Importing this package (or gpupool) never imports Ray:
only :mod:`gpupool.backends.ray.adapter` does, inside the function that builds the client.
"""
