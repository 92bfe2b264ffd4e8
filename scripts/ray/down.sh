#!/usr/bin/env bash
# Stop the Ray cluster started by scripts/ray/up.sh. `ray stop` stops every Ray process of
# this host, not only ours: do not run it on a machine that runs other Ray clusters.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${GPUPOOL_VENV:-$REPO/.venv}

if [ ! -x "$VENV/bin/ray" ]; then
    echo "ray/down.sh: ray is not installed in $VENV: nothing to stop" >&2
    exit 0
fi
RAY_USAGE_STATS_ENABLED=0 "$VENV/bin/ray" stop "$@"
