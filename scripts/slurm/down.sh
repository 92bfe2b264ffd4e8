#!/usr/bin/env bash
# Stop the test cluster started by scripts/slurm/up.sh: slurmd daemons, then slurmctld.
# Leaves munged, the configuration and the controller's saved state (jobs) in place, so that
# up.sh brings the same cluster back. Idempotent.
set -euo pipefail
ROOT=${GPUPOOL_SLURM_ROOT:-/var/lib/gpupool-slurm}

stop() {
    local pidfile=$1 pid
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    kill -TERM "$pid"
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
        sleep 0.1
    done
    echo "slurm/down.sh: $pidfile ($pid) ignored SIGTERM for 10s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

for pidfile in "$ROOT"/run/slurmd-*.pid; do
    [ -e "$pidfile" ] && stop "$pidfile"
done
stop "$ROOT/run/slurmctld.pid"
echo "slurm/down.sh: stopped" >&2
