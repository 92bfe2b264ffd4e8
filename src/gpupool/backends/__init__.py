"""Execution backends (docs/architecture.md §6): the contract, the registry and the adapters.

Backends never import ``gpupool.scheduler``, ``gpupool.server`` or ``gpupool.state``.
"""
