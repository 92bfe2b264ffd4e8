#!/usr/bin/env bash
# Stop the OIDC provider started by scripts/oidc/up.sh (only that process, by its pid file).
set -euo pipefail

if [ "$(id -u)" -eq 0 ]; then DEFAULT_ROOT=/var/lib/gpupool-oidc; else DEFAULT_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gpupool-oidc; fi
ROOT=${GPUPOOL_OIDC_ROOT:-$DEFAULT_ROOT}
PIDFILE="$ROOT/provider.pid"

if [ ! -f "$PIDFILE" ]; then
    echo "oidc/down.sh: no provider started from $ROOT: nothing to stop" >&2
    exit 0
fi
PID=$(cat "$PIDFILE")
if kill -0 "$PID" 2>/dev/null; then
    kill "$PID"
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && kill -9 "$PID" 2>/dev/null || true
fi
rm -f "$PIDFILE"
echo "oidc/down.sh: stopped" >&2
