"""API benchmark: submit throughput and submit→running latency on the local backend.

Starts a real ``gpupool server`` (local backend, its API served by ``--api-workers``
processes) in a subprocess, once per store of
``--stores`` (SQLite and, when it can be reached at ``GPUPOOL_BENCH_POSTGRES_URL`` or
127.0.0.1:5432, PostgreSQL in a scratch database), and on each
0. job arrays: ``--arrays`` arrays of ``--array-size`` tasks POSTed one after another (tasks
   that cannot be admitted): jobs stored per second through arrays,
1. submits ``--submits`` jobs from ``--clients`` concurrent HTTP clients (jobs that cannot be
   admitted, so the measure is the API and store, not process start-up), and
2. latency with a queue: ``--queued`` jobs wait in the queue (they cannot be admitted), then
   ``--probes`` runnable jobs are submitted one after another; each job writes the time it
   started, so latency runs from just before its POST to the job's own first instruction;
3. burst latency: ``--burst`` runnable jobs submitted at once (process start-up bound),
4. drain: one array of ``--drain`` tasks of ``--drain-seconds`` each on a pool of 8 GPUs, one
   GPU a task: efficiency = ideal makespan (tasks x seconds / 8) / measured makespan (from
   the POST to the last task's own end).

Every case but the arrays is a dict per store in the JSON output (``submit.sqlite``, ...).

Usage: python bench/api.py [--json] [--submits 2000] [--clients 8] [--queued 100] [--probes 50]
       [--burst 100] [--drain 200] [--drain-seconds 1] [--arrays 10] [--array-size 1000]
       [--cases all|arrays] [--stores sqlite,postgresql] [--api-workers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from stores import POSTGRES_ADMIN_URL, postgres_database

from support.server import ServerProcess, wait_for

NOBODY = 65534

CONFIG = """
gpu_types: {cpu: {}, h100: {}, a100: {}}
pools:
  - {name: bench-cpu-pool, backend: local, gpu_type: cpu, nodes: 1,
     node: {gpus: 0, cpus: 512, memory_gb: 4096}}
  - {name: bench-h100-pool, backend: local, gpu_type: h100, nodes: 1, node: {gpus: 1}}
  - {name: bench-a100-pool, backend: local, gpu_type: a100, nodes: 1,
     node: {gpus: 8, cpus: 64, memory_gb: 512}}
teams:
  runners: {members: {bench: member}, quota: {cpu: {cpus: 512}}}
  waiters: {members: {bench: member}}
  drainers: {members: {bench: member}, quota: {a100: {nominal: 8}}}
users:
  bench: {uid: 0, gid: 0}
scheduler: {cycle_interval_s: 0.5}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def submit_throughput(server: ServerProcess, total: int, clients: int) -> dict[str, float]:
    """Jobs that wait forever (team without h100 quota): API + store cost only. Each client
    is a keep-alive ``http.client`` connection, as a load generator (wrk, hey) would be: an
    httpx client spends about 1.5 ms of CPU per request, which on 2 cores would be taken
    from the server measured."""
    body = json.dumps(WAITER).encode()
    headers = {
        "Authorization": f"Bearer {server.tokens['bench']}",
        "Content-Type": "application/json",
    }
    per_client = total // clients
    errors: list[str] = []

    def worker() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            for _ in range(per_client):
                connection.request("POST", "/v1/jobs", body=body, headers=headers)
                response = connection.getresponse()
                text = response.read()
                if response.status != 201:
                    errors.append(text.decode(errors="replace"))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} submits failed, first: {errors[0]}")
    return {
        "clients": clients,
        "jobs": per_client * clients,
        "seconds": round(elapsed, 3),
        "submits_per_s": round(per_client * clients / elapsed, 1),
    }


WAITER = {"team": "waiters", "command": ["true"], "resources": {"gpus": 1, "gpu_types": ["h100"]}}


def array_throughput(server: ServerProcess, arrays: int, size: int) -> dict[str, float]:
    """``arrays`` job arrays of ``size`` tasks that wait forever, POSTed one after another:
    jobs stored per second through arrays (one request and one transaction each)."""
    body = {**WAITER, "array": f"0-{size - 1}"}
    seconds = []
    with server.client("bench") as client:
        for _ in range(arrays):
            sent = time.perf_counter()
            response = client.post("/v1/arrays", json=body)
            seconds.append(time.perf_counter() - sent)
            if response.status_code != 201 or response.json()["count"] != size:
                raise RuntimeError(f"array submit failed: {response.text}")
    total = sum(seconds)
    return {
        "arrays": arrays,
        "tasks_per_array": size,
        "jobs": arrays * size,
        "seconds": round(total, 3),
        "jobs_per_s": round(arrays * size / total, 1),
        "p50_array_ms": round(statistics.median(seconds) * 1000, 1),
        "max_array_ms": round(max(seconds) * 1000, 1),
    }


