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
# Then dtrain predict, export and plan, and a training run's results.json and timeline.json, on a
# full disk: exit 3, one error naming the file, nothing left behind (the TensorBoard event file,
# which stdio writes past the shim: tests/unit/test_summary.cpp).
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

# dtrain predict and dtrain export on a full disk: one error naming the file and the reason,
# nothing left behind (predict crashed in HDF5's clean-up at MPI_Finalize, exit 139; the ONNX
# export blamed protobuf's size limit and named no file).
ckpt=$SCRATCH/straight/ckpt-0000000040.h5
full_writer() {  # full_writer NAME NP ARGS...: ARGS must fail writing $SCRATCH/NAME
  local name=$1 np=$2 rc=0
  shift 2
  LD_PRELOAD=$SHIM DTRAIN_TEST_NO_SPACE_MATCH=$name.tmp DTRAIN_TEST_NO_SPACE_BYTES=2000 \
    timeout 60 "$MPIEXEC" -n "$np" -x LD_PRELOAD -x DTRAIN_TEST_NO_SPACE_MATCH \
    -x DTRAIN_TEST_NO_SPACE_BYTES "$DTRAIN" "$@" >"$SCRATCH/$name.log" 2>&1 || rc=$?
  echo "== $name on a full disk: exit $rc"
  [[ $rc == 3 ]] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, want 3"; }
  [[ $(grep -c "dtrain: error:" "$SCRATCH/$name.log") == 1 ]] || { cat "$SCRATCH/$name.log"; fail "$name: not one error"; }
  grep "dtrain: error:" "$SCRATCH/$name.log" | grep -F "$SCRATCH/$name.tmp" | grep -q "No space left" ||
    { cat "$SCRATCH/$name.log"; fail "$name: the error names no file or reason"; }
  [[ ! -e $SCRATCH/$name && ! -e $SCRATCH/$name.tmp ]] || { ls -l "$SCRATCH"; fail "$name: a file left behind"; }
}
full_writer np.h5 2 predict --checkpoint "$ckpt" --data "$SCRATCH/fx.h5" --out "$SCRATCH/np.h5" \
  --threads 1
full_writer m.onnx 0 export --checkpoint "$ckpt" --format onnx --out "$SCRATCH/m.onnx"
# dtrain plan's JSON too: a full disk is a system failure (exit 3), as export's (it was exit 2).
full_writer plan.json 1 plan --config "$SRC/jobs/resnet50_imagenet.ini" --profile \
  "$SRC/docs/scaling/resnet50_h200host_cpu_b24.json" --nodes 4 --workers-per-node 8 \
  --out "$SCRATCH/plan.json"

# A training run's results.json and timeline.json (written whole through <name>.tmp) on a full
# disk: exit 3, one error naming the file and the reason, and no <name>.tmp left behind (it stayed,
# partly written, taking space on the full disk for good once the run was complete).
for name in results.json timeline.json; do
  d=$SCRATCH/full-$name rc=0
  LD_PRELOAD=$SHIM DTRAIN_TEST_NO_SPACE_MATCH=$name.tmp DTRAIN_TEST_NO_SPACE_BYTES=200 \
    timeout 60 "$MPIEXEC" -n 2 -x LD_PRELOAD -x DTRAIN_TEST_NO_SPACE_MATCH \
    -x DTRAIN_TEST_NO_SPACE_BYTES "$DTRAIN" "${FX[@]}" --mode sync --num-ps 0 --run-dir "$d" \
    --max-steps 10 --timeline >"$d.log" 2>&1 || rc=$?
  echo "== $name of a training run on a full disk: exit $rc"
  [[ $rc == 3 ]] || { cat "$d.log"; fail "$name: exit $rc, want 3"; }
  [[ $(grep -c "dtrain: error:" "$d.log") == 1 ]] || { cat "$d.log"; fail "$name: not one error"; }
  grep "dtrain: error:" "$d.log" | grep -F "$d/$name.tmp" | grep -q "No space left" ||
    { cat "$d.log"; fail "$name: the error names no file or reason"; }
  [[ ! -e $d/$name.tmp ]] || { ls -l "$d"; fail "$name: $name.tmp left behind"; }
done

echo "PASS"
