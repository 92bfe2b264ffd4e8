#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver for gpupool's browser tests (tests/e2e/
# test_e2e_dashboard.py drives them with Selenium). Idempotent: exits 0 at once when both are
# installed. Installing needs root (apt-get update, then apt-get install chromium
# chromium-driver). Prints two lines for callers:
#   chromium=<path of the browser>
#   chromedriver=<path of the driver>
# See scripts/chromium/README.md.
set -euo pipefail

die() { echo "chromium/up.sh: $*" >&2; exit 1; }
log() { echo "chromium/up.sh: $*" >&2; }

found() {
    BROWSER=$(command -v chromium || command -v chromium-browser || true)
    DRIVER=$(command -v chromedriver || true)
    [ -n "$BROWSER" ] && [ -n "$DRIVER" ]
}

if ! found; then
    [ "$(id -u)" -eq 0 ] || die "chromium and chromium-driver are missing; install them (apt-get install chromium chromium-driver) or run as root"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install Chromium and its chromedriver (same version) by hand"
    log "installing chromium and chromium-driver (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed (is a Debian mirror reachable?)"
    apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null \
        || die "apt-get install chromium chromium-driver failed"
    found || die "chromium or chromedriver still missing after apt-get install"
fi

# The driver must answer; the browser's major version must be the driver's.
driver_version=$("$DRIVER" --version 2>/dev/null | awk '{print $2}') || die "$DRIVER does not run"
browser_version=$("$BROWSER" --version 2>/dev/null | grep -oE '[0-9]+(\.[0-9]+)+' | head -1) \
    || die "$BROWSER does not run"
[ "${driver_version%%.*}" = "${browser_version%%.*}" ] \
    || die "chromedriver $driver_version does not drive chromium $browser_version; install matching packages"
echo "chromium=$BROWSER"
echo "chromedriver=$DRIVER"
