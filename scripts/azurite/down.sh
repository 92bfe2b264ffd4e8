#!/usr/bin/env bash
# Stop the Azurite started by scripts/azurite/up.sh (only that process, by its pid file).
set -euo pipefail
. "$(dirname "$0")/../lib/stop-pidfile.sh"

DIR=${GPUPOOL_AZURITE_DIR:-/tmp/gpupool-azurite}
stop_pidfile azurite/down.sh "$DIR/azurite.pid"
