"""The capabilities the registry declares per backend (what routing reads before any adapter
is built) agree with what each adapter says of itself once built."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.backends.azure_batch.adapter import AzureBatchBackend
from gpupool.backends.azure_ml.adapter import AzureMLBackend
from gpupool.backends.base import AdapterContext, Backend, Capability
from gpupool.backends.fake import FakeBackend, FakeCluster
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.ray.adapter import RayBackend
from gpupool.backends.registry import ADAPTERS, CAPABILITIES, implemented, runs_gangs
from gpupool.backends.slurm.adapter import SlurmBackend


def built(name: str, state_dir: Path) -> Backend:
    ctx = AdapterContext("p", "h100", {}, state_dir, nodes=2, gpus_per_node=4)
    if name == "fake":
        return FakeBackend(ctx, cluster=FakeCluster())
    if name == "local":
        return LocalBackend(ctx)
    if name == "slurm":
        slurm = AdapterContext("p", "h100", {"partition": "gpu"}, state_dir, nodes=2)
        return SlurmBackend(slurm, runner=lambda *a, **k: None)  # type: ignore[arg-type]
    if name == "azure-batch":
        options = {"account_url": "https://acct.eastus.batch.azure.com"}
        return AzureBatchBackend(AdapterContext("p", "h100", options, state_dir))
    if name == "azure-ml":
        aml = {
            "subscription_id": "00000000-0000-0000-0000-000000000001",
            "resource_group": "rg",
            "workspace": "ws",
            "compute": "gpu",
        }
        return AzureMLBackend(AdapterContext("p", "h100", aml, state_dir))
    assert name == "ray"
    return RayBackend.__new__(RayBackend)  # its capabilities are the class's own


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_declared_capabilities_are_the_adapters_own(name: str, tmp_path: Path) -> None:
    adapter = built(name, tmp_path)
    declared = CAPABILITIES[name]
    assert declared <= adapter.capabilities
    # What the adapter adds depends on how the server runs, never on gangs.
    assert (Capability.GANG in declared) is (Capability.GANG in adapter.capabilities)


def test_every_registered_backend_declares_its_capabilities() -> None:
    assert set(CAPABILITIES) == set(ADAPTERS)


@pytest.mark.parametrize(
    ("backend", "gangs", "exists"),
    [
        pytest.param("slurm", True, True, id="slurm runs gangs"),
        pytest.param("local", False, True, id="local runs one node"),
        pytest.param("ray", False, True, id="ray runs one node"),
        pytest.param("azure-batch", False, True, id="azure-batch runs one node"),
        pytest.param("azure-ml", False, True, id="azure-ml runs one node"),
        pytest.param("kubernetes", False, False, id="kubernetes has no adapter yet"),
    ],
)
def test_routing_reads_the_declarations(backend: str, gangs: bool, exists: bool) -> None:
    assert runs_gangs(backend) is gangs
    assert implemented(backend) is exists
