"""The runner helper (``spawner.py``): runners are forked by one pre-imported helper per state
dir, which outlives the adapter that started it and serves only the server's own uid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpupool.backends.base import AdapterContext, JobHandle, JobSpec, RunState
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.local.spawner import address

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract Unix sockets"),
]

POOL = "test-shared-dev-t4-pool"


def spec(job_id: str, stamp: Path) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=("sh", "-c", f"echo $PPID > {stamp}"),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=0,
    )


def backend(state: Path) -> LocalBackend:
    ctx = AdapterContext(
        pool=POOL, gpu_type="t4", state_dir=state, options={"run_without_identity": True}
    )
    return LocalBackend(ctx)


def wait_done(adapter: LocalBackend, handle: JobHandle) -> None:
    deadline = time.monotonic() + 20
    while adapter.poll([handle])[handle.key].state is not RunState.SUCCEEDED:
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.05)


def helpers_of(local_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "gpupool.backends.local.spawner" in cmdline and str(local_dir) in cmdline:
            found.append(proc)
    return found


def test_runners_are_forked_by_one_helper_that_later_adapters_reuse(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first, second = backend(state), backend(state)  # a server, then its restart
    stamps = [tmp_path / "a", tmp_path / "b"]
    for n, (adapter, stamp) in enumerate(zip((first, second), stamps, strict=True)):
        handle = adapter.submit(spec(f"j{n}", stamp))
        wait_done(adapter, handle)
        assert handle.provider_id  # the runner wrote its handle while submit waited
    helpers = helpers_of(state / "local")
    assert len(helpers) == 1
    # Each runner is detached: re-parented to init, not a child of the helper.
    for stamp in stamps:
        assert int(stamp.read_text()) != helpers[0].pid
    assert helpers[0].ppid() == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_the_helper_starts_nothing_for_another_uid(tmp_path: Path) -> None:
    state = tmp_path / "state"
    adapter = backend(state)
    wait_done(adapter, adapter.submit(spec("j0", tmp_path / "a")))  # the helper runs now
    attempt = state / "local" / POOL / "forged.1"
    attempt.mkdir()
    (attempt / "spec.json").write_text(json.dumps({"argv": ["touch", str(tmp_path / "ran")]}))
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "s.connect('\\0' + sys.argv[1])\n"
        "try:\n"
        "    s.sendall(sys.argv[2].encode() + b'\\n')\n"
        "    print(repr(s.recv(64)))\n"
        "except (BrokenPipeError, ConnectionResetError):  # closed on us\n"
        "    print(repr(b''))\n"
    )
    name = address(state / "local")
    out = subprocess.run(
        [sys.executable, "-c", probe, name, str(attempt)], capture_output=True, text=True
    )
    assert out.stdout.strip() == "b''", out.stderr  # closed without an answer
    assert not (attempt / "handle.json").exists()
