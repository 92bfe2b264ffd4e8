"""``gpupool export kubernetes``: the files it writes and its exit codes."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpupool.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo.yaml"
GOLDEN = ROOT / "tests" / "unit" / "k8s" / "testdata" / "demo"


def test_demo_is_written_as_the_golden_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["export", "kubernetes", "-c", str(DEMO), "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 52 objects in 12 file(s)" in result.output
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert written == {p.name: p.read_text() for p in GOLDEN.iterdir()}


def test_options_reach_the_objects(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"PEM")
    result = CliRunner().invoke(app, [
        "export", "kubernetes", "-c", str(DEMO), "--out", str(tmp_path / "out"), "--single-file",
        "--allow-from-namespace", "monitoring", "--group-prefix", "oidc:",
        "--webhook-ca-bundle", str(ca), "--webhook-service", "hook",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    objs = list(yaml.safe_load_all((tmp_path / "out" / "all.yaml").read_text()))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["all.yaml"]
    kinds = [o["kind"] for o in objs]
    assert (
        kinds.index("Namespace")
        < kinds.index("LocalQueue")
        < kinds.index("MutatingWebhookConfiguration")
    )
    hook = objs[-1]["webhooks"][0]["clientConfig"]
    assert hook["caBundle"] == "UEVN" and hook["service"]["name"] == "hook"
    member = next(
        o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "gpupool-member"
    )
    assert member["subjects"][0]["name"] == "oidc:TeamA"
    allow = next(o for o in objs if o["metadata"]["name"] == "allow-from-platform")
    assert allow["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }


def test_an_invalid_configuration_exits_5_with_its_problems(tmp_path: Path) -> None:
    invalid = ROOT / "examples" / "invalid.yaml"
    result = CliRunner().invoke(
        app, ["export", "kubernetes", "-c", str(invalid), "--out", str(tmp_path)]
    )
    assert result.exit_code == 5
    assert "unknown cohort 'reserch'" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_configuration_kubernetes_cannot_hold_exits_5_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(DEMO.read_text().replace("  team-c:", "  kube-ops:"))
    result = CliRunner().invoke(
        app, ["export", "kubernetes", "-c", str(config), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 5
    assert "teams.kube-ops: its namespace would be 'kube-ops'" in result.output


def test_an_unreadable_ca_bundle_is_named(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "export", "kubernetes", "-c", str(DEMO), "--out", str(tmp_path),
        "--webhook-ca-bundle", str(tmp_path / "missing.pem"),
    ])  # fmt: skip
    assert result.exit_code == 5
    assert "--webhook-ca-bundle: cannot read" in result.output


def test_pod_security_levels(tmp_path: Path) -> None:
    args = ["export", "kubernetes", "-c", str(DEMO), "--out", str(tmp_path), "--single-file"]
    bad = CliRunner().invoke(app, [*args, "--pod-security", "strict"])
    assert bad.exit_code == 5
    assert "--pod-security: 'strict' is not one of privileged, baseline, restricted" in bad.output
    assert CliRunner().invoke(app, [*args, "--pod-security", "restricted"]).exit_code == 0
    spaces = [o for o in yaml.safe_load_all((tmp_path / "all.yaml").read_text())
              if o["kind"] == "Namespace"]  # fmt: skip
    assert {o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] for o in spaces} == {
        "restricted"
    }
