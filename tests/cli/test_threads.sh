#!/usr/bin/env bash
# tests/cli/test_threads.sh — OpenMP threads against the node's cores (train/trainer.cpp
# set_threads): the node's first rank warns, once, when its CPU ranks together start more
# threads than the node has cores; the default (--threads 0) never does.
#   1. --dry-run, 2 workers × --threads N (N: the node's cores): the warning with 2N threads;
#   2. --dry-run, the same with the default threads: no warning;
#   3. async, 1 ps × --ps-threads N + 2 workers on their default share: the warning names both;
#   4. a real run, 1 worker × --threads 2N: the warning at start, and the run still finishes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cores=$("$PY" -c 'import os; print(os.cpu_count())')  # as std::thread::hardware_concurrency
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
warned dry_over "start $((2 * cores)) OpenMP threads (2 worker(s) × --threads $cores) on its $cores core(s)"

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
echo "PASS"
