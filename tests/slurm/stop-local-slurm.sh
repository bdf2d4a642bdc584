#!/bin/bash
# tests/slurm/stop-local-slurm.sh — stop the private Slurm cluster that start-local-slurm.sh started.
# Only the processes named in its pid files (and checked by name) are signalled: SIGTERM, then
# SIGKILL after 20 s. Jobs still queued or running on the private cluster are cancelled first, so no
# slurmstepd or job processes are left behind. Safe to call when nothing is running.
#
# Parameters (environment):
#   SLURM_LOCAL_DIR   the directory given to start-local-slurm.sh (default ${TMPDIR:-/tmp}/dtrain-slurm/run)
# Exit code: 0 (stopping is best effort; what could not be stopped is reported on stderr).
set -uo pipefail  # no -e on purpose: stopping is best effort, every step runs even if one fails

BASE=${SLURM_LOCAL_DIR:-${TMPDIR:-/tmp}/dtrain-slurm/run}
export SLURM_CONF=$BASE/etc/slurm.conf

log() { echo "stop-local-slurm: $*" >&2; }

# pid_of NAME PIDFILE -> prints pid if the pid file names a live process NAME
pid_of() {
    local pid
    [ -s "$2" ] || return 1
    pid=$(cat "$2" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 1
    echo "$pid"
}

# stop NAME:PIDFILE... : SIGTERM all of them, wait up to 20 s, then SIGKILL
stop() {
    local spec name file pid i left
    local -a names=() pids=()
    for spec in "$@"; do
        name=${spec%%:*} file=${spec#*:}
        if pid=$(pid_of "$name" "$file"); then
            kill -TERM "$pid" 2>/dev/null
            names+=("$name") pids+=("$pid")
        else
            log "$name not running"
        fi
        rm -f "$file"
    done
    for ((i = 0; i < 100; i++)); do
        left=0
        for pid in "${pids[@]}"; do [ -d "/proc/$pid" ] && left=1; done
        [ $left = 0 ] && break
        sleep 0.2
    done
    for i in "${!pids[@]}"; do
        pid=${pids[$i]} name=${names[$i]}
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
            log "$name (pid $pid) ignored SIGTERM for 20 s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
        fi
        log "$name (pid $pid) stopped"
    done
}

# cancel every job of this private cluster while the daemons are still up
if pid_of slurmctld "$BASE/slurmctld.pid" >/dev/null && [ -f "$SLURM_CONF" ]; then
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs: $jobs"
        scancel $jobs 2>/dev/null
        for ((i = 0; i < 150; i++)); do
            [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
fi

stop "slurmd:$BASE/slurmd.pid" "slurmctld:$BASE/slurmctld.pid"
stop "munged:$BASE/munge/munged.pid"
