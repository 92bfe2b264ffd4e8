#!/usr/bin/env bash
# Make this machine run gpupool's container tests: podman with the runc runtime, a
# containers.conf drop-in without default ulimits, fake GPU device files, and the test image
# localhost/gpupool-test/busybox:1 built from busybox-static with `podman import` (no registry
# is reached). Idempotent: about 0.3 s when everything is in place. Must run as root.
# See scripts/podman/README.md.
set -euo pipefail

IMAGE=${GPUPOOL_TEST_IMAGE:-localhost/gpupool-test/busybox:1}
CONF=/etc/containers/containers.conf.d/50-gpupool.conf
MARKER="# Managed by gpupool scripts/podman/up.sh: rerun it instead of editing this file."
FAKE_GPUS=8

die() { echo "podman/up.sh: $*" >&2; exit 1; }
log() { echo "podman/up.sh: $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and builds an image)"

install_packages() {
    local missing=()
    command -v podman >/dev/null 2>&1 || missing+=(podman)
    command -v runc >/dev/null 2>&1 || missing+=(runc)
    [ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx sh || missing+=(busybox-static)
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends podman runc busybox-static >/dev/null \
        || die "apt-get install podman runc busybox-static failed"
}

configure() {
    # runc: Debian's default crun refuses hosts with hybrid (v1) cgroups. No default ulimits:
    # the defaults (nproc, nofile) cannot be raised inside unprivileged sandboxes.
    mkdir -p "$(dirname "$CONF")"
    local want
    want=$(printf '%s\n[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' "$MARKER")
    if [ -e "$CONF" ] && [ "$(cat "$CONF")" = "$want" ]; then
        return 0
    fi
    [ -e "$CONF" ] && ! grep -qxF "$MARKER" "$CONF" && die "$CONF exists and was not written by gpupool"
    printf '%s\n' "$want" >"$CONF"
}

make_devices() {
    # Fake NVIDIA devices (char major 195, as the real driver's), shared with scripts/slurm.
    local i
    for i in $(seq 0 $((FAKE_GPUS - 1))); do
        [ -e "/dev/gpupool-fake-nvidia$i" ] || mknod -m 0666 "/dev/gpupool-fake-nvidia$i" c 195 "$i"
    done
}

build_image() {
    podman image exists "$IMAGE" && return 0
    log "building $IMAGE from busybox-static"
    local dir; dir=$(mktemp -d)
    trap 'rm -rf "$dir"' RETURN
    mkdir -p "$dir/root/bin" "$dir/root/tmp" "$dir/root/etc" "$dir/root/proc" "$dir/root/sys" "$dir/root/dev"
    chmod 1777 "$dir/root/tmp"
    cp /bin/busybox "$dir/root/bin/busybox"
    local applet
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -s busybox "$dir/root/bin/$applet"
    done
    tar -C "$dir/root" -cf "$dir/rootfs.tar" .
    podman import --quiet --change 'ENV PATH=/bin' --change 'CMD ["/bin/sh"]' "$dir/rootfs.tar" "$IMAGE" >/dev/null \
        || die "podman import failed"
}

check() {
    local out
    out=$(podman run --rm --network none "$IMAGE" /bin/sh -c 'echo ok' 2>&1) \
        || die "podman cannot run a container: $out"
    [ "$out" = ok ] || die "unexpected output of a test container: $out"
}

install_packages
configure
make_devices
build_image
check
