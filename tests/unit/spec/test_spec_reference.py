"""The operator guide's configuration reference names every key the configuration accepts,
so a new setting cannot land undocumented."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from gpupool.spec import models

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "operator-guide.md"
SECTIONS = [
    models.ClusterConfig,
    models.GpuType,
    models.Pool,
    models.NodeShape,
    models.Autoscale,
    models.PriorityClass,
    models.Cohort,
    models.Preemption,
    models.BorrowWithinCohort,
    models.Quota,
    models.Team,
    models.Budget,
    models.User,
    models.SchedulerSettings,
    models.Storage,
    models.Accounting,
    models.Webhook,
]


@pytest.mark.parametrize("model", SECTIONS, ids=lambda m: m.__name__)
def test_every_key_is_in_the_operator_guide(model: type[BaseModel]) -> None:
    reference = GUIDE.read_text(encoding="utf-8").split("## 3. Configuration reference", 1)[1]
    missing = [key for key in model.model_fields if f"`{key}`" not in reference]
    assert missing == []
