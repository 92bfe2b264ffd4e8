#!/usr/bin/env bash
# Stop the S3 server started by scripts/s3/up.sh (only that process, by its pid file).
set -euo pipefail
. "$(dirname "$0")/../lib/stop-pidfile.sh"

DIR=${GPUPOOL_S3_DIR:-/tmp/gpupool-s3}
stop_pidfile s3/down.sh "$DIR/moto.pid"
