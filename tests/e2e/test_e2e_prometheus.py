"""gpupool's metrics as a real Prometheus sees them, and the dashboard and alert rules run on it.

A real server (API and controller, on PostgreSQL so that the lease is exported too) and a
standby controller serve metrics on their own addresses; Prometheus scrapes both every second.
After known actions (jobs queued past a team's quota, a job running, a cancel) the values read
back through Prometheus's query API are the ones those actions make. Then every panel of the
Grafana dashboard and every alert rule is evaluated by that Prometheus: each must parse and
name only metrics gpupool exports; promtool checks the rules file.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support import prometheus
from support.databases import scratch_database
from support.prometheus import Prometheus
from support.server import ServerProcess, free_port, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gpupool-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "gpupool-rules.yml"
NAME = re.compile(r"\bgpupool_[a-z_]+\b")
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")
# Grafana's variables, as the dashboard's queries would get them.
VARIABLES = {"$__rate_interval": "1m", "$team": ".*"}


@pytest.fixture(scope="module")
def prom() -> Prometheus:
    started = prometheus.start()
    if isinstance(started, str):
        pytest.skip(started)
    return started


class Cluster:
    def __init__(self, leader: ServerProcess, standby: ServerProcess, run: str) -> None:
        self.leader, self.standby, self.run = leader, standby, run

    def metrics_text(self, server: ServerProcess) -> str:
        address = server.env["GPUPOOL_METRICS_ADDRESS"]
        return httpx.get(f"http://{address}/metrics", timeout=5).text


@pytest.fixture(scope="module")
def cluster(prom: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("prometheus")) / "home"
    home.parent.chmod(0o777)
    demo = ROOT / "examples" / "demo.yaml"
    with scratch_database() as url:
        servers = [
            ServerProcess(
                home,
                demo,
                env={"GPUPOOL_METRICS_ADDRESS": f"127.0.0.1:{free_port()}"},
                role=role,
                database_url=url,
            )
            for role in ("all", "controller")
        ]
        try:
            for server in servers:
                server.start()
            run = secrets.token_hex(4)
            prom.scrape(run, *(s.env["GPUPOOL_METRICS_ADDRESS"] for s in servers))
            prom.wait_value(f'count(up{{run="{run}"}} == 1)', 2)
            yield Cluster(servers[0], servers[1], run)
        finally:
            for server in servers:
                server.stop()


def submit(client: httpx.Client, gpus: int, gpu_type: str, *command: str) -> str:
    body = {"command": list(command), "resources": {"gpus": gpus, "gpu_types": [gpu_type]}}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def test_known_actions_show_in_prometheus(prom: Prometheus, cluster: Cluster) -> None:
    run = f'run="{cluster.run}"'
    prom.wait_value(f"sum(gpupool_leader{{{run}}})", 1)  # one of the two controllers leads
    prom.wait_value(f'gpupool_process_role{{{run},role="controller"}}', 1)
    with cluster.leader.client("alice") as alice, cluster.leader.client("bob") as bob:
        # team-a's h100 quota is 2 GPUs with no borrowing: 3-GPU jobs wait on quota.
        waiting = [submit(alice, 3, "h100", "true") for _ in range(3)]
        prom.wait_value(f'sum(gpupool_pending_jobs{{{run},team="team-a"}})', 3)
        prom.wait_value(
            f'gpupool_pending_jobs{{{run},team="team-a",gpu_type="h100",reason="quota"}}', 3
        )
        job = submit(bob, 1, "t4", "sleep", "60")
        wait_for(
            lambda: bob.get(f"/v1/jobs/{job}").json()["status"] == "running",
            timeout=30,
            what="bob's job to run",
        )
        prom.wait_value(f'sum(gpupool_running_jobs{{{run},team="team-b"}})', 1)
        prom.wait_value(f'gpupool_quota_used_gpus{{{run},team="team-b",gpu_type="t4"}}', 1)
        prom.wait_value(f'sum(gpupool_pool_allocated_gpus{{{run},gpu_type="t4"}})', 1)
        prom.wait_value(f'sum(gpupool_pool_idle_gpus{{{run},gpu_type="t4"}})', 3)
        assert alice.post(f"/v1/jobs/{waiting[0]}/cancel").status_code == 200
        prom.wait_value(f'sum(gpupool_pending_jobs{{{run},team="team-a"}})', 2)
        assert bob.post(f"/v1/jobs/{job}/cancel").status_code == 200
        prom.wait_value(f'sum(gpupool_running_jobs{{{run},team="team-b"}} or vector(0))', 0)
    prom.wait_value(f"min(gpupool_pool_available{{{run}}})", 1)
    prom.wait_value(f'sum(gpupool_admitted_jobs_total{{{run},team="team-b"}})', 1)
    posts = f'sum(gpupool_api_request_duration_seconds_count{{{run},route="/v1/jobs"}})'
    prom.wait_value(posts, 4)  # three of alice, one of bob
    # The demo's team-b budget (alert only): its use in this period, a fraction of its limit.
    prom.wait_value(f'count(gpupool_budget_used_ratio{{{run},team="team-b"}})', 1)
    # Only the leader exports state: summing over both processes counts nothing twice.
    prom.wait_value(f"count(count by (instance) (gpupool_quota_nominal_gpus{{{run}}}))", 1)


def test_borrowing_lending_and_a_reclaim_show_in_prometheus(
    prom: Prometheus, cluster: Cluster
) -> None:
    run = f'run="{cluster.run}"'
    with cluster.leader.client("alice") as alice, cluster.leader.client("bob") as bob:
        # team-b's h100 nominal is 2 and it may borrow: its 4 jobs take team-a's 2 idle GPUs.
        borrowing = [submit(bob, 1, "h100", "sleep", "120") for _ in range(4)]
        prom.wait_value(f'gpupool_quota_used_gpus{{{run},team="team-b",gpu_type="h100"}}', 4)
        prom.wait_value(f'gpupool_quota_borrowed_gpus{{{run},team="team-b",gpu_type="h100"}}', 2)
        prom.wait_value(f'gpupool_quota_lent_gpus{{{run},team="team-a",gpu_type="h100"}}', 2)
        prom.wait_value(f'sum(gpupool_pool_idle_gpus{{{run},gpu_type="h100"}})', 0)
        # alice's job fits within team-a's nominal: it reclaims one of the borrowed GPUs.
        reclaiming = submit(alice, 1, "h100", "true")
        preempted = f'gpupool_preempted_jobs_total{{{run},preempting_team="team-a"'
        prom.wait_value(f'sum({preempted},reason="in_cohort"}})', 1)
        assert prom.value(f'sum({preempted},reason="within_team"}})') is None
        for job in borrowing:
            bob.post(f"/v1/jobs/{job}/cancel")
        alice.post(f"/v1/jobs/{reclaiming}/cancel")
    prom.wait_value(f'sum(gpupool_quota_used_gpus{{{run},gpu_type="h100"}})', 0)


def exported_names(text: str) -> set[str]:
    """The series names a /metrics page declares (a histogram's _bucket, _count and _sum)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE gpupool_"):
            _, _, name, kind = line.split()
            series = HISTOGRAM_SERIES if kind == "histogram" else ("",)
            names.update(name + suffix for suffix in series)
    return names


def dashboard_exprs() -> list[str]:
    board: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", ())]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # label_values(...) is Grafana's, not PromQL: its metric
            exprs.append(NAME.search(query["query"]).group(0))  # type: ignore[union-attr]
    return exprs


def rule_exprs() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def substituted(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_dashboard_and_rule_expression_parses_and_names_exported_metrics(
    prom: Prometheus, cluster: Cluster, source: str
) -> None:
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    assert len(exprs) >= 8
    exported = exported_names(cluster.metrics_text(cluster.leader))
    unknown = {name for e in exprs for name in NAME.findall(e)} - exported
    assert unknown == set(), f"not exported by gpupool: {sorted(unknown)}"
    refused = {
        expr: answer.get("error")
        for expr in exprs
        if (answer := prom.query(substituted(expr)))["status"] != "success"
    }
    assert refused == {}


def test_promtool_accepts_the_rules_file(prom: Prometheus) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool comes with Debian's prometheus package"
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in done.stdout


def test_a_standby_controller_serves_metrics_but_no_state(cluster: Cluster) -> None:
    text = cluster.metrics_text(cluster.standby)
    assert 'gpupool_process_role{role="controller"} 1.0' in text
    assert "gpupool_leader 0.0" in text
    assert "gpupool_pending_jobs" not in text
    leader = cluster.metrics_text(cluster.leader)
    assert "gpupool_leader 1.0" in leader
    assert "gpupool_leader_lease_age_seconds" in leader


def test_the_api_does_not_serve_metrics(cluster: Cluster) -> None:
    with cluster.leader.client("admin") as admin:
        assert admin.get("/metrics").status_code == 404
