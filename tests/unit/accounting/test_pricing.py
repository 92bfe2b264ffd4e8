"""Prices per GPU-hour: pool override, spot price, fallbacks."""

from __future__ import annotations

import pytest

from gpupool.accounting.pricing import cost, node_type_of, price_per_gpu_hour
from gpupool.spec.models import ClusterConfig

CONFIG = ClusterConfig.model_validate(
    {
        "gpu_types": {
            "h100": {"price_per_gpu_hour": 4.0, "spot_price_per_gpu_hour": 1.6},
            "t4": {"price_per_gpu_hour": 0.35},
        },
        "pools": [
            {"name": "h-ded", "backend": "local", "gpu_type": "h100", "node": {"gpus": 8}},
            {
                "name": "h-spot",
                "backend": "local",
                "gpu_type": "h100",
                "node": {"gpus": 8},
                "autoscale": {"node_type": "spot"},
            },
            {
                "name": "t-own",
                "backend": "local",
                "gpu_type": "t4",
                "node": {"gpus": 4},
                "price_per_gpu_hour": 0.2,
                "autoscale": {"node_type": "spot"},
            },
        ],
    }
)


@pytest.mark.parametrize(
    ("gpu_type", "pool", "node_type", "price"),
    [
        pytest.param("h100", "h-ded", "dedicated", 4.0, id="dedicated price of the type"),
        pytest.param("h100", "h-spot", "spot", 1.6, id="spot price of the type"),
        pytest.param("t4", "t-own", "spot", 0.2, id="the pool's own price wins"),
        pytest.param("t4", "gone", "spot", 0.35, id="no spot price: the dedicated one"),
        pytest.param("a100", "gone", "dedicated", None, id="unknown type and pool: unpriced"),
    ],
)
def test_price_per_gpu_hour(gpu_type: str, pool: str, node_type: str, price: float | None) -> None:
    assert price_per_gpu_hour(CONFIG, gpu_type=gpu_type, pool=pool, node_type=node_type) == price


def test_node_type_of_a_pool() -> None:
    assert [node_type_of(CONFIG, p) for p in ("h-ded", "h-spot", "gone")] == [
        "dedicated",
        "spot",
        "dedicated",
    ]


def test_cost_of_gpu_milliseconds() -> None:
    assert cost(2 * 3_600_000, 4.0) == pytest.approx(8.0)
    assert cost(5_000, None) == 0.0
