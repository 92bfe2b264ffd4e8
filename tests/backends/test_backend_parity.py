"""X5: the same job, reading the same input, writes byte-identical outputs on every backend
that runs real processes. Each run is compared with one reference computed here, so all
backends agree with each other."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.backends.base import ContainerPolicy
from support.podman import TEST_IMAGE, podman_problem

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
    "harness", ["local", "ray", "slurm", "azure-batch", "azure-ml", "kubernetes"], indirect=True
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


# The same work in a busybox image (no Python there): one line per i of sha256(input + byte i),
# to $GPUPOOL_OUTPUTS and the log, then what the container was given of GPUs.
IMAGE_JOB = r"""
set -e
out="$GPUPOOL_OUTPUTS/result.txt"
i=0
while [ $i -lt 64 ]; do
    h=$( { cat "$CT_INPUT"; printf "$(printf '\\%03o' $i)"; } | sha256sum | cut -d' ' -f1)
    echo "$i $h"
    i=$((i + 1))
done > "$out"
mkdir -p "$CT_OBS"
cp "$out" "$CT_OBS/result.txt"
cat "$out"
echo "gpus=$(ls /dev | grep -c gpupool-fake || true) cuda=$CUDA_VISIBLE_DEVICES"
"""
FAKE_GPU_FILES = "/dev/gpupool-fake-nvidia{index}"  # scripts/podman/up.sh and scripts/slurm


@pytest.mark.parametrize("harness", ["local", "slurm"], indirect=True)
def test_same_image_same_output_bytes(harness, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Local runs the image with podman on this machine; Slurm with podman inside the
    allocation (the podman form of its batch script), on the real test cluster. Ray's
    image_uri needs an image holding Python and Ray, which cannot be built here offline."""
    if problem := podman_problem():
        pytest.skip(problem)
    base = harness.spec("parity-image", gpus_per_node=1, devices=((1,),))
    team_root = tmp_path / "storage" / base.team
    shared = team_root / "shared"
    shared.mkdir(parents=True)
    for d in (tmp_path / "storage", team_root, shared):
        d.chmod(0o755)
    data = bytes(range(256)) * 16
    (shared / "input.bin").write_bytes(data)
    harness.ctx = replace(
        harness.ctx,
        options={**harness.ctx.options, "gpu_device_files": FAKE_GPU_FILES},
        container=ContainerPolicy(
            runtime="podman",
            allowed_images=("localhost/gpupool-test/*",),
            team_roots={base.team: str(team_root)},
        ),
    )
    backend = harness.restart()
    env = {"CT_INPUT": str(shared / "input.bin"), "CT_OBS": str(shared / "obs")}
    spec = replace(base, command=("sh", "-c", IMAGE_JOB), image=TEST_IMAGE, env=env)

    handle = backend.submit(spec)
    status = harness.wait(handle)
    log = backend.logs(handle).data

    assert status.state.value == "succeeded", (status, log)
    assert (shared / "obs" / "result.txt").read_bytes() == reference(data)
    assert log == reference(data) + b"gpus=1 cuda=0\n"  # identical on every backend
