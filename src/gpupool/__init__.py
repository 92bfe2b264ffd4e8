"""gpupool: share heterogeneous GPU capacity between teams with quotas, fair share and accounting."""

__version__ = "0.1.0"
