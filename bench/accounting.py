"""Accounting speed. The JSON is a dict of sections (``sections.<name>``), one per case:

``summary``: a month's cost summary over 1,000,000 attempts of 200 teams, on SQLite and
PostgreSQL (``accounting_summary.py`` says what is filled and measured).

    python bench/accounting.py [--json] [--sections summary] [--stores sqlite,postgresql]
           [--summary-attempts 1000000] [--summary-teams 200] [--summary-running 1000]
           [--summary-repeat 3] [--summary-seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable
from typing import Any

import accounting_summary

SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "summary": accounting_summary.summary_section,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--json", action="store_true")
    accounting_summary.add_arguments(parser)
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; use some of {sorted(SECTIONS)}")
    result = {
        "benchmark": "accounting",
        "sections": {name: SECTIONS[name](args) for name in args.sections.split(",")},
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
