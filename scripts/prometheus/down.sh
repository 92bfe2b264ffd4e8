#!/usr/bin/env bash
# Stop the Prometheus started by scripts/prometheus/up.sh (only that process, by its pid file).
set -euo pipefail
. "$(dirname "$0")/../lib/stop-pidfile.sh"

if [ "$(id -u)" -eq 0 ]; then DEFAULT_ROOT=/var/lib/gpupool-prometheus; else DEFAULT_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gpupool-prometheus; fi
ROOT=${GPUPOOL_PROMETHEUS_ROOT:-$DEFAULT_ROOT}
stop_pidfile prometheus/down.sh "$ROOT/prometheus.pid"
