"""The local backend: attempts run as real, detached processes on this machine.

``adapter.LocalBackend`` is the adapter; ``runner`` is the per-attempt supervisor process and
must stay importable without importing the rest of gpupool (so nothing is imported here).
"""
