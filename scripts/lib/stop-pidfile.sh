#!/usr/bin/env bash
# stop_pidfile NAME PIDFILE: stop the one process whose pid PIDFILE holds (SIGTERM, then
# SIGKILL after 5 s) and remove the file. Used by the test services' down.sh scripts, which
# must never stop a process they did not start.
stop_pidfile() {
    local name=$1 pidfile=$2 pid
    if [ ! -f "$pidfile" ]; then
        echo "$name: no $pidfile: nothing to stop" >&2
        return 0
    fi
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 20); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    echo "$name: stopped" >&2
}
