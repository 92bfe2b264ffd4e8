#!/usr/bin/env bash
# Bring up a real single-host Slurm cluster for gpupool's tests: munged, slurmctld and two
# slurmd daemons on this machine, each node declaring fake GPUs (gpu:h100:2,gpu:t4:2) backed
# by character devices we create. Idempotent: exits 0 at once when the cluster is already up
# with this configuration. Must run as root. See scripts/slurm/README.md.
set -euo pipefail

ROOT=${GPUPOOL_SLURM_ROOT:-/var/lib/gpupool-slurm}
CONF_DIR=/etc/slurm
MARKER="# Managed by gpupool scripts/slurm/up.sh: rerun it instead of editing this file."
NODES=(gpupool-n1 gpupool-n2)
CTLD_PORT=16817
NODE_PORT_BASE=16818
WAIT_S=${GPUPOOL_SLURM_WAIT_S:-60}

die() { echo "slurm/up.sh: $*" >&2; exit 1; }
log() { echo "slurm/up.sh: $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts daemons)"

install_packages() {
    local missing=()
    for bin in slurmctld slurmd sbatch munged; do
        command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing slurm and munge (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    # Without an index apt cannot find the packages; refresh it once, then retry.
    if ! apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge \
        >/dev/null 2>&1; then
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge \
            >/dev/null || die "apt-get install slurmctld slurmd slurm-client munge failed"
    fi
}

start_munge() {
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged --force >/dev/null 2>&1 || true
        for _ in $(seq 50); do
            munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
            sleep 0.1
        done
        die "munged does not answer (see /var/log/munge/munged.log)"
    fi
}

make_devices() {
    # Fake NVIDIA devices (char major 195, as the real driver's): Slurm only needs the files to
    # exist; nothing opens them. Four per node: nodes share no device file.
    local i
    for i in $(seq 0 $((4 * ${#NODES[@]} - 1))); do
        [ -e "/dev/gpupool-fake-nvidia$i" ] || mknod -m 0666 "/dev/gpupool-fake-nvidia$i" c 195 "$i"
    done
}

render_slurm_conf() {
    local host; host=$(hostname -s)
    cat <<CONF
$MARKER
ClusterName=gpupool
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$ROOT/ctld
SlurmdSpoolDir=$ROOT/spool/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd-%n.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd-%n.log
# No cgroups in containers and VMs without a delegated hierarchy: track processes by parent pid.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
# The nodes declare more CPUs, memory and GPUs than this machine has: register them anyway.
SlurmdParameters=config_overrides
ReturnToService=2
# Jobs are scheduled at submit time; the periodic passes only matter for queued jobs.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2,sched_min_interval=100000
KillWait=5
MinJobAge=300
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
SlurmctldDebug=info
SlurmdDebug=info
CONF
    local i=0 node
    for node in "${NODES[@]}"; do
        echo "NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 Port=$((NODE_PORT_BASE + i))" \
            "CPUs=8 RealMemory=16000 Gres=gpu:h100:2,gpu:t4:2 State=UNKNOWN"
        i=$((i + 1))
    done
    local all; all=$(IFS=,; echo "${NODES[*]}")
    echo "PartitionName=h100 Nodes=$all Default=YES MaxTime=INFINITE State=UP"
    echo "PartitionName=t4 Nodes=$all MaxTime=INFINITE State=UP"
}

render_gres_conf() {
    echo "$MARKER"
    echo "AutoDetect=off"
    local i=0 node
    for node in "${NODES[@]}"; do
        echo "NodeName=$node Name=gpu Type=h100 File=/dev/gpupool-fake-nvidia[$((i)),$((i + 1))]"
        echo "NodeName=$node Name=gpu Type=t4 File=/dev/gpupool-fake-nvidia[$((i + 2)),$((i + 3))]"
        i=$((i + 4))
    done
}

# Writes $1 from stdin unless it already has that content; fails on a file we do not own.
# Prints "changed" when it wrote.
write_conf() {
    local path=$1 tmp; tmp=$(mktemp)
    cat >"$tmp"
    if [ -e "$path" ] && ! grep -qxF "$MARKER" "$path"; then
        rm -f "$tmp"
        die "$path exists and was not written by gpupool: refusing to replace a real cluster's config"
    fi
    if [ -e "$path" ] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"
        return 0
    fi
    install -m 0644 "$tmp" "$path"
    rm -f "$tmp"
    echo changed
}

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

cluster_idle() {
    # Every node idle (or mixed/allocated: up and usable), none down or drained.
    local states
    states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u) || return 1
    [ -n "$states" ] || return 1
    ! echo "$states" | grep -vqE ' (idle|mix|alloc)$'
}

install_packages
start_munge
make_devices
mkdir -p "$CONF_DIR" "$ROOT"/{ctld,spool,run,log}
changed=$(render_slurm_conf | write_conf "$CONF_DIR/slurm.conf")
changed+=$(render_gres_conf | write_conf "$CONF_DIR/gres.conf")

if [ -n "$changed" ]; then
    log "configuration changed: (re)starting slurmctld and slurmd with a clean state"
    bash "$(dirname "$0")/down.sh" >/dev/null 2>&1 || true
    rm -rf "${ROOT:?}/ctld"/*
fi

if ! running "$ROOT/run/slurmctld.pid"; then
    slurmctld || die "slurmctld failed to start (see $ROOT/log/slurmctld.log)"
fi
for node in "${NODES[@]}"; do
    mkdir -p "$ROOT/spool/$node"
    if ! running "$ROOT/run/slurmd-$node.pid"; then
        slurmd -N "$node" || die "slurmd -N $node failed to start (see $ROOT/log/slurmd-$node.log)"
    fi
done

deadline=$((SECONDS + WAIT_S))
until cluster_idle; do
    if [ $SECONDS -ge $deadline ]; then
        sinfo -N >&2 || true
        die "nodes not idle after ${WAIT_S}s (see $ROOT/log/)"
    fi
    # A node that registered while the controller thought it down may stay so: resume it.
    for node in $(sinfo -h -N -t down,drain -o '%N' 2>/dev/null | sort -u); do
        scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    done
    sleep 0.5
done
log "cluster up: $(sinfo -h -o '%P %D %t %G' | tr '\n' ';')"
