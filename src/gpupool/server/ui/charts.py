"""Charts drawn on the server as SVG text: no script, no package, nothing fetched.

Every label passes through :func:`html.escape` (names come from the configuration, and the
SVG is put into the page as markup). Colours are presentation attributes, not ``style``,
so the pages' Content-Security-Policy (no inline style) allows them. Each chart has a
``<title>`` and a text table beside it on its page, for readers who cannot see it.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Protocol

from markupsafe import Markup

PALETTE = ("#2f6fb0", "#d9822b", "#3a9a5b", "#a04ab0", "#c0392b", "#5d6d7e", "#b7950b")
BORROWED_OPACITY = "0.45"


class CapacityLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def total(self) -> int: ...
    @property
    def healthy(self) -> int: ...
    @property
    def allocated(self) -> int: ...


def capacity_bars(rows: Sequence[CapacityLike], width: int = 560) -> Markup:
    """One horizontal bar per gpu type: allocated, idle (healthy, free) and unhealthy GPUs."""
    bar_h, gap, left = 22, 10, 90
    height = max(1, len(rows)) * (bar_h + gap) + 24
    most = max((r.total for r in rows), default=1) or 1
    scale = (width - left - 60) / most
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">',
        "<title>GPUs per gpu type: allocated, idle and unhealthy</title>",
    ]
    for i, r in enumerate(rows):
        y = i * (bar_h + gap)
        alloc, idle = r.allocated, max(0, r.healthy - r.allocated)
        down = max(0, r.total - r.healthy)
        x: float = left
        parts.append(f'<text x="0" y="{y + 15}" font-size="13" fill="#222">{escape(r.name)}</text>')
        for value, colour, what in (
            (alloc, "#2f6fb0", "allocated"),
            (idle, "#a9cce3", "idle"),
            (down, "#c0392b", "unhealthy"),
        ):
            if value:
                w = value * scale
                parts.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}">'
                    f"<title>{escape(r.name)}: {value} {what}</title></rect>"
                )
                x += w
        parts.append(
            f'<text x="{x + 6:.1f}" y="{y + 15}" font-size="12" fill="#444">'
            f"{alloc}/{r.total}</text>"
        )
    y = len(rows) * (bar_h + gap) + 14
    for n, (colour, what) in enumerate(
        (("#2f6fb0", "allocated"), ("#a9cce3", "idle"), ("#c0392b", "unhealthy"))
    ):
        x = left + n * 110
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 16}" y="{y}" font-size="12" fill="#222">{what}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def usage_bars(
    days: Sequence[str],
    series: dict[str, dict[str, tuple[float, float]]],
    width: int = 900,
    height: int = 260,
) -> Markup:
    """GPU-hours per day, stacked per team and gpu type; borrowed hours in the lighter shade."""
    top, bottom, left, legend_w = 10, 40, 50, 190
    plot_w, plot_h = width - left - legend_w, height - top - bottom
    keys = sorted(series)
    totals = [sum(sum(series[k].get(d, (0.0, 0.0))) for k in keys) for d in days]
    most = max(totals, default=0.0) or 1.0
    step = plot_w / max(1, len(days))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">',
        "<title>GPU-hours per day per team and gpu type (light: borrowed)</title>",
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#888"/>',
        f'<text x="0" y="{top + 10}" font-size="11" fill="#444">{most:.3g} h</text>',
        f'<text x="0" y="{top + plot_h}" font-size="11" fill="#444">0</text>',
    ]
    for i, day in enumerate(days):
        x = left + i * step + step * 0.15
        y: float = top + plot_h
        for n, key in enumerate(keys):
            allocated, borrowed = series[key].get(day, (0.0, 0.0))
            colour = PALETTE[n % len(PALETTE)]
            for value, opacity, what in (
                (allocated, "1", "allocated"),
                (borrowed, BORROWED_OPACITY, "borrowed"),
            ):
                if value <= 0:
                    continue
                h = value / most * plot_h
                y -= h
                parts.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{step * 0.7:.1f}" height="{h:.1f}" '
                    f'fill="{colour}" fill-opacity="{opacity}"><title>{escape(day)} '
                    f"{escape(key)}: {value:.2f} GPU-h {what}</title></rect>"
                )
        if len(days) <= 16 or i % 2 == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{top + plot_h + 16}" font-size="10" fill="#444">'
                f"{escape(day[5:])}</text>"
            )
    for n, key in enumerate(keys):
        y = top + 14 + n * 18
        x = left + plot_w + 16
        colour = PALETTE[n % len(PALETTE)]
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 16}" y="{y}" font-size="12" fill="#222">{escape(key)}</text>')
    if keys:
        y = top + 14 + len(keys) * 18 + 6
        parts.append(
            f'<text x="{left + plot_w + 16}" y="{y}" font-size="11" fill="#666">'
            "lighter: borrowed</text>"
        )
    else:
        parts.append(
            f'<text x="{left + 10}" y="{top + plot_h / 2:.0f}" font-size="13" fill="#666">'
            "no GPU use recorded in these days</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