def on_store(
    store: str,
    root: Path,
    config: Path,
    name: str,
    run: Callable[[ServerProcess], dict],
    api_workers: int,
) -> dict:
    """``run`` against a fresh server on a fresh ``store`` (a skip note if it is away)."""
    with contextlib.ExitStack() as stack:
        url = None
        if store == "postgresql":
            url = stack.enter_context(postgres_database())
            if url is None:
                return {"skipped": f"PostgreSQL not reachable at {POSTGRES_ADMIN_URL}"}
        home = root / f"home-{store}-{name}"
        env = {"GPUPOOL_API_WORKERS": str(api_workers)}
        server = ServerProcess(home, config, env=env, database_url=url)
        server.start()
        try:
            return run(server)
        finally:
            server.stop()


def started(stamp: Path) -> bool:
    return stamp.exists() and bool(stamp.read_text().strip())


def runnable(client: httpx.Client, stamp: Path) -> float:
    """Submit a job that records when it starts; returns the submit time."""
    body = {
        "team": "runners",
        "command": ["sh", "-c", f"date +%s.%N > {stamp}"],
        "resources": {"gpus": 0, "gpu_types": ["cpu"], "cpus": 1, "memory_gb": 1},
    }
    sent = time.time()
    client.post("/v1/jobs", json=body).raise_for_status()
    return sent


def summary(sent: dict[Path, float]) -> dict[str, float]:
    waits = [(float(p.read_text()) - t0) * 1000 for p, t0 in sent.items()]
    return {
        "jobs": len(waits),
        "p50_ms": round(statistics.median(waits), 1),
        "p99_ms": round(percentile(waits, 0.99), 1),
        "max_ms": round(max(waits), 1),
    }


def latency_with_queue(server: ServerProcess, queued: int, probes: int, out: Path) -> dict:
    with server.client("bench") as client:
        for _ in range(queued):
            client.post("/v1/jobs", json=WAITER).raise_for_status()
        sent = {}
        for i in range(probes):
            stamp = out / f"probe-{i}.start"
            sent[stamp] = runnable(client, stamp)
            wait_for(lambda stamp=stamp: started(stamp), timeout=60, what="probe job start")
    return {"queued": queued, **summary(sent)}


def latency_burst(server: ServerProcess, jobs: int, out: Path) -> dict[str, float]:
    with server.client("bench") as client:
        sent = {out / f"burst-{i}.start": 0.0 for i in range(jobs)}
        for stamp in sent:
            sent[stamp] = runnable(client, stamp)
    wait_for(lambda: all(started(p) for p in sent), timeout=180, what="burst jobs start")
    return summary(sent)


def drain(server: ServerProcess, tasks: int, seconds: float, out: Path) -> dict[str, float]:
    """One array of ``tasks`` one-GPU tasks of ``seconds`` each on 8 GPUs; each task writes
    the time it ended. Efficiency: the ideal makespan over the measured one."""
    ends = out / f"drain-{secrets.token_hex(3)}"
    ends.mkdir()
    ends.chmod(0o777)  # mkdir's mode is cut by the umask
    body = {
        "team": "drainers",
        "command": ["sh", "-c", f"sleep {seconds}; date +%s.%N > {ends}/$GPUPOOL_ARRAY_INDEX"],
        "resources": {"gpus": 1, "gpu_types": ["a100"], "cpus": 1, "memory_gb": 1},
        "array": f"0-{tasks - 1}",
    }
    with server.client("bench") as client:
        sent = time.time()
        client.post("/v1/arrays", json=body).raise_for_status()
    stamps = [ends / str(i) for i in range(tasks)]
    wait_for(lambda: all(started(p) for p in stamps), timeout=10 * tasks * seconds, what="drain")
    makespan = max(float(p.read_text()) for p in stamps) - sent
    ideal = tasks * seconds / 8
    return {
        "jobs": tasks,
        "job_seconds": seconds,
        "gpus": 8,
        "ideal_s": round(ideal, 2),
        "makespan_s": round(makespan, 2),
        "efficiency": round(ideal / makespan, 3),
    }


