#!/usr/bin/env bash
# tests/cli/test_faults_disk_full.sh — the disk fills up while a checkpoint is written. Under
# LD_PRELOAD=no_space.so (tests/preload/no_space.cpp) writes to a checkpoint's .h5.tmp fail with
# ENOSPC once the file would pass 20,000 bytes, so the next checkpoint (sync: of step 30; async:
# the first the chief sees due) fails part-way, as on a full disk or an exhausted quota. In sync
# mode (2 workers) and async mode (1 ps + 2 workers), resuming a run whose checkpoints of steps 10
# and 20 exist:
#   - the job ends (non-zero, no hang) with one error naming the file, the system's reason and the
#     newest complete checkpoint (kept: --resume continues from it);
#   - no partial .tmp is left taking space; every checkpoint left verifies;
#   - --resume (disk space back) continues from step 20; in sync mode it ends bit-identical to a
#     run that never stopped.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

SHIM=$BIN/no_space.so
[[ -f $SHIM ]] || fail "no $SHIM (built by tests/CMakeLists.txt)"

disk_full_case() {
  local mode=$1 np=$2
  shift 2
  local dir=$SCRATCH/full-$mode log=$SCRATCH/full-$mode.log
  echo "== $mode: the disk fills up while the checkpoint after step 20 is written"
  first_part "$mode" "$np" "$dir" "$@"
  [[ -f $dir/ckpt-0000000020.h5 ]] || { ls "$dir"; fail "$dir: no checkpoint of step 20"; }
  LD_PRELOAD=$SHIM DTRAIN_TEST_NO_SPACE_MATCH=.h5.tmp DTRAIN_TEST_NO_SPACE_BYTES=20000 \
    start_job "$log" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" --resume \
    --checkpoint-every 10 --max-steps 40 --timeout 60 "$@"
  wait_job 90
  echo "   exit $JOB_RC"
  [[ $JOB_RC -ne 124 ]] || { cat "$log"; fail "hang after the failed checkpoint write"; }
  [[ $JOB_RC -ne 0 ]] || { cat "$log"; fail "exit 0 although a checkpoint was not written"; }
  local msg
  msg=$(grep "dtrain: error:" "$log") || { cat "$log"; fail "no error message"; }
  [[ $(wc -l <<<"$msg") == 1 ]] || { cat "$log"; fail "expected one error message, got: $msg"; }
  for word in "writing $dir/ckpt-00000000" ".h5 (as its .tmp file first)" ".h5.tmp:" \
              "No space left on device" "failed: --resume continues from" "ckpt-0000000020.h5"; do
    grep -qF -- "$word" <<<"$msg" || fail "the error does not say '$word': $msg"
  done
  ! compgen -G "$dir/*.tmp" >/dev/null || { ls -l "$dir"; fail "the failed checkpoint left a file behind"; }
  verify_ckpts "$dir" || fail "a checkpoint left by the job does not verify"
  [[ $(newest_step "$dir") == 20 ]] || { ls "$dir"; fail "the newest checkpoint is not step 20"; }
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" --resume \
    --checkpoint-every 10 --max-steps 40 "$@" >"$log.resume" 2>&1 || { cat "$log.resume"; fail "--resume failed"; }
  grep -q "resuming from global_step 20," "$log.resume" || { cat "$log.resume"; fail "did not resume from step 20"; }
  echo "   resumed from global_step 20 and finished"
}

disk_full_case sync 2 --num-ps 0
COMMON=("${FX[@]}" --mode sync --num-ps 0 --checkpoint-every 10)
run 2 "$SCRATCH/straight" --max-steps 40
compare "$SCRATCH/straight" "$SCRATCH/full-sync" 40
disk_full_case async 3 --num-ps 1
echo "PASS"
