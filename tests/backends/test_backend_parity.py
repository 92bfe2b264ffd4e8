"""X5: the same job, reading the same input, writes byte-identical outputs on every backend
that runs real processes. Each run is compared with one reference computed here, so all
backends agree with each other."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest

# Reads $CT_INPUT, writes a derived file to $GPUPOOL_OUTPUTS, and copies it to the
# observation dir the test can read whatever the backend's output location is.
PARITY_JOB = """
import hashlib, os, pathlib, shutil
data = pathlib.Path(os.environ["CT_INPUT"]).read_bytes()
lines = [f"{i} {hashlib.sha256(data + bytes([i])).hexdigest()}" for i in range(64)]
out = pathlib.Path(os.environ["GPUPOOL_OUTPUTS"]) / "result.txt"
out.write_text("\\n".join(lines) + "\\n")
obs = pathlib.Path(os.environ["CT_OBS"])
obs.mkdir(parents=True, exist_ok=True)
shutil.copyfile(out, obs / "result.txt")
"""


def reference(data: bytes) -> bytes:
    lines = [f"{i} {hashlib.sha256(data + bytes([i])).hexdigest()}" for i in range(64)]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize(
    "harness", ["local", "ray", "slurm", "azure-batch", "azure-ml"], indirect=True
)
def test_same_job_same_output_bytes(harness, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = bytes(range(256)) * 16
    source = tmp_path / "input.bin"
    source.write_bytes(data)
    source.chmod(0o644)
    spec = harness.spec("parity", env={"CT_INPUT": str(source)})
    spec = replace(spec, command=(sys.executable, "-c", PARITY_JOB))

    status = harness.wait(harness.backend.submit(spec))

    assert status.state.value == "succeeded", status
    produced = (Path(spec.env["CT_OBS"]) / "result.txt").read_bytes()
    assert produced == reference(data)
