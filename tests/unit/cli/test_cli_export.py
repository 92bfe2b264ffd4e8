"""``gpupool export azure-batch``: the Batch pool definitions of a configuration, compared
with a golden file (regenerate with GPUPOOL_UPDATE_GOLDEN=1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app

DATA = Path(__file__).parent / "testdata" / "export"
runner = CliRunner()


def export(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["export", "azure-batch", *args])
    return result.exit_code, result.stdout, result.stderr


def test_batch_pools_match_the_golden_file() -> None:
    code, out, err = export("--config", str(DATA / "azure_batch.yaml"))
    golden = DATA / "azure_batch_pools.json"
    if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
        golden.write_text(out)
    assert (code, err) == (0, "")
    assert out == golden.read_text()


def test_each_pool_gets_its_formula_and_target() -> None:
    code, out, _ = export("--config", str(DATA / "azure_batch.yaml"))
    pools = {p["id"]: p for p in json.loads(out)["pools"]}

    assert code == 0 and list(pools) == ["gpu-h100", "batch-t4-spot", "batch-t4-fixed"]
    h100, spot, fixed = pools["gpu-h100"], pools["batch-t4-spot"], pools["batch-t4-fixed"]
    assert "$warmNodes = 1;" in h100["autoScaleFormula"]
    assert "TimeInterval_Second * 1800" in h100["autoScaleFormula"]
    assert "$TargetDedicatedNodes = max($floor" in h100["autoScaleFormula"]
    assert "$TargetLowPriorityNodes = max($floor" in spot["autoScaleFormula"]
    assert "$slotsPerNode = 2;" in spot["autoScaleFormula"]
    for formula in (h100["autoScaleFormula"], spot["autoScaleFormula"]):
        assert formula.endswith("$NodeDeallocationOption = taskcompletion;")
    assert (fixed["enableAutoScale"], fixed["targetDedicatedNodes"]) == (False, 2)


def test_out_writes_one_file_per_pool(tmp_path: Path) -> None:
    code, out, _ = export("--config", str(DATA / "azure_batch.yaml"), "--out", str(tmp_path))
    assert code == 0 and out.count("wrote ") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "batch-t4-fixed.json",
        "batch-t4-spot.json",
        "gpu-h100.json",
    ]
    assert json.loads((tmp_path / "gpu-h100.json").read_text())["vmSize"].endswith("H100_v5")


@pytest.mark.parametrize(
    ("edit", "code", "message"),
    [
        pytest.param(
            ("      vm_size: Standard_NC40ads_H100_v5\n", ""),
            5,
            "pools[0].options.vm_size: pool 'batch-h100' has no VM size",
            id="a pool without vm_size names the field",
        ),
        pytest.param(
            None, 2, "has no pool with backend: azure-batch", id="no azure-batch pool (the demo)"
        ),
        pytest.param(
            ("max_nodes: 4, warm", "max_nodes: 3, warm"),
            5,
            "has nodes: 4 but max_nodes: 3",
            id="an invalid configuration is reported as config validate does",
        ),
    ],
)
def test_problems_are_named(
    tmp_path: Path, edit: tuple[str, str] | None, code: int, message: str
) -> None:
    path = DATA.parents[4] / "examples" / "demo.yaml"
    if edit is not None:
        path = tmp_path / "c.yaml"
        path.write_text((DATA / "azure_batch.yaml").read_text().replace(*edit))

    got, out, err = export("--config", str(path))

    assert (got, out) == (code, "")
    assert message in " ".join(err.split())
