#!/usr/bin/env bash
# Start a real Prometheus for gpupool's metrics tests, at http://127.0.0.1:$GPUPOOL_PROMETHEUS_PORT
# (19090), scraping every 1 s the targets listed in a file-discovery file that the tests
# rewrite (targets=<file>: [{"targets": ["127.0.0.1:PORT"], "labels": {...}}]); Prometheus
# picks up a change within a second. Idempotent: exits 0 at once when it already answers.
# Installs Debian's prometheus package (apt, as root) when missing; promtool comes with it.
# Prints two lines for callers:
#   url=<Prometheus URL>
#   targets=<the file-discovery file>
# See scripts/prometheus/README.md.
set -euo pipefail

if [ "$(id -u)" -eq 0 ]; then DEFAULT_ROOT=/var/lib/gpupool-prometheus; else DEFAULT_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gpupool-prometheus; fi
ROOT=${GPUPOOL_PROMETHEUS_ROOT:-$DEFAULT_ROOT}
PORT=${GPUPOOL_PROMETHEUS_PORT:-19090}
WAIT_S=${GPUPOOL_PROMETHEUS_WAIT_S:-30}
URL="http://127.0.0.1:${PORT}"
TARGETS="$ROOT/targets.json"

die() { echo "prometheus/up.sh: $*" >&2; exit 1; }
log() { echo "prometheus/up.sh: $*" >&2; }

answers() { curl -fsS --max-time 2 "$URL/-/ready" >/dev/null 2>&1; }

report() { echo "url=$URL"; echo "targets=$TARGETS"; }

mkdir -p "$ROOT/data"
[ -f "$TARGETS" ] || echo '[]' > "$TARGETS"

if answers; then
    log "Prometheus already answers at $URL"
    report
    exit 0
fi

command -v curl >/dev/null 2>&1 || die "curl is missing (apt-get install curl)"
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || die "prometheus is missing; install it (apt-get install prometheus) or run as root"
    log "installing prometheus (apt)"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; then
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends prometheus >/dev/null \
            || die "apt-get install prometheus failed"
    fi
fi

cat > "$ROOT/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpupool
    file_sd_configs:
      - files: ["$TARGETS"]
        refresh_interval: 1s
YAML

if [ -f "$ROOT/prometheus.pid" ] && kill -0 "$(cat "$ROOT/prometheus.pid")" 2>/dev/null; then
    log "a Prometheus process runs but does not answer; restarting it"
    kill "$(cat "$ROOT/prometheus.pid")" 2>/dev/null || true
    sleep 1
fi

log "starting Prometheus at $URL (log: $ROOT/prometheus.log)"
nohup prometheus --config.file="$ROOT/prometheus.yml" --storage.tsdb.path="$ROOT/data" \
    --storage.tsdb.retention.time=1d --web.listen-address="127.0.0.1:$PORT" \
    --web.enable-lifecycle >"$ROOT/prometheus.log" 2>&1 </dev/null &
echo $! > "$ROOT/prometheus.pid"

for _ in $(seq $((WAIT_S * 10))); do
    if answers; then report; exit 0; fi
    kill -0 "$(cat "$ROOT/prometheus.pid")" 2>/dev/null \
        || die "Prometheus exited: $(tail -5 "$ROOT/prometheus.log")"
    sleep 0.1
done
die "Prometheus did not answer within ${WAIT_S}s: $(tail -5 "$ROOT/prometheus.log")"
