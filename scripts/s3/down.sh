#!/usr/bin/env bash
# Stop the S3 server started by scripts/s3/up.sh (only that process, by its pid file).
set -euo pipefail

DIR=${GPUPOOL_S3_DIR:-/tmp/gpupool-s3}
PIDFILE="$DIR/moto.pid"

if [ ! -f "$PIDFILE" ]; then
    echo "s3/down.sh: no $PIDFILE: nothing to stop" >&2
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
echo "s3/down.sh: stopped" >&2
