"""Backend overhead: raw engine submission vs the same jobs through gpupool (issue X1-X5).

For Slurm (the cluster of scripts/slurm/up.sh) and Ray (scripts/ray/up.sh), side by side in
one run: ``--jobs`` one-GPU jobs (t4) submitted back to back, each writing the time it started.

* raw:      ``sbatch --parsable`` per job / ``JobSubmissionClient.submit_job`` per job
* gpupool:  ``POST /v1/jobs`` to a real ``gpupool server`` whose pool uses that engine

Reported per engine and mode: submissions per second (client side, until the last submit
returned) and submit→running latency p50/p99 (from just before a job's submit to the job's
first instruction). The engines run at most 4 such jobs at once (2 nodes x 2 t4 on Slurm,
2 t4 on Ray), so latency includes queueing in both modes; ``ratio`` is gpupool / raw.

Usage: python bench/backends.py [--json] [--jobs 200] [--engines slurm,ray]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.server import ServerProcess, wait_for  # noqa: E402

RAY_ADDRESS = "http://127.0.0.1:8265"
CONFIG = """
gpu_types: {{t4: {{}}}}
pools:
  - name: bench-shared-dev-t4-pool
    backend: {backend}
    gpu_type: t4
    nodes: {nodes}
    node: {{gpus: 2, cpus: 2, memory_gb: 4}}
    options: {options}
teams:
  bench: {{quota: {{t4: {{nominal: 8}}}}, members: {{bench: member}}}}
users:
  bench: {{uid: {uid}, gid: {gid}}}
scheduler: {{cycle_interval_s: 0.2}}
"""


def stamp_command(stamp: Path) -> str:
    return f"date +%s.%N > {stamp}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(jobs: int, out: Path, submit: Callable[[int, Path], None]) -> dict[str, float]:
    sent: dict[Path, float] = {}
    started = time.perf_counter()
    for i in range(jobs):
        stamp = out / f"{i}.start"
        sent[stamp] = time.time()
        submit(i, stamp)
    submit_s = time.perf_counter() - started
    wait_for(
        lambda: all(p.exists() and p.read_text().strip() for p in sent),
        timeout=60 + jobs * 5,
        what="all jobs started",
    )
    waits = [(float(p.read_text()) - t0) * 1000 for p, t0 in sent.items()]
    return {
        "jobs": jobs,
        "submits_per_s": round(jobs / submit_s, 1),
        "p50_ms": round(statistics.median(waits), 1),
        "p99_ms": round(percentile(waits, 0.99), 1),
    }


def raw_slurm(jobs: int, out: Path) -> dict[str, float]:
    prefix = f"raw-{uuid.uuid4().hex[:6]}"

    def submit(i: int, stamp: Path) -> None:
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--partition",
                "t4",
                "--gres",
                "gpu:t4:1",
                "--job-name",
                f"{prefix}-{i}",
                "--output",
                "/dev/null",
                "--wrap",
                stamp_command(stamp),
            ],
            check=True,
            capture_output=True,
        )

    return measure(jobs, out, submit)


def raw_ray(jobs: int, out: Path) -> dict[str, float]:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(RAY_ADDRESS)

    def submit(i: int, stamp: Path) -> None:
        client.submit_job(
            entrypoint=stamp_command(stamp),
            entrypoint_num_gpus=1,
            entrypoint_resources={"gpu_t4": 1},
        )

    return measure(jobs, out, submit)


def through_gpupool(engine: str, jobs: int, out: Path) -> dict[str, float]:
    if engine == "slurm":
        options = f'{{partition: t4, job_name_prefix: "gp-{uuid.uuid4().hex[:6]}-"}}'
        nodes = 2
    else:
        options = "{}"
        nodes = 1
    config = out / f"{engine}.yaml"
    config.write_text(
        CONFIG.format(
            backend=engine, nodes=nodes, options=options, uid=os.getuid(), gid=os.getgid()
        )
    )
    server = ServerProcess(out / f"home-{engine}", config)
    server.start()
    try:
        with server.client("bench") as client:

            def submit(i: int, stamp: Path) -> None:
                body = {
                    "command": ["sh", "-c", stamp_command(stamp)],
                    "resources": {"gpus": 1, "gpu_types": ["t4"]},
                }
                client.post("/v1/jobs", json=body).raise_for_status()

            return measure(jobs, out, submit)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--engines", default="slurm,ray")
    args = parser.parse_args()
    result: dict[str, object] = {"benchmark": "backends", "cpus": os.cpu_count()}
    raw_runs = {"slurm": raw_slurm, "ray": raw_ray}
    for engine in args.engines.split(","):
        subprocess.run([str(ROOT / "scripts" / engine / "up.sh")], check=True, capture_output=True)
        with tempfile.TemporaryDirectory(prefix=f"gpupool-bench-{engine}-") as tmp:
            root = Path(tmp)
            root.chmod(0o777)
            (root / "raw").mkdir()
            (root / "gpupool").mkdir()
            raw = raw_runs[engine](args.jobs, root / "raw")
            ours = through_gpupool(engine, args.jobs, root / "gpupool")
        ratio = {k: round(ours[k] / raw[k], 2) for k in ("p50_ms", "p99_ms", "submits_per_s")}
        result[engine] = {"raw": raw, "gpupool": ours, "ratio": ratio}
        if not args.json:
            print(f"{engine}: raw {raw}\n{engine}: gpupool {ours}\n{engine}: ratio {ratio}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
