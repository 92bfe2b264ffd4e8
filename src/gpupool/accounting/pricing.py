"""What one GPU-hour costs on a pool (C2).

The price is the pool's own ``price_per_gpu_hour`` when set, else its gpu type's:
``spot_price_per_gpu_hour`` for a pool of spot nodes (falling back to the dedicated price
when the type has no spot price), ``price_per_gpu_hour`` otherwise. Usage recorded on a pool
or gpu type that the configuration no longer has costs nothing and is reported as unpriced.
"""

from __future__ import annotations

from gpupool.spec.models import ClusterConfig

MS_PER_HOUR = 3_600_000


def price_per_gpu_hour(
    config: ClusterConfig, *, gpu_type: str, pool: str, node_type: str
) -> float | None:
    """The price of one GPU-hour, or None when neither the pool nor the type is known."""
    for candidate in config.pools:
        if candidate.name == pool and candidate.price_per_gpu_hour is not None:
            return candidate.price_per_gpu_hour
    spec = config.gpu_types.get(gpu_type)
    if spec is None:
        return None
    if node_type == "spot" and spec.spot_price_per_gpu_hour is not None:
        return spec.spot_price_per_gpu_hour
    return spec.price_per_gpu_hour


def node_type_of(config: ClusterConfig, pool: str) -> str:
    """``dedicated`` or ``spot``: the kind of node the pool's GPUs are on (dedicated if unknown)."""
    for candidate in config.pools:
        if candidate.name == pool:
            return candidate.autoscale.node_type
    return "dedicated"


def cost(gpu_ms: int, price: float | None) -> float:
    """The cost of ``gpu_ms`` GPU-milliseconds at ``price`` per GPU-hour (0 when unpriced)."""
    return 0.0 if price is None else gpu_ms * price / MS_PER_HOUR
