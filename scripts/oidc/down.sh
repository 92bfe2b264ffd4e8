#!/usr/bin/env bash
# Stop the OIDC provider started by scripts/oidc/up.sh (only that process, by its pid file).
set -euo pipefail
. "$(dirname "$0")/../lib/stop-pidfile.sh"

if [ "$(id -u)" -eq 0 ]; then DEFAULT_ROOT=/var/lib/gpupool-oidc; else DEFAULT_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gpupool-oidc; fi
ROOT=${GPUPOOL_OIDC_ROOT:-$DEFAULT_ROOT}
stop_pidfile oidc/down.sh "$ROOT/provider.pid"
