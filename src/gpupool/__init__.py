"""gpupool: share heterogeneous GPU capacity between teams.

Quotas per GPU type, cohorts that lend idle quota, fair share, preemption and accounting.
"""

__version__ = "0.1.0"
