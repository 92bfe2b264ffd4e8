#!/usr/bin/env bash
# Bring up a small, real, single-host Ray cluster for gpupool's tests: a head node with 2 CPUs,
# 4 logical GPUs and per-type custom resources (gpu_h100: 2, gpu_t4: 2), Jobs API on
# http://127.0.0.1:8265. Idempotent: exits 0 at once when the Jobs API already answers.
# Installs ray[default] into .venv when it is missing. See scripts/ray/README.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${GPUPOOL_VENV:-$REPO/.venv}
RAY_SPEC=${GPUPOOL_RAY_SPEC:-'ray[default]>=2.9,<3'}
TEMP_DIR=${GPUPOOL_RAY_TEMP_DIR:-/tmp/gpupool-ray}
GCS_PORT=${GPUPOOL_RAY_PORT:-6380}
DASHBOARD_PORT=${GPUPOOL_RAY_DASHBOARD_PORT:-8265}
OBJECT_STORE_BYTES=${GPUPOOL_RAY_OBJECT_STORE_BYTES:-100000000}
WAIT_S=${GPUPOOL_RAY_WAIT_S:-90}
API="http://127.0.0.1:${DASHBOARD_PORT}/api/version"

export RAY_USAGE_STATS_ENABLED=0
# Read by each job's supervisor when it stops a job: SIGTERM, then SIGKILL after this long.
export RAY_JOB_STOP_WAIT_TIME_S=${RAY_JOB_STOP_WAIT_TIME_S:-3}

die() { echo "ray/up.sh: $*" >&2; exit 1; }
log() { echo "ray/up.sh: $*" >&2; }

api_answers() {
    "$VENV/bin/python" - "$API" <<'PY' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
}

[ -x "$VENV/bin/python" ] || die "no virtual environment at $VENV (run: make test, or python3 -m venv .venv)"

if ! "$VENV/bin/python" -c 'import ray.job_submission, aiohttp' >/dev/null 2>&1; then
    log "installing $RAY_SPEC into $VENV"
    "$VENV/bin/pip" install --quiet "$RAY_SPEC" || die "pip install '$RAY_SPEC' failed"
fi

if api_answers; then
    log "Ray Jobs API already answers at $API"
    exit 0
fi

# The Jobs API does not answer, so whatever Ray processes are left here are a head that died or
# never finished starting (a GCS left behind refuses the next start): stop them first.
"$VENV/bin/ray" stop --force >/dev/null 2>&1 || true

mkdir -p "$TEMP_DIR"
log "starting the Ray head (GCS :$GCS_PORT, dashboard :$DASHBOARD_PORT, session files in $TEMP_DIR)"
"$VENV/bin/ray" start --head \
    --port "$GCS_PORT" \
    --dashboard-host 127.0.0.1 --dashboard-port "$DASHBOARD_PORT" \
    --num-cpus 2 --num-gpus 4 \
    --resources '{"gpu_h100": 2, "gpu_t4": 2}' \
    --object-store-memory "$OBJECT_STORE_BYTES" \
    --temp-dir "$TEMP_DIR" \
    --disable-usage-stats >"$TEMP_DIR/ray-start.log" 2>&1 \
    || { tail -20 "$TEMP_DIR/ray-start.log" >&2; die "ray start failed (log: $TEMP_DIR/ray-start.log)"; }

answered=""
for _ in $(seq "$WAIT_S"); do
    if api_answers; then answered=1; break; fi
    sleep 1
done
[ -n "$answered" ] || die "the Ray Jobs API did not answer at $API within ${WAIT_S}s (log: $TEMP_DIR/ray-start.log)"
log "Ray Jobs API answers at $API; running a first job"

# A fresh head answers the API before it can run a job (its first job supervisor and worker
# start slowly on a busy machine): run one trivial job to the end, so the first test does not
# pay for the warm-up.
"$VENV/bin/python" - "http://127.0.0.1:${DASHBOARD_PORT}" "$WAIT_S" <<'PY' >&2 \
    || die "the first Ray job did not succeed within ${WAIT_S}s (logs: $TEMP_DIR/session_latest/logs)"
import sys, time
from ray.job_submission import JobStatus, JobSubmissionClient
client = JobSubmissionClient(sys.argv[1])
job = client.submit_job(entrypoint="true")
deadline = time.monotonic() + float(sys.argv[2])
while (status := client.get_job_status(job)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
    if time.monotonic() > deadline:
        sys.exit(f"warm-up job {job} still {status}")
    time.sleep(0.5)
sys.exit(0 if status == JobStatus.SUCCEEDED else f"warm-up job {job} ended {status}")
PY
log "Ray is ready"
