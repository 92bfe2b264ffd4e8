"""GPU detection and mapping for local pools (``gpus.py``), on recorded nvidia-smi output."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpupool.backends.errors import BackendMisconfigured
from gpupool.backends.local.gpus import (
    NVIDIA_QUERY,
    GpuInfo,
    NvidiaGpus,
    VirtualGpus,
    gpus_from_options,
    parse_nvidia_smi,
)

# The format of `nvidia-smi --query-gpu=index,uuid --format=csv,noheader` (UUIDs made up).
FOUR_GPUS = (Path(__file__).parent / "testdata" / "nvidia_smi_query_gpu_4x.txt").read_text()


def recorded(output: str, calls: list[Sequence[str]] | None = None):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> str:
        if calls is not None:
            calls.append(list(argv))
        return output

    return run


def test_parse_recorded_output() -> None:
    gpus = parse_nvidia_smi(FOUR_GPUS)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[0] == GpuInfo(0, "GPU-3b1f6c1e-6d2a-5c4e-9b8e-0f6b1f2a7c01")


def test_parse_sorts_by_index_and_skips_blank_lines() -> None:
    gpus = parse_nvidia_smi("1, GPU-b\n\n0, GPU-a\n")
    assert gpus == (GpuInfo(0, "GPU-a"), GpuInfo(1, "GPU-b"))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("No devices were found\n", id="nvidia-smi message"),
        pytest.param("0\n", id="missing uuid"),
        pytest.param("zero, GPU-a\n", id="index not a number"),
    ],
)
def test_parse_rejects_unexpected_output(text: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_nvidia_smi(text)


def test_virtual_gpus_use_the_scheduler_indices() -> None:
    assert VirtualGpus().environment((2, 0)) == {"CUDA_VISIBLE_DEVICES": "2,0"}
    assert VirtualGpus().environment(()) == {"CUDA_VISIBLE_DEVICES": ""}


def test_nvidia_gpus_map_scheduler_indices_to_detected_gpus() -> None:
    calls: list[Sequence[str]] = []
    gpus = NvidiaGpus.detect(2, recorded("0, GPU-a\n2, GPU-c\n", calls))
    env = gpus.environment((1,))
    assert calls == [["nvidia-smi", *NVIDIA_QUERY]]
    assert env == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_options_select_the_mapper() -> None:
    assert isinstance(gpus_from_options({}, 4), VirtualGpus)
    nvidia = gpus_from_options({"devices": "nvidia"}, 4, recorded(FOUR_GPUS))
    assert nvidia.environment((3, 1))["CUDA_VISIBLE_DEVICES"] == "3,1"


def test_fewer_gpus_than_the_pool_declares_is_misconfiguration() -> None:
    with pytest.raises(
        BackendMisconfigured, match="declares 8 GPUs per node but nvidia-smi shows 4"
    ):
        NvidiaGpus.detect(8, recorded(FOUR_GPUS))


def test_missing_nvidia_smi_is_misconfiguration() -> None:
    def missing(argv: Sequence[str]) -> str:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    def failing(argv: Sequence[str]) -> str:
        raise subprocess.CalledProcessError(9, list(argv))

    for runner in (missing, failing):
        with pytest.raises(BackendMisconfigured, match="cannot be listed") as caught:
            NvidiaGpus.detect(1, runner)
        assert caught.value.__cause__ is not None
