"""A headless Chromium driven by Selenium, for the dashboard's browser tests.

:func:`start_browser` installs the browser and its driver when needed (scripts/chromium/up.sh)
and skips the test, saying how to get them, when it cannot. :class:`Browser` keeps what the
tests check after every step: console messages at level SEVERE and requests that failed (a
network error, or an answer of 400 or more), read from Chrome's own logs; and it saves a
screenshot of each page at 1280x800.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOW = (
    "run scripts/chromium/up.sh as root (it installs Debian's chromium and chromium-driver), "
    "and install the test extra (selenium)"
)
SIZE = (1280, 800)


def chromium_paths() -> dict[str, str]:
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "chromium" / "up.sh")],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no Chromium ({HOW}): {exc}")
    if done.returncode != 0:
        pytest.skip(f"no Chromium ({HOW}): {done.stderr.strip()[-400:]}")
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


@dataclass
class Browser:
    driver: Any  # selenium.webdriver.Chrome
    shots: Path
    problems: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)  # URL parts whose failure is expected

    def open(self, url: str) -> None:
        self.driver.get(url)
        self.check()

    def check(self) -> None:
        """Collect console errors and failed requests since the last check."""
        for entry in self.driver.get_log("browser"):
            if entry["level"] == "SEVERE" and not self._allowed(entry["message"]):
                self.problems.append(f"console: {entry['message']}")
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            params = message.get("params", {})
            if message["method"] == "Network.loadingFailed" and not params.get("canceled"):
                self.problems.append(f"request failed: {params.get('errorText')}")
            elif message["method"] == "Network.responseReceived":
                response = params.get("response", {})
                if response.get("status", 0) >= 400 and not self._allowed(response.get("url", "")):
                    self.problems.append(f"request {response.get('url')}: {response.get('status')}")

    def _allowed(self, text: str) -> bool:
        return any(part in text for part in self.allowed)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def wait(self, check: Callable[[], bool], timeout: float = 20.0, what: str = "page") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; at {self.driver.current_url}")

    def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def exists(self, css: str) -> bool:
        from selenium.webdriver.common.by import By

        return bool(self.driver.find_elements(By.CSS_SELECTOR, css))

    def quit(self) -> None:
        self.driver.quit()


def start_browser(paths: dict[str, str], shots: Path) -> Browser:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        pytest.skip(f"selenium is not installed ({HOW}): {exc}")
    options = webdriver.ChromeOptions()
    options.binary_location = paths["chromium"]
    for flag in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in containers
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={SIZE[0]},{SIZE[1]}",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(paths["chromedriver"]))
    # The page's viewport itself, whatever the window's decorations: screenshots are 1280x800.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False},
    )
    shots.mkdir(parents=True, exist_ok=True)
    return Browser(driver, shots)
