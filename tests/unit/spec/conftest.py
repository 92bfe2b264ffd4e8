"""Builders for configuration texts in spec tests.

``build(**sections)`` assembles a small valid configuration from YAML snippets, one per
top-level section; a case replaces the sections it is about (``None`` drops one, an unknown
name is appended as an extra section). The line a problem is expected on is marked in a
snippet with ``# <-``, so cases never hard-code line numbers that shift when the base changes.

(A fixture, not an importable module: tests run with ``--import-mode=importlib``.)
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest

MARK = "# <-"

BASE_SECTIONS: dict[str, str] = {
    "gpu_types": """
        gpu_types:
          h100: {price_per_gpu_hour: 4.0}
          t4: {price_per_gpu_hour: 0.35}
    """,
    "pools": """
        pools:
          - name: h100-pool
            backend: local
            gpu_type: h100
            node: {gpus: 4}
    """,
    "priority_classes": """
        priority_classes:
          training: {value: 100, default: true}
          best-effort: {value: 0}
    """,
    "cohorts": """
        cohorts:
          research: {}
    """,
    "teams": """
        teams:
          team-a:
            cohort: research
            quota:
              h100: {nominal: 2}
            members: {alice: member}
    """,
    "users": """
        users:
          alice: {uid: 10001, gid: 20001}
    """,
    "scheduler": """
        scheduler:
          cycle_interval_s: 0.5
    """,
}


@dataclass(frozen=True)
class Built:
    """A configuration text and the line of its ``# <-`` marker (``None`` if unmarked)."""

    text: str
    line: int | None


def build_config(**sections: str | None) -> Built:
    merged = {**BASE_SECTIONS, **sections}
    parts = [textwrap.dedent(s).strip("\n") for s in merged.values() if s is not None]
    text = "\n".join(parts) + "\n"
    marked = [i for i, line in enumerate(text.splitlines(), start=1) if MARK in line]
    assert len(marked) <= 1, f"more than one {MARK!r} marker"
    return Built(text, marked[0] if marked else None)


@pytest.fixture
def build() -> Callable[..., Built]:
    return build_config
