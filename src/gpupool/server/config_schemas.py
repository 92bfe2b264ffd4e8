"""Wire shapes of /v1/config (live configuration); the client mirrors them in client.models."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# A configuration file is small; this bounds what one request may make the server parse.
MAX_CONFIG_CHARS = 512_000  # within the 1 MiB body limit, escaped as JSON


class ConfigIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    yaml: str = Field(max_length=MAX_CONFIG_CHARS, description="The whole configuration file.")
    source: str = Field(default="", max_length=500, description="Where it came from (a path).")


class ConfigApplyIn(ConfigIn):
    base_version: int = Field(
        ge=0, description="The version the diff was shown against; 409 if it is not current."
    )
    force: bool = Field(
        default=False,
        description="Remove teams and pools even though jobs still use them (see the README).",
    )


class ChangeOut(BaseModel):
    kind: Literal["added", "removed", "changed"]
    section: str
    name: str
    path: list[str]
    old: Any = None
    new: Any = None
    text: str = Field(description="The change as one readable line.")


class JobInUseOut(BaseModel):
    id: str
    team: str
    status: str
    pool: str | None


class ConfigDiffOut(BaseModel):
    base_version: int = Field(description="The version in force the diff was made against.")
    changes: list[ChangeOut]
    text: str = Field(description="All changes, grouped by section, for a terminal.")
    summary: str
    jobs_in_use: list[JobInUseOut] = Field(
        description="Queued or running jobs of removed teams and pools: apply needs force."
    )


class ConfigVersionOut(BaseModel):
    version: int
    applied_at: datetime
    applied_by: str
    source: str
    summary: str
    digest: str


class ConfigOut(ConfigVersionOut):
    yaml: str


class ConfigVersionList(BaseModel):
    items: list[ConfigVersionOut]


class ConfigApplyOut(BaseModel):
    version: int = Field(description="The version now in force.")
    applied: bool = Field(description="False when the file changed nothing (no new version).")
    diff: ConfigDiffOut
    failed_jobs: int = Field(default=0, description="Queued jobs of removed teams, failed.")
    cancelled_jobs: int = Field(default=0, description="Running jobs of removed teams/pools.")
