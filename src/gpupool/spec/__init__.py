"""The declarative cluster configuration (DESIGN §4): models, loading and validation."""

from gpupool.spec.models import ClusterConfig

__all__ = ["ClusterConfig"]
