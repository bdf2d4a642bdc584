#!/usr/bin/env bash
# tests/cli/test_faults_shared_memory.sh — a rank that can neither make nor map memory shared on
# its node (DTRAIN_FAULT=no-shared-memory:R, include/dtrain/core/fault.hpp: SharedRing::create
# throws and SharedRing::open fails on world rank R, as where memfd_create is refused or another
# process's /proc/PID/fd cannot be opened), the tiny CNN:
#   1. sync, 10 steps, --allreduce auto (the CPU default, hierarchical): the job warns once that
#      it sums with MPI_Allreduce and why (naming the rank), trains, results.json says "mpi", and
#      the checkpoint is bit-identical to an --allreduce mpi run's; with the fault on the node's
#      leader (worker 0, which makes the segment) the warning names it and memfd_create; in a
#      pipeline where one stage falls back, results.json says "hierarchical+mpi";
#   2. sync, --allreduce hierarchical: one error on every rank naming the worker that cannot share
#      and the way out (--allreduce mpi), a non-zero exit within the deadline, no checkpoint and
#      no config.ini: the same --run-dir then trains with --allreduce mpi;
#   3. async, 1 ps + 2 workers (--ps-shm, the default), 40 steps: worker 1 alone warns that it
#      cannot map the ps's ring and pushes as MPI messages, the run trains, and some but not all
#      pushes took the ring (results.json ps_shared_ring_pushes); with the fault on the ps (which
#      makes the rings) it warns once per worker, no worker tries to map one, and no push takes
#      a ring.
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 320 --seed 41
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --checkpoint-every 10
        --summaries false)

# run DIR NP [ARGS...]: one run that must succeed, DTRAIN_FAULT as the caller's environment has it.
run() {
  local dir=$1 np=$2
  shift 2
  timeout 120 "$MPIEXEC" -n "$np" -x DTRAIN_FAULT "$DTRAIN" "${COMMON[@]}" --run-dir "$dir" "$@" \
    >"$dir.log" 2>&1 || { cat "$dir.log"; fail "$dir: the run failed"; }
}

echo "== 1. sync, --allreduce auto: falls back to MPI_Allreduce, the same bits as --allreduce mpi"
DTRAIN_FAULT= run "$SCRATCH/mpi" 2 --mode sync --num-ps 0 --allreduce mpi --max-steps 10
DTRAIN_FAULT=no-shared-memory:1 run "$SCRATCH/auto" 2 --mode sync --num-ps 0 --max-steps 10
NAMED="worker 1 (world rank 1) cannot share its node's memory: open /proc/.*no-shared-memory"
grep -q "allreduce auto: summing with MPI_Allreduce, not hierarchically: .*$NAMED" \
  "$SCRATCH/auto.log" || { cat "$SCRATCH/auto.log"; fail "no fallback warning naming worker 1"; }
(($(grep -c "summing with MPI_Allreduce, not hierarchically" "$SCRATCH/auto.log") == 1)) ||
  fail "the fallback warning is not printed exactly once"
[[ $(json_get "$SCRATCH/auto/results.json" allreduce) == mpi ]] ||
  fail "results.json allreduce is not mpi after the fallback"
"$PY" - "$SCRATCH/mpi" "$SCRATCH/auto" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(f"{d}/ckpt-0000000010.h5", "r")["params"][()] for d in sys.argv[1:])
assert np.array_equal(a, b), "the fallback run's parameters differ from --allreduce mpi's"
PY
DTRAIN_FAULT=no-shared-memory:0 run "$SCRATCH/leader" 2 --mode sync --num-ps 0 --max-steps 10
LEADER="worker 0 (world rank 0) cannot share its node's memory: memfd_create refused by DTRAIN_FAULT"
grep -q "summing with MPI_Allreduce, not hierarchically: .*$LEADER" "$SCRATCH/leader.log" ||
  { cat "$SCRATCH/leader.log"; fail "no fallback warning naming the leader, worker 0"; }
[[ $(json_get "$SCRATCH/leader/results.json" allreduce) == mpi ]] ||
  fail "results.json allreduce is not mpi after the leader's fallback"

