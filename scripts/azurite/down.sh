#!/usr/bin/env bash
# Stop the Azurite started by scripts/azurite/up.sh (only that process, by its pid file).
set -euo pipefail

DIR=${GPUPOOL_AZURITE_DIR:-/tmp/gpupool-azurite}
PIDFILE="$DIR/azurite.pid"

if [ ! -f "$PIDFILE" ]; then
    echo "azurite/down.sh: no $PIDFILE: nothing to stop" >&2
    exit 0
fi
pid=$(cat "$PIDFILE")
if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 20); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
fi
rm -f "$PIDFILE"
echo "azurite/down.sh: stopped" >&2
