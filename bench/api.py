"""API benchmark: submit throughput and submit→running latency on the local backend.

Starts a real ``gpupool server`` (SQLite, local backend) in a subprocess, then
1. submits ``--submits`` jobs from ``--clients`` concurrent HTTP clients (jobs that cannot be
   admitted, so the measure is the API and store, not process start-up), and
2. submits ``--latency-jobs`` jobs at once that can all run; each job writes the time it
   started, so latency is measured from just before its POST to its own first instruction.

Usage: python bench/api.py [--json] [--submits 2000] [--clients 8] [--latency-jobs 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.server import ServerProcess, wait_for  # noqa: E402

CONFIG = """
gpu_types: {cpu: {}, h100: {}}
pools:
  - {name: bench-cpu-pool, backend: local, gpu_type: cpu, nodes: 1,
     node: {gpus: 0, cpus: 512, memory_gb: 4096}}
  - {name: bench-h100-pool, backend: local, gpu_type: h100, nodes: 1, node: {gpus: 1}}
teams:
  runners: {members: {bench: member}}
  waiters: {members: {bench: member}}
users:
  bench: {uid: 0, gid: 0}
scheduler: {cycle_interval_s: 0.5}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def submit_throughput(server: ServerProcess, total: int, clients: int) -> dict[str, float]:
    """Jobs that wait forever (team without h100 quota): API + store cost only."""
    body = {"team": "waiters", "command": ["true"], "resources": {"gpus": 1, "gpu_types": ["h100"]}}
    per_client = total // clients
    errors: list[str] = []

    def worker() -> None:
        with server.client("bench") as client:
            for _ in range(per_client):
                response = client.post("/v1/jobs", json=body)
                if response.status_code != 201:
                    errors.append(response.text)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} submits failed, first: {errors[0]}")
    return {"clients": clients, "jobs": per_client * clients, "seconds": round(elapsed, 3),
            "submits_per_s": round(per_client * clients / elapsed, 1)}


def latency(server: ServerProcess, jobs: int, out_dir: Path) -> dict[str, float]:
    """All ``jobs`` queued at once; each can run (no GPUs, plenty of cpus)."""
    sent: dict[str, float] = {}
    with server.client("bench") as client:
        for i in range(jobs):
            stamp = out_dir / f"{i}.start"
            body = {
                "team": "runners",
                "command": ["sh", "-c", f"date +%s.%N > {stamp}"],
                "resources": {"gpus": 0, "gpu_types": ["cpu"], "cpus": 1, "memory_gb": 1},
            }
            sent[str(stamp)] = time.time()
            response = client.post("/v1/jobs", json=body)
            response.raise_for_status()
    wait_for(lambda: all(Path(p).exists() and Path(p).read_text().strip() for p in sent),
             timeout=120, what="all latency jobs started")
    waits = [(float(Path(p).read_text()) - t0) * 1000 for p, t0 in sent.items()]
    return {"jobs": jobs, "p50_ms": round(statistics.median(waits), 1),
            "p99_ms": round(percentile(waits, 0.99), 1), "max_ms": round(max(waits), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--submits", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--latency-jobs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        root = Path(tmp)
        root.chmod(0o777)
        config = root / "bench.yaml"
        uid, gid = os.getuid(), os.getgid()
        config.write_text(CONFIG.replace("uid: 0, gid: 0", f"uid: {uid}, gid: {gid}"))
        server = ServerProcess(root / "home", config)
        server.start()
        try:
            lat = latency(server, args.latency_jobs, root)
            thr = submit_throughput(server, args.submits, args.clients)
        finally:
            server.stop()
    result = {"benchmark": "api", "store": "sqlite", "backend": "local", "cpus": os.cpu_count(),
              "submit": thr, "submit_to_running": lat}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"submit: {thr['submits_per_s']}/s with {thr['clients']} clients ({thr['jobs']} jobs)")
        print(f"submit->running: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms ({lat['jobs']} jobs)")


if __name__ == "__main__":
    main()
