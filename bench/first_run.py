"""Time from a fresh clone to a control plane that answers: ``git clone`` then ``make run``,
with cold package caches, until ``/healthz`` answers.

Usage: python bench/first_run.py [--json] [--timeout 300]

The clone is of this checkout's committed HEAD, in a temporary directory; uv's and pip's
caches point into it, so nothing downloaded before counts. The target is 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def first_run(timeout: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="gpupool-first-run-") as tmp:
        clone = Path(tmp) / "gpupool"
        port = free_port()
        env = {
            **os.environ,
            "GPUPOOL_PORT": str(port),
            "UV_CACHE_DIR": str(Path(tmp) / "uv-cache"),
            "PIP_NO_CACHE_DIR": "1",
        }
        started = time.perf_counter()
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        server = subprocess.Popen(
            ["make", "run"],
            cwd=clone,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            while not answers(f"http://127.0.0.1:{port}/healthz"):
                if server.poll() is not None:
                    raise RuntimeError(f"make run exited with {server.returncode}")
                if time.perf_counter() - started > timeout:
                    raise RuntimeError(f"not ready after {timeout:g} s")
                time.sleep(0.1)
            seconds = time.perf_counter() - started
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    return {"seconds": round(seconds, 1), "target_s": TARGET_S, "met": seconds <= TARGET_S}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    result = first_run(args.timeout)
    if args.json:
        print(json.dumps({"first_run": result}, indent=2))
    else:
        print(f"fresh clone to a ready `make run`: {result['seconds']} s (target {TARGET_S:g} s)")
    sys.exit(0)


if __name__ == "__main__":
    main()
