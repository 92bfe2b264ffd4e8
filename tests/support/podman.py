"""Podman for the container tests: scripts/podman/up.sh run once per session, and what the
tests ask podman about an attempt."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

TEST_IMAGE = "localhost/gpupool-test/busybox:1"


@functools.cache
def podman_problem() -> str | None:
    """Set up podman and the test image of scripts/podman/up.sh, once per session; why it
    cannot be used, if so (cached: a missing podman must not cost every test a retry)."""
    how = "run scripts/podman/up.sh as root (installs podman, runc and busybox-static)"
    if os.geteuid() != 0:
        try:
            found = subprocess.run(["podman", "image", "exists", TEST_IMAGE], capture_output=True)
        except OSError:
            return f"no podman: {how}"
        return None if found.returncode == 0 else f"no test image {TEST_IMAGE}: {how}"
    script = Path(__file__).resolve().parents[2] / "scripts" / "podman" / "up.sh"
    try:
        subprocess.run([str(script)], check=True, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        return f"podman cannot run containers here ({how}): {str(detail).strip()[-300:]}"
    return None


def containers_of(key: str) -> list[str]:
    """Names of the containers (running or not) labelled with attempt ``key``."""
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=gpupool.key={key}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()
