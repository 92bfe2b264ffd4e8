#!/usr/bin/env bash
# Start Azurite's blob service for gpupool's Azure grant tests: HTTPS on 127.0.0.1:10000
# with a self-signed certificate made here, and OAuth (--oauth basic) so that user
# delegation keys and user-delegation SAS work. Idempotent: exits 0 at once when it already
# answers. Installs Node.js/npm (apt) and azurite (npm) when missing. See README.md here.
set -euo pipefail

DIR=${GPUPOOL_AZURITE_DIR:-/tmp/gpupool-azurite}
PORT=${GPUPOOL_AZURITE_PORT:-10000}
WAIT_S=${GPUPOOL_AZURITE_WAIT_S:-30}
# 3.37 is the first release that checks the SAS format of the current azure-storage-blob
# (service version 2026-x: delegated-user fields in the string to sign).
MIN_VERSION=3.37.0
SPEC=${GPUPOOL_AZURITE_SPEC:-azurite@^$MIN_VERSION}
URL="https://127.0.0.1:${PORT}/devstoreaccount1"

die() { echo "azurite/up.sh: $*" >&2; exit 1; }
log() { echo "azurite/up.sh: $*" >&2; }

answers() {
    # Any HTTP answer (an unauthenticated request gets 403) means the service is up.
    [ -f "$DIR/cert.pem" ] || return 1
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$DIR/cert.pem" \
        "$URL?comp=list" || true)
    [ -n "$code" ] && [ "$code" != "000" ]
}

if answers; then
    log "Azurite already answers at $URL"
    exit 0
fi

command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"
if ! command -v npm >/dev/null; then
    [ "$(id -u)" = 0 ] || die "Node.js/npm missing; install them (apt-get install nodejs npm)"
    log "installing Node.js and npm (apt)"
    apt-get update -qq >/dev/null && apt-get install -y -qq nodejs npm >/dev/null \
        || die "apt-get install nodejs npm failed"
fi
recent() {
    have=$(azurite-blob --version 2>/dev/null || echo 0)
    [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$have" | sort -V | head -1)" = "$MIN_VERSION" ]
}
if ! command -v azurite-blob >/dev/null || ! recent; then
    log "installing $SPEC (npm)"
    npm install -g --silent "$SPEC" >/dev/null 2>&1 || die "npm install -g $SPEC failed"
fi

mkdir -p "$DIR/data"
if [ ! -f "$DIR/cert.pem" ] || [ ! -f "$DIR/key.pem" ]; then
    log "making a self-signed certificate for 127.0.0.1 in $DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=127.0.0.1" \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        -keyout "$DIR/key.pem" -out "$DIR/cert.pem" >/dev/null 2>&1 \
        || die "openssl could not make a certificate"
fi

log "starting Azurite blob on :$PORT (data and log in $DIR)"
nohup azurite-blob --blobHost 127.0.0.1 --blobPort "$PORT" \
    --cert "$DIR/cert.pem" --key "$DIR/key.pem" --oauth basic \
    --location "$DIR/data" --skipApiVersionCheck --disableProductStyleUrl \
    >"$DIR/azurite.log" 2>&1 &
echo $! >"$DIR/azurite.pid"

for _ in $(seq "$WAIT_S"); do
    if answers; then
        log "Azurite answers at $URL (CA certificate: $DIR/cert.pem)"
        exit 0
    fi
    if ! kill -0 "$(cat "$DIR/azurite.pid")" 2>/dev/null; then
        tail -20 "$DIR/azurite.log" >&2
        die "Azurite exited (log: $DIR/azurite.log)"
    fi
    sleep 1
done
die "Azurite did not answer at $URL within ${WAIT_S}s (log: $DIR/azurite.log)"
