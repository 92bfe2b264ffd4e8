"""The declarative cluster configuration (docs/architecture.md §4): models, loading and
validation."""

from gpupool.spec.models import ClusterConfig

__all__ = ["ClusterConfig"]
