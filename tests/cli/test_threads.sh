#!/usr/bin/env bash
# tests/cli/test_threads.sh — OpenMP threads against the node's CPUs (train/trainer.cpp
# set_threads; Cluster::node_cpus, the CPUs the node's ranks may run on together): the node's
# first rank warns, once, when its CPU ranks together start more threads than those CPUs; the
# default (--threads 0) never does.
#   1. --dry-run, 2 workers × --threads N (N: the node's cores): the warning with 2N threads;
#   2. --dry-run, the same with the default threads: no warning;
#   3. async, 1 ps × --ps-threads N + 2 workers on their default share: the warning names both;
#   4. a real run, 1 worker × --threads 2N: the warning at start, and the run still finishes;
#   5. the ranks given one CPU of the N (taskset, as a Slurm allocation or a cgroup cpuset on a
#      shared node gives a job fewer CPUs than the node has): 1 worker × --threads 2 is warned
#      about with 1 CPU, not N.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cores=$("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))')  # the CPUs the ranks may use
make_data train 128 --seed 3
write_job "$SCRATCH/job.ini"
WARN="this node's ranks start"
# launch NAME NP ARGS...: dtrain on NP ranks (unbound), its output in $SCRATCH/NAME.log.
# (Not common.sh's run: that one leaves Open MPI's binding, which this test must not have.)
launch() {
  local name=$1 np=$2
  shift 2
  timeout 300 "$MPIEXEC" --bind-to none -n "$np" "$DTRAIN" --config "$SCRATCH/job.ini" \
    --train-data "$SCRATCH/train.h5" --summaries false --run-dir "$SCRATCH/$name" "$@" \
    >"$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "run $name failed"; }
}
# warned NAME TEXT: the warning stands exactly once in NAME's log, with TEXT in it.
warned() {
  local n
  n=$(grep -c "$WARN" "$SCRATCH/$1.log" || true)
  [[ $n == 1 ]] || { cat "$SCRATCH/$1.log"; fail "$1: want the threads warning once, got $n"; }
  grep "$WARN" "$SCRATCH/$1.log" | grep -qF -- "$2" ||
    { grep "$WARN" "$SCRATCH/$1.log"; fail "$1: the warning does not say '$2'"; }
  echo "   $(grep "$WARN" "$SCRATCH/$1.log" | sed 's/.*\] //' | cut -c1-110)…"
}

echo "== 1. --dry-run, 2 workers x --threads $cores on $cores core(s): warned"
launch dry_over 2 --mode sync --num-ps 0 --threads "$cores" --dry-run
warned dry_over "start $((2 * cores)) OpenMP threads (2 worker(s) × --threads $cores) on the $cores CPU(s) they may run on"

echo "== 2. --dry-run, the default threads: no warning"
launch dry_default 2 --mode sync --num-ps 0 --dry-run
! grep -q "$WARN" "$SCRATCH/dry_default.log" || { cat "$SCRATCH/dry_default.log"; fail "default threads warned"; }

echo "== 3. async, 1 ps x --ps-threads $cores + 2 workers: the warning names both"
launch dry_ps 3 --mode async --num-ps 1 --ps-threads "$cores" --dry-run
warned dry_ps "2 worker(s) × --threads 0"
warned dry_ps "+ 1 ps × --ps-threads $cores"

echo "== 4. a real run, 1 worker x --threads $((2 * cores)): warned at start, finishes"
launch train_over 1 --mode sync --num-ps 0 --threads "$((2 * cores))" --max-steps 2
warned train_over "start $((2 * cores)) OpenMP threads (1 worker(s) × --threads $((2 * cores)))"
[[ -f $SCRATCH/train_over/results.json ]] || fail "the oversubscribed run wrote no results.json"

echo "== 5. the ranks on 1 CPU of $cores (taskset -c CPU): --threads 2 warned about 1 CPU"
if [[ $cores -lt 2 ]] || ! command -v taskset >/dev/null; then
  echo "   (skipped: needs 2 CPUs and taskset)"
else
  cpu=$("$PY" -c 'import os; print(min(os.sched_getaffinity(0)))')
  timeout 300 taskset -c "$cpu" "$MPIEXEC" --bind-to none -n 1 "$DTRAIN" --config "$SCRATCH/job.ini" \
    --train-data "$SCRATCH/train.h5" --summaries false --run-dir "$SCRATCH/one_cpu" --mode sync \
    --num-ps 0 --threads 2 --dry-run >"$SCRATCH/one_cpu.log" 2>&1 ||
    { cat "$SCRATCH/one_cpu.log"; fail "run one_cpu failed"; }
  warned one_cpu "start 2 OpenMP threads (1 worker(s) × --threads 2) on the 1 CPU(s) they may run on"
fi
echo "PASS"