CASES = ("submit_to_running", "burst_submit_to_running", "drain", "submit")


def cases(server: ServerProcess, args: argparse.Namespace, root: Path) -> dict:
    """The cases after the arrays, on one server, in this order (the submit case last: the
    jobs it leaves queued would slow the others' cycles)."""
    if args.cases == "submit":
        return {"submit": submit_throughput(server, args.submits, args.clients)}
    out = root / f"stamps-{secrets.token_hex(3)}"  # each store's jobs write their own files
    out.mkdir()
    out.chmod(0o777)  # the jobs (nobody, under a root server) write their stamps here
    return {
        "submit_to_running": latency_with_queue(server, args.queued, args.probes, out),
        "burst_submit_to_running": latency_burst(server, args.burst, out),
        "drain": drain(server, args.drain, args.drain_seconds, out),
        "submit": submit_throughput(server, args.submits, args.clients),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--submits", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--queued", type=int, default=100)
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--drain", type=int, default=200)
    parser.add_argument("--drain-seconds", type=float, default=1.0)
    parser.add_argument("--arrays", type=int, default=10)
    parser.add_argument("--array-size", type=int, default=1000)
    parser.add_argument(
        "--cases",
        choices=("all", "arrays", "submit"),
        default="all",
        help="arrays: only the arrays case; submit: only the single submits (and the arrays)",
    )
    parser.add_argument(
        "--api-workers",
        type=int,
        default=2,
        help="processes serving the server's API (gpupool server --api-workers; one per core)",
    )
    parser.add_argument(
        "--stores", default="sqlite,postgresql", help="stores to run every case on, comma-separated"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        root = Path(tmp)
        root.chmod(0o777)
        config = root / "bench.yaml"
        # A root server never runs a job as root: the bench's jobs then run as nobody (they
        # write their stamps into this world-writable directory).
        uid, gid = (os.getuid(), os.getgid()) if os.geteuid() else (NOBODY, NOBODY)
        config.write_text(CONFIG.replace("uid: 0, gid: 0", f"uid: {uid}, gid: {gid}"))
        stores = [s.strip() for s in args.stores.split(",") if s.strip()]
        arrays = {
            s: on_store(
                s,
                root,
                config,
                "arrays",
                lambda v: array_throughput(v, args.arrays, args.array_size),
                args.api_workers,
            )
            for s in stores
        }
        result: dict = {
            "benchmark": "api",
            "stores": stores,
            "backend": "local",
            "cpus": os.cpu_count(),
            "api_workers": args.api_workers,
            "arrays": arrays,
        }
        if args.cases != "arrays":
            for store in stores:
                measured = on_store(
                    store, root, config, "cases", lambda v: cases(v, args, root), args.api_workers
                )
                for case in CASES:
                    if case in measured or "skipped" in measured:
                        result.setdefault(case, {})[store] = measured.get(case, measured)
    if args.json:
        print(json.dumps(result))
        return
    for store, measured in arrays.items():
        if "skipped" in measured:
            print(f"arrays on {store}: skipped ({measured['skipped']})")
        else:
            print(
                f"arrays on {store}: {measured['jobs_per_s']} jobs/s "
                f"({measured['arrays']} arrays of {measured['tasks_per_array']}, "
                f"p50 {measured['p50_array_ms']} ms per array)"
            )
    if args.cases != "arrays":
        for store in stores:
            thr = result["submit"][store]
            if "skipped" in thr:
                print(f"{store}: skipped ({thr['skipped']})")
                continue
            print(
                f"{store}: submit {thr['submits_per_s']}/s with {thr['clients']} clients "
                f"({thr['jobs']} jobs)"
            )
            if args.cases == "submit":
                continue
            probe = result["submit_to_running"][store]
            burst = result["burst_submit_to_running"][store]
            dr = result["drain"][store]
            print(
                f"{store}: submit->running with {probe['queued']} queued: p50 {probe['p50_ms']} "
                f"ms, p99 {probe['p99_ms']} ms ({probe['jobs']} probes)"
            )
            print(
                f"{store}: burst of {burst['jobs']}: p50 {burst['p50_ms']} ms, "
                f"p99 {burst['p99_ms']} ms"
            )
            print(
                f"{store}: drain of {dr['jobs']} x {dr['job_seconds']} s on 8 GPUs: "
                f"{dr['makespan_s']} s (ideal {dr['ideal_s']} s), efficiency {dr['efficiency']}"
            )


if __name__ == "__main__":
    main()
