"""Wire shapes of /v1/budgets and /v1/webhooks; the client mirrors them in client.models."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BudgetIn(BaseModel):
    """``PUT /v1/budgets/{team}/{name}``: the budget's settings (see the configuration's
    ``teams.<team>.budgets``); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")

    period: Literal["month", "week", "quarter", "custom"] = "month"
    start: date | None = None
    end: date | None = None
    gpu_hours: float | None = Field(default=None, gt=0)
    amount: float | None = Field(default=None, gt=0)
    gpu_type: str | None = None
    thresholds: list[float] | None = Field(default=None, description="Default: 50, 80, 100.")
    enforcement: Literal["alert", "no-borrow", "hold"] = "alert"
    base_version: int | None = Field(
        default=None, ge=0, description="Refuse (409) unless this is the current version."
    )


class BudgetOut(BaseModel):
    """How one budget stands in its current period."""

    team: str
    name: str
    period: str  # month | week | quarter | custom
    period_label: str
    period_start: datetime
    period_end: datetime
    gpu_type: str | None
    unit: str  # GPU-h or the currency code
    used: float
    limit: float
    remaining: float
    percent: float
    status: Literal["ok", "warning", "over"]
    enforcement: str
    enforced: bool = Field(description="Used up, and its enforcement holds the team back now.")
    thresholds: list[float]
    reached: list[float]


class BudgetList(BaseModel):
    items: list[BudgetOut]


class BudgetSetOut(BaseModel):
    version: int
    applied: bool
    summary: str


class DeliveryOut(BaseModel):
    id: int
    message_id: int
    webhook: str
    event: str
    try_number: int
    at: datetime
    outcome: Literal["delivered", "retry", "failed"]
    status_code: int | None
    error: str
    duration_ms: float


class DeliveryList(BaseModel):
    items: list[DeliveryOut]
