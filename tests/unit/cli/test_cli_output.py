"""Formatting helpers of ``gpupool.cli.output``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpupool.cli import output
from gpupool.client.models import Job
from gpupool.client.testing import job_json

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("delta", "want"),
    [
        pytest.param(timedelta(seconds=5), "5s", id="seconds"),
        pytest.param(timedelta(minutes=12, seconds=59), "12m", id="minutes"),
        pytest.param(timedelta(hours=3, minutes=1), "3h", id="hours"),
        pytest.param(timedelta(days=2, hours=23), "2d", id="days"),
        pytest.param(timedelta(seconds=-30), "0s", id="clock skew never negative"),
    ],
)
def test_age(delta: timedelta, want: str) -> None:
    assert output.age(NOW - delta, now=NOW) == want


def test_age_of_nothing() -> None:
    assert output.age(None, now=NOW) == "-"


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        pytest.param({"gpu_type": "h100"}, "1xh100", id="assigned type"),
        pytest.param(
            {"resources": {"gpus": 2, "gpu_types": ["h100", "t4"]}}, "2xh100|t4", id="preference"
        ),
        pytest.param({"resources": {"gpus": 1}}, "1xany", id="any type"),
        pytest.param(
            {"resources": {"gpus": 8, "gpu_types": ["h100"], "nodes": 4}},
            "8xh100 on 4 nodes",
            id="multi-node",
        ),
    ],
)
def test_gpus_label(overrides: dict[str, object], want: str) -> None:
    assert output.gpus_label(Job.model_validate(job_json(**overrides))) == want


@pytest.mark.parametrize(
    ("details", "want"),
    [
        pytest.param(None, [], id="none"),
        pytest.param("just text", ["just text"], id="string"),
        pytest.param(
            [{"path": "pools[0].gpu_type", "message": "unknown"}],
            ["pools[0].gpu_type: unknown"],
            id="path",
        ),
        pytest.param([{"message": "no field"}], ["no field"], id="message only"),
        pytest.param(
            [{"loc": ["body", "resources", 0, "gpus"], "msg": "bad"}],
            ["resources.0.gpus: bad"],
            id="fastapi loc without the request part",
        ),
    ],
)
def test_detail_lines(details: object, want: list[str]) -> None:
    assert output.detail_lines(details) == want
