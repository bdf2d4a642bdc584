#!/usr/bin/env bash
# tests/cli/test_faults_nonfinite.sh — non-finite gradients, injected with the test-only hook
# DTRAIN_FAULT=nan-gradient@STEP:RANK (a NaN in the last parameter tensor's gradient) and by a huge
# learning rate.
#   1. sync, 3 workers, NaN on rank 1 at step 15 (--checkpoint-every 10): every worker sees the same
#      summed gradient; exactly ONE error message, naming global step 15 and the tensor
#      (8.dense.bias); exit 4 on every rank (clean MPI_Finalize, no abort); ckpt-10 stays the newest
#      and verifies; no hang.
#   1b. the NaN in the step before a checkpoint (19, --checkpoint-every 10) and in the run's last
#      step: the checks are read one step late, yet exit 4 with the same one message, and ckpt-20 /
#      results.json are never written.
#   2. the same with --skip-nonfinite: the run completes (exit 0), results.json skipped_steps == 1.
#   3. async, 1 ps + 2 workers, NaN on worker rank 1 at step >= 45: exit 4, the message names the
#      step and tensor, every checkpoint verifies and none was written after the fault.
#   4. async with --skip-nonfinite: completes, skipped_steps == 1 (summed over the workers).
#   5. sync, --lr 1e30: exit 4, one message "non-finite gradient at global step N in tensor T".
#   6. a pipeline, the NaN in the stage without the chief: that stage reports it and the job ends
#      (exit 4) at once, with no stage timing out.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

# nan_run NAME NP FAULT ARGS...: runs (bounded by 60 s) with DTRAIN_FAULT=FAULT; sets RC, LOG, DIR.
nan_run() {
  local name=$1 np=$2 fault=$3
  shift 3
  DIR=$SCRATCH/$name
  LOG=$DIR.log
  set +e
  DTRAIN_FAULT=$fault timeout 60 "$MPIEXEC" -n "$np" -x DTRAIN_FAULT "$DTRAIN" "${FX[@]}" \
    --run-dir "$DIR" --checkpoint-every 10 --timeout 60 "$@" >"$LOG" 2>&1
  RC=$?
  set -e
  echo "== $name: exit $RC"
  [[ $RC -ne 124 ]] || { cat "$LOG"; fail "$name: hang"; }
}

one_error() {  # one_error WORD...: exactly one error line, containing every word
  local n msg w
  n=$(grep -c "dtrain: error:" "$LOG" || true)
  [[ $n -eq 1 ]] || { cat "$LOG"; fail "$n error messages, want exactly 1"; }
  msg=$(grep "dtrain: error:" "$LOG")
  for w in "$@"; do grep -qF -- "$w" <<<"$msg" || { cat "$LOG"; fail "the message lacks '$w': $msg"; }; done
  echo "   $msg"
}

nan_run sync-nan 3 nan-gradient@15:1 --mode sync --num-ps 0 --max-steps 60
[[ $RC -eq 4 ]] || { cat "$LOG"; fail "exit $RC, want 4"; }
one_error "non-finite gradient at global step 15" "8.dense.bias"
! grep -q "exited on signal\|MPI_ABORT" "$LOG" || { cat "$LOG"; fail "sync: a rank was aborted/killed"; }
[[ $(newest_step "$DIR") -eq 10 ]] || fail "newest checkpoint $(newest_step "$DIR"), want 10"
verify_ckpts "$DIR"

# The check of a step is read one step late (no GPU step waits for it): a NaN in the last step
# before a checkpoint must still stop the run before that checkpoint is written, and one in the
# last step of the run before it ends.
nan_run sync-nan-before-ckpt 2 nan-gradient@19:1 --mode sync --num-ps 0 --max-steps 60
[[ $RC -eq 4 ]] || { cat "$LOG"; fail "exit $RC, want 4"; }
one_error "non-finite gradient at global step 19" "8.dense.bias"
[[ $(newest_step "$DIR") -eq 10 ]] || fail "newest checkpoint $(newest_step "$DIR"), want 10 (ckpt-20 holds a non-finite step)"
nan_run sync-nan-last-step 2 nan-gradient@24:0 --mode sync --num-ps 0 --max-steps 25
[[ $RC -eq 4 ]] || { cat "$LOG"; fail "a NaN in the last step: exit $RC, want 4"; }
one_error "non-finite gradient at global step 24" "8.dense.bias"
[[ ! -f $DIR/results.json ]] || fail "a run ending in a non-finite step wrote results.json"

nan_run sync-skip 3 nan-gradient@15:1 --mode sync --num-ps 0 --max-steps 40 --skip-nonfinite
[[ $RC -eq 0 ]] || { cat "$LOG"; fail "--skip-nonfinite: exit $RC"; }
[[ $(json_get "$DIR/results.json" skipped_steps) -eq 1 ]] || fail "skipped_steps != 1"
[[ $(grep -c "skipped global step 15" "$LOG") -eq 1 ]] || { cat "$LOG"; fail "want one skip warning"; }
verify_ckpts "$DIR"

# The fault fires at global step 45, not 15: with 3 ranks on 2 cores worker 1 can run ahead of the
# chief, which checkpoints at the first of its own steps past 10 — at 15 that step had once not
# come yet, and the run stopped with no checkpoint to verify.
nan_run async-nan 3 nan-gradient@45:1 --mode async --num-ps 1 --max-steps 200
[[ $RC -eq 4 ]] || { cat "$LOG"; fail "exit $RC, want 4"; }
one_error "non-finite gradient at global step" "8.dense.bias" "rank 1"
verify_ckpts "$DIR"
last=$(grep "^# checkpoint" "$LOG" | tail -1)
[[ $last == *"ckpt-$(printf %010d "$(newest_step "$DIR")").h5"* ]] || fail "a checkpoint appeared after the fault"

nan_run async-skip 3 nan-gradient@15:1 --mode async --num-ps 1 --max-steps 60 --skip-nonfinite
[[ $RC -eq 0 ]] || { cat "$LOG"; fail "async --skip-nonfinite: exit $RC"; }
[[ $(json_get "$DIR/results.json" skipped_steps) -eq 1 ]] || fail "async skipped_steps != 1"

nan_run sync-lr 3 "" --mode sync --num-ps 0 --max-steps 60 --lr 1e30
[[ $RC -eq 4 ]] || { cat "$LOG"; fail "--lr 1e30: exit $RC, want 4"; }
one_error "non-finite gradient at global step" "in tensor"

# 6. A pipeline (2 stages): the NaN in stage 0 (world rank 1), whose gradient the chief's stage
# never sees: that stage's leader reports it and ends the job — within seconds, not the other
# stage's watchdog (--timeout 60 here) blaming the healthy stage; ckpt-10 stays the newest.
t0=$(date +%s)
nan_run pipe-nan 2 nan-gradient@15:1 --mode sync --num-ps 0 --max-steps 60 --pipeline-stages 2 \
  --micro-batches 2
[[ $RC -eq 4 ]] || { cat "$LOG"; fail "pipeline: exit $RC, want 4"; }
(($(date +%s) - t0 < 30)) || { cat "$LOG"; fail "pipeline: the job took $(($(date +%s) - t0)) s to end"; }
one_error "non-finite gradient at global step 15" "stage 0/2" "0.conv"
! grep -q "timed out" "$LOG" || { cat "$LOG"; fail "pipeline: a stage timed out instead"; }
[[ $(newest_step "$DIR") -eq 10 ]] || fail "pipeline: newest checkpoint $(newest_step "$DIR"), want 10"
verify_ckpts "$DIR"
echo "PASS"
