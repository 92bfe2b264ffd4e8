#!/usr/bin/env bash
# Start a real, local OpenID Connect provider for gpupool's tests: oauth2-mock-server (npm)
# driven by scripts/oidc/provider.mjs, issuer http://127.0.0.1:$GPUPOOL_OIDC_PORT (18443).
# Idempotent: exits 0 at once when the provider already answers and runs this provider.mjs
# (one started from another version of it is replaced). Installs node/npm (apt) and
# the npm package when missing. Prints three lines for callers:
#   issuer=<issuer URL>
#   users=<the users file: {"<name>": {"password": "...", "groups": [...]}}, re-read per token>
#   clients=<the clients file: {"<client_id>": {"interval": s, "expires_in": s}}, device flow>
# See scripts/oidc/README.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$(id -u)" -eq 0 ]; then DEFAULT_ROOT=/var/lib/gpupool-oidc; else DEFAULT_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gpupool-oidc; fi
ROOT=${GPUPOOL_OIDC_ROOT:-$DEFAULT_ROOT}
PORT=${GPUPOOL_OIDC_PORT:-18443}
AUDIENCE=${GPUPOOL_OIDC_AUDIENCE:-gpupool}
PACKAGE=${GPUPOOL_OIDC_PACKAGE:-oauth2-mock-server@8.2.3}
WAIT_S=${GPUPOOL_OIDC_WAIT_S:-30}
ISSUER="http://127.0.0.1:${PORT}"
USERS="$ROOT/users.json"
CLIENTS="$ROOT/clients.json"

die() { echo "oidc/up.sh: $*" >&2; exit 1; }
log() { echo "oidc/up.sh: $*" >&2; }

answers() {
    local doc
    doc=$(curl -fsS --max-time 2 "$ISSUER/.well-known/openid-configuration" 2>/dev/null) || return 1
    [[ $doc == *"\"issuer\":\"$ISSUER\""* && $doc == *'"device_authorization_endpoint"'* ]]
}

report() { echo "issuer=$ISSUER"; echo "users=$USERS"; echo "clients=$CLIENTS"; }

mkdir -p "$ROOT"
[ -f "$USERS" ] || echo '{}' > "$USERS"
[ -f "$CLIENTS" ] || echo '{}' > "$CLIENTS"

if answers && cmp -s "$HERE/provider.mjs" "$ROOT/provider.mjs"; then
    log "provider already answers at $ISSUER"
    report
    exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || die "node and npm are missing; install them (apt-get install nodejs npm) or run as root"
    log "installing nodejs and npm"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends nodejs npm >/dev/null 2>&1; then
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends nodejs npm >/dev/null \
            || die "apt-get install nodejs npm failed"
    fi
fi
command -v curl >/dev/null 2>&1 || die "curl is missing (apt-get install curl)"

if [ ! -f "$ROOT/node_modules/oauth2-mock-server/package.json" ]; then
    log "installing $PACKAGE into $ROOT"
    [ -f "$ROOT/package.json" ] || echo '{"name": "gpupool-oidc", "private": true}' > "$ROOT/package.json"
    (cd "$ROOT" && npm install --no-audit --no-fund --silent "$PACKAGE" >/dev/null) \
        || die "npm install $PACKAGE failed (is the npm registry reachable?)"
fi
# ESM resolves packages next to the importing file: run the script from $ROOT.
cp "$HERE/provider.mjs" "$ROOT/provider.mjs"

if [ -f "$ROOT/provider.pid" ] && kill -0 "$(cat "$ROOT/provider.pid")" 2>/dev/null; then
    log "a provider process runs but does not answer, or runs another provider.mjs; restarting it"
    kill "$(cat "$ROOT/provider.pid")" 2>/dev/null || true
    sleep 0.5
fi

log "starting the provider at $ISSUER (log: $ROOT/provider.log)"
GPUPOOL_OIDC_PORT=$PORT GPUPOOL_OIDC_AUDIENCE=$AUDIENCE GPUPOOL_OIDC_USERS=$USERS \
    GPUPOOL_OIDC_CLIENTS=$CLIENTS \
    nohup node "$ROOT/provider.mjs" >"$ROOT/provider.log" 2>&1 </dev/null &
echo $! > "$ROOT/provider.pid"

for _ in $(seq $((WAIT_S * 10))); do
    if answers; then report; exit 0; fi
    kill -0 "$(cat "$ROOT/provider.pid")" 2>/dev/null \
        || die "the provider exited: $(tail -5 "$ROOT/provider.log")"
    sleep 0.1
done
die "the provider did not answer within ${WAIT_S}s: $(tail -5 "$ROOT/provider.log")"