# A pipeline (2 stages x 2 replicas): stage 0 (world ranks 1 and 3) falls back, stage 1 does not;
# results.json names both algorithms, not the chief's stage's alone.
DTRAIN_FAULT=no-shared-memory:1 run "$SCRATCH/pipe" 4 --mode sync --num-ps 0 --max-steps 4 \
  --pipeline-stages 2 --micro-batches 2
[[ $(json_get "$SCRATCH/pipe/results.json" allreduce) == hierarchical+mpi ]] ||
  fail "a pipeline whose stage 0 fell back: results.json allreduce is not hierarchical+mpi"

echo "== 2. sync, --allreduce hierarchical: an error naming worker 1 on every rank, no hang"
set +e
DTRAIN_FAULT=no-shared-memory:1 timeout 120 "$MPIEXEC" -n 2 -x DTRAIN_FAULT "$DTRAIN" \
  "${COMMON[@]}" --run-dir "$SCRATCH/hier" --mode sync --num-ps 0 --allreduce hierarchical \
  --max-steps 10 >"$SCRATCH/hier.log" 2>&1
rc=$?
set -e
((rc != 0 && rc != 124)) ||
  { cat "$SCRATCH/hier.log"; fail "exit $rc: expected an error, not success or a hang"; }
(($(grep -c "$NAMED (use --allreduce mpi)" "$SCRATCH/hier.log") >= 2)) ||
  { cat "$SCRATCH/hier.log"; fail "not every rank names worker 1 and --allreduce mpi"; }
! ls "$SCRATCH"/hier/ckpt-*.h5 >/dev/null 2>&1 ||
  fail "a checkpoint was written by a run that failed to start"
# Nothing of a run is left behind, so the way out the error names takes the same --run-dir.
[[ ! -e $SCRATCH/hier/config.ini && ! -e $SCRATCH/hier/metrics.csv ]] ||
  { ls "$SCRATCH/hier"; fail "the run that failed to start left config.ini or metrics.csv"; }
DTRAIN_FAULT=no-shared-memory:1 run "$SCRATCH/hier" 2 --mode sync --num-ps 0 --allreduce mpi \
  --max-steps 10

echo "== 3. async, 1 ps + 2 workers: a worker that cannot map the ring pushes as MPI messages"
DTRAIN_FAULT=no-shared-memory:1 run "$SCRATCH/async1" 3 --mode async --num-ps 1 --max-steps 40
RING="cannot map the ring ps 0 shares (open /proc/.*no-shared-memory); pushes to it travel as MPI"
grep -q "worker 1: $RING messages" "$SCRATCH/async1.log" ||
  { cat "$SCRATCH/async1.log"; fail "no warning from worker 1"; }
! grep -q "worker 0: cannot map" "$SCRATCH/async1.log" ||
  fail "worker 0 could not map the ring either"
DTRAIN_FAULT=no-shared-memory:2 run "$SCRATCH/async2" 3 --mode async --num-ps 1 --max-steps 40
for w in 0 1; do
  grep -q "ps 0.*: no shared ring for worker $w, its pushes travel as MPI messages: memfd_create" \
    "$SCRATCH/async2.log" || { cat "$SCRATCH/async2.log"; fail "the ps does not warn for worker $w"; }
done
! grep -q "cannot map the ring" "$SCRATCH/async2.log" || fail "a worker tried to map a ring"
"$PY" - "$SCRATCH/async1/results.json" "$SCRATCH/async2/results.json" <<'PY'
import json, sys
one, both = (json.load(open(p)) for p in sys.argv[1:])
for r in (one, both):
    assert r["global_step"] == 40 and r["train_loss"] < 1.0, r  # trained (4 classes: ln 4 = 1.39)
# Worker 0 still pushes through the ring, worker 1 as MPI messages; with no ring, no push does.
assert 0 < one["ps_shared_ring_pushes"] < one["global_step"], one["ps_shared_ring_pushes"]
assert both["ps_shared_ring_pushes"] == 0, both["ps_shared_ring_pushes"]
print(f"   ring pushes: {one['ps_shared_ring_pushes']} of 40 with worker 1 refused, 0 with the ps")
PY
echo "PASS"
