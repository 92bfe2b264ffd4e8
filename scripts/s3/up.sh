#!/usr/bin/env bash
# Start an S3-compatible server for gpupool's S3 grant tests: moto's server (PyPI
# moto[server]) on http://127.0.0.1:5900. Idempotent: exits 0 at once when it already
# answers. Installs moto[server] into .venv when missing. See README.md here: moto serves
# presigned GETs and POST uploads but does not verify their signatures.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${GPUPOOL_VENV:-$REPO/.venv}
DIR=${GPUPOOL_S3_DIR:-/tmp/gpupool-s3}
PORT=${GPUPOOL_S3_PORT:-5900}
WAIT_S=${GPUPOOL_S3_WAIT_S:-30}
SPEC=${GPUPOOL_MOTO_SPEC:-'moto[server]>=5,<6'}
URL="http://127.0.0.1:${PORT}"

die() { echo "s3/up.sh: $*" >&2; exit 1; }
log() { echo "s3/up.sh: $*" >&2; }

answers() {
    curl -s -o /dev/null --max-time 2 "$URL/moto-api/"
}

[ -x "$VENV/bin/python" ] || die "no virtual environment at $VENV (run: make test)"
if answers; then
    log "S3 server already answers at $URL"
    exit 0
fi
command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
if [ ! -x "$VENV/bin/moto_server" ]; then
    log "installing $SPEC into $VENV"
    "$VENV/bin/pip" install --quiet "$SPEC" || die "pip install '$SPEC' failed"
fi

mkdir -p "$DIR"
log "starting moto's S3 server on :$PORT (log in $DIR)"
nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" \
    >"$DIR/moto.log" 2>&1 &
echo $! >"$DIR/moto.pid"

for _ in $(seq "$WAIT_S"); do
    if answers; then
        log "S3 server answers at $URL"
        exit 0
    fi
    if ! kill -0 "$(cat "$DIR/moto.pid")" 2>/dev/null; then
        tail -20 "$DIR/moto.log" >&2
        die "moto_server exited (log: $DIR/moto.log)"
    fi
    sleep 1
done
die "the S3 server did not answer at $URL within ${WAIT_S}s (log: $DIR/moto.log)"
