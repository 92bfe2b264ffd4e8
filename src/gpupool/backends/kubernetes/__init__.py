"""The Kubernetes backend: each attempt is one batch/v1 Job (an Indexed Job for a gang) in its
team's namespace, created through the official ``kubernetes`` client (docs/kubernetes-backend.md).

``adapter.KubernetesBackend`` is the adapter. Importing this package (or gpupool) never imports
the ``kubernetes`` client: only :mod:`gpupool.backends.kubernetes.client` does, when a pool's
adapter first talks to its cluster.
"""
