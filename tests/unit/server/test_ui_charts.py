"""The dashboard's SVG charts against golden files, and escaping of the names they show.

Regenerate after an intended change with ``GPUPOOL_UPDATE_GOLDEN=1 pytest -k ui_charts``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gpupool.server.ui.charts import capacity_bars, usage_bars

GOLDEN = Path(__file__).parent / "testdata" / "charts"


@dataclass(frozen=True)
class Cap:
    name: str
    total: int
    healthy: int
    allocated: int


DAYS = ["2026-12-01", "2026-12-02", "2026-12-03"]
CASES = [
    pytest.param(
        "capacity.svg",
        lambda: capacity_bars([Cap("h100", 8, 8, 5), Cap("t4", 4, 0, 0)]),
        id="capacity: allocated, idle and an unreachable pool",
    ),
    pytest.param(
        "usage.svg",
        lambda: usage_bars(
            DAYS,
            {
                "team-a/h100": {"2026-12-01": (4.0, 1.5), "2026-12-03": (2.0, 0.0)},
                "team-b/t4": {"2026-12-02": (3.25, 0.0)},
            },
        ),
        id="usage: stacked per team and type, borrowed lighter",
    ),
    pytest.param("usage-empty.svg", lambda: usage_bars(DAYS, {}), id="usage: nothing used"),
]


@pytest.mark.parametrize(("golden", "draw"), CASES)
def test_charts_match_their_golden_files(golden: str, draw) -> None:  # type: ignore[no-untyped-def]
    svg = str(draw())
    ElementTree.fromstring(svg)  # well-formed XML
    path = GOLDEN / golden
    if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
        path.write_text(svg + "\n")
    assert svg + "\n" == path.read_text()


def test_names_are_escaped() -> None:
    svg = str(usage_bars(DAYS, {"<script>/x": {"2026-12-01": (1.0, 0.0)}}))
    assert "<script>" not in svg and "&lt;script&gt;/x" in svg
    ElementTree.fromstring(svg)
