"""The README's table of metrics is the catalog's: every exported metric is described there,
with its type and labels, and nothing else is."""

from __future__ import annotations

import re
from pathlib import Path

from gpupool.server.metrics import catalog

README = Path(__file__).resolve().parents[3] / "README.md"
ROW = re.compile(r"^\| `(gpupool_[a-z_]+)` \| (\w+) \| ([^|]*) \|")


def readme_rows() -> dict[str, tuple[str, tuple[str, ...]]]:
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        if match := ROW.match(line):
            labels = tuple(re.findall(r"`([a-z_]+)`", match.group(3)))
            rows[match.group(1)] = (match.group(2), labels)
    return rows


def test_the_readme_table_lists_every_metric_with_its_type_and_labels() -> None:
    want = {spec.name: (spec.kind.value, spec.labels) for spec in catalog.ALL}
    assert readme_rows() == want


def test_metric_names_are_unique_and_prefixed() -> None:
    names = [spec.name for spec in catalog.ALL]
    assert len(names) == len(set(names))
    assert all(name.startswith("gpupool_") for name in names)
    counters = {spec.name for spec in catalog.ALL if spec.kind is catalog.Kind.COUNTER}
    assert all(name.endswith("_total") for name in counters)
