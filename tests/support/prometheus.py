"""A real Prometheus for the metrics tests: started by scripts/prometheus/up.sh, scraping every
second the targets a test writes into its file-discovery file."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
HOW = (
    "Prometheus is needed: run scripts/prometheus/up.sh (as root it installs Debian's "
    "prometheus package, which brings promtool; otherwise apt-get install prometheus)"
)


@dataclass(frozen=True)
class Prometheus:
    url: str
    targets: Path  # the file-discovery file it re-reads every second

    def scrape(self, run: str, *addresses: str) -> None:
        """Scrape ``addresses`` (host:port), their series labelled ``run``; replaces the
        targets of any earlier run."""
        groups = [{"targets": list(addresses), "labels": {"run": run}}]
        tmp = self.targets.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups), encoding="utf-8")
        tmp.replace(self.targets)  # atomic: Prometheus never reads half a file

    def query(self, expr: str) -> dict[str, Any]:
        """The API's answer to an instant query (``status`` success or error)."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        body: dict[str, Any] = answer.json()
        return body

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` now; None when it has no result."""
        body = self.query(expr)
        assert body["status"] == "success", body
        result = body["data"]["result"]
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def wait_value(self, expr: str, want: float, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        got = None
        while time.monotonic() < deadline:
            got = self.value(expr)
            if got == want:
                return
            time.sleep(0.25)
        raise AssertionError(f"{expr} is {got}, not {want}, after {timeout:g} s")


def start() -> Prometheus | str:
    """Prometheus, or why it could not start."""
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "prometheus" / "up.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"scripts/prometheus/up.sh took longer than 600 s. {HOW}"
    if done.returncode != 0:
        return f"scripts/prometheus/up.sh failed: {done.stderr.strip()[-500:]}. {HOW}"
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Prometheus(found["url"], Path(found["targets"]))
