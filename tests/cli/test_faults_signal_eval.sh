#!/usr/bin/env bash
# tests/cli/test_faults_signal_eval.sh — a stop signal during the epoch-end evaluation (a
# preemption or time limit while an ImageNet-sized test set is scored: the scheduler's SIGKILL
# follows within KillWait, 30 s by default, and the epoch's checkpoint is written after its
# evaluation). Sync, 2 workers, a 2048-sample test set whose batches DTRAIN_FAULT=slow-eval makes
# take 0.2 s each (64 a worker, about 13 s); SIGTERM to every rank during the evaluation of epoch 1:
#   - the evaluation is left off after the batch in progress, the end of epoch 1 is checkpointed
#     as it stands (ckpt-16 at step 16 of epoch 1) and the job exits 75 within 8 s, with no test
#     row for it, and results.json's test metrics are null;
#   - --resume evaluates epoch 1 (once: one test row per epoch in metrics.csv) and goes on, ending
#     bit-identical to a run that was never stopped.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"

make_data train 512 --seed 31 --template-seed 3  # 16 global steps an epoch with 2 workers
make_data test 2048 --seed 32 --template-seed 3  # 64 batches a worker: about 13 s slowed
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --mode sync --num-ps 0 --epochs 3 --log-every 4 --timeout 60)
d=$SCRATCH/stopped
export DTRAIN_FAULT=slow-eval
start_job "$d.log" -n 2 "$DTRAIN" "${COMMON[@]}" --run-dir "$d"
unset DTRAIN_FAULT
for _ in $(seq 600); do grep -q "^step *16 " "$d.log" 2>/dev/null && break; sleep 0.05; done
grep -q "^step *16 " "$d.log" || { cat "$d.log"; fail "step 16 was not logged"; }
sleep 0.5  # into the evaluation of epoch 1 (about 13 s)
pids=("$(rank_pid 0)" "$(rank_pid 1)")
t0=$(now)
kill -TERM "${pids[@]}"
wait_job 60
took=$(elapsed "$t0" "$(now)")
echo "exit $JOB_RC ${took} s after SIGTERM"
[[ $JOB_RC == 75 ]] || { cat "$d.log"; fail "exit $JOB_RC, expected 75 (stopped after a checkpoint)"; }
# An evaluation that went on would take 12 s more; the stop itself (the batch in progress, the
# checkpoint, MPI_Finalize) about 2 s, more on a loaded host.
((took <= 8)) || { cat "$d.log"; fail "$took s from the signal to the end: the evaluation went on"; }
grep -q "evaluation at global_step 16 left off" "$d.log" || { cat "$d.log"; fail "no 'left off' line"; }
! grep -q "epoch   1 done" "$d.log" || { cat "$d.log"; fail "epoch 1's evaluation was reported"; }
# No evaluation finished: the test metrics are null (they were 0, a model that fits nothing).
[[ $(json_get "$d/results.json" test_accuracy) == None ]] || fail "test_accuracy is not null"
grep -q "| not evaluated |" "$d.log" || { cat "$d.log"; fail "the summary line reports a test accuracy"; }
[[ $(newest_step "$d") == 16 ]] || { ls "$d"; fail "the newest checkpoint is not step 16"; }
"$PY" - "$d/ckpt-0000000016.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:  # the epoch's end, not yet evaluated
    where = (f.attrs["epoch"], f.attrs["step_in_epoch"])
    assert where == (0, 16), f"ckpt-16 at epoch/step {where}, expected (0, 16)"
PY
run 2 "$d" --resume
grep -q "resuming from global_step 16, epoch 1, step 16 of the epoch" "$d.log" ||
  { cat "$d.log"; fail "did not resume at the end of epoch 1"; }
"$PY" - "$d/metrics.csv" <<'PY'
import csv, sys
steps = [int(r["global_step"]) for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "test"]
assert steps == [16, 32, 48], f"test rows at global steps {steps}, expected [16, 32, 48]"
PY
run 2 "$SCRATCH/straight"
compare "$SCRATCH/straight" "$d" 48
echo "PASS"
