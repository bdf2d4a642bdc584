#!/usr/bin/env bash
# tests/cli/test_faults_checkpoint.sh — crashes during a checkpoint write, and corrupt checkpoints.
#   1. DTRAIN_FAULT=kill-in-checkpoint-write@25 (test-only hook, include/dtrain/core/fault.hpp): the
#      chief SIGKILLs itself after part of ckpt-<step>.h5.tmp reached the disk, at the first
#      checkpoint at or after step 25 (--checkpoint-every 10: sync, the one of step 30). In sync mode
#      (2 workers) and async mode (1 ps + 2 workers). A first run without the fault stops at
#      --max-steps 20, so a complete checkpoint exists before the crash in both modes (in async mode the
#      chief's first observed global_step can be past 25 under load). The job must end (non-zero, within 30 s of the
#      crash); the partial file exists only as .tmp; the previous checkpoint stays the newest complete
#      one and verifies; --resume picks it (not the .tmp), removes the .tmp (saying so: it holds the
#      run dir's lock, so no other run is writing it) and finishes.
#   2. Corrupt data in the newest checkpoint (bytes flipped inside a chunk of /optimizer/m, found
#      with h5py): --resume warns loudly naming the file and resumes from the previous one (async).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

crash_case() {
  local mode=$1 np=$2
  shift 2
  local dir=$SCRATCH/crash-$mode log=$SCRATCH/crash-$mode.log
  echo "== $mode: crash while writing the first checkpoint at or after step 25"
  first_part "$mode" "$np" "$dir" "$@"
  local t0=$(now)
  export DTRAIN_FAULT=kill-in-checkpoint-write@25
  start_job "$log" -n "$np" -x DTRAIN_FAULT "$DTRAIN" "${FX[@]}" \
    --mode "$mode" --run-dir "$dir" --resume --checkpoint-every 10 --timeout 60 "$@"
  unset DTRAIN_FAULT
  wait_job 60
  echo "   exit $JOB_RC after $(elapsed "$t0" "$(now)") s"
  [[ $JOB_RC -ne 124 ]] || { cat "$log"; fail "hang after the crash in a checkpoint write"; }
  [[ $JOB_RC -ne 0 ]] || { cat "$log"; fail "exit 0 although the chief crashed"; }
  grep -Eq "rank 0 .*signal 9" "$log" || { cat "$log"; fail "mpirun did not name the crashed chief"; }
  local tmp
  tmp=$(ls "$dir"/ckpt-*.h5.tmp 2>/dev/null | head -1)
  [[ -n $tmp && -s $tmp ]] || { ls -l "$dir"; fail "no partial .tmp file: the fault did not fire mid-write"; }
  [[ ! -f ${tmp%.tmp} ]] || fail "the partial checkpoint was renamed into place: ${tmp%.tmp}"
  local step tstep
  step=$(newest_step "$dir")
  tstep=${tmp##*/ckpt-}
  tstep=$((10#${tstep%.h5.tmp}))
  ((tstep >= 25 && step > 0 && step < tstep)) || { ls -l "$dir"; fail "newest complete checkpoint $step, partial $tstep"; }
  # The newest complete checkpoint is the last one the chief announced before the crash.
  cat "$log.first" "$log" | grep "^# checkpoint" | tail -1 | grep -q "ckpt-$(printf %010d "$step").h5" ||
    { cat "$log"; fail "the newest complete checkpoint is not the last one written"; }
  verify_ckpts "$dir"
  # A fresh run there is refused and changes nothing, the partial file included.
  expect_error "$np" "already holds a run|$dir" "${FX[@]}" --mode "$mode" --run-dir "$dir" "$@"
  [[ -s $tmp ]] || fail "a refused run removed $tmp"
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" --resume \
    --checkpoint-every 10 --max-steps $((step + 20)) "$@" >"$log.resume" 2>&1 || { cat "$log.resume"; fail "--resume failed"; }
  grep -q "resuming from global_step $step," "$log.resume" || { cat "$log.resume"; fail "--resume did not pick step $step"; }
  ! grep -q "CORRUPT" "$log.resume" || fail "--resume looked at the .tmp file"
  grep -q "# removed $tmp: a partial checkpoint" "$log.resume" || { cat "$log.resume"; fail "no note of the partial file's removal"; }
  [[ ! -e $tmp ]] || fail "the partial $tmp is still there after --resume"
  verify_ckpts "$dir"
  echo "   --resume picked global_step $step (not $(basename "$tmp"), which it removed) and finished"
}

crash_case sync 2 --num-ps 0
crash_case async 3 --num-ps 1

echo "== async: corrupt data in the newest checkpoint"
dir=$SCRATCH/corrupt
# Two runs, so that two checkpoints exist whatever the timing: async, the chief sees the global
# step jump when the other worker pushes meanwhile, and a starved chief may pass step 10 and 20
# between two of its own pushes (its --checkpoint-every checkpoints then fall together); each run
# writes its final checkpoint.
timeout 60 "$MPIEXEC" -n 3 "$DTRAIN" "${FX[@]}" --num-ps 1 --run-dir "$dir" --checkpoint-every 10 \
  --max-steps 20 >"$dir.log" 2>&1 || { cat "$dir.log"; fail "first run failed"; }
timeout 60 "$MPIEXEC" -n 3 "$DTRAIN" "${FX[@]}" --num-ps 1 --run-dir "$dir" --checkpoint-every 10 \
  --resume --max-steps 30 >>"$dir.log" 2>&1 || { cat "$dir.log"; fail "second run failed"; }
(($(ls "$dir"/ckpt-*.h5 | wc -l) >= 2)) || { ls "$dir"; fail "fewer than 2 checkpoints"; }
newest=$(ls "$dir"/ckpt-*.h5 | sort | tail -1)
prev=$(ls "$dir"/ckpt-*.h5 | sort | tail -2 | head -1)
"$PY" "$SRC/tests/cli/corrupt_chunk.py" "$newest" optimizer/m
prev_step=$(basename "$prev" .h5)
prev_step=$((10#${prev_step#ckpt-}))
timeout 60 "$MPIEXEC" -n 3 "$DTRAIN" "${FX[@]}" --num-ps 1 --run-dir "$dir" --resume --max-steps 40 \
  >"$dir.resume.log" 2>&1 || { cat "$dir.resume.log"; fail "--resume past a corrupt checkpoint failed"; }
grep -q "CORRUPT CHECKPOINT SKIPPED.*$(basename "$newest")" "$dir.resume.log" ||
  { cat "$dir.resume.log"; fail "no loud warning naming $(basename "$newest")"; }
grep -q "resuming from global_step $prev_step," "$dir.resume.log" ||
  { cat "$dir.resume.log"; fail "did not fall back to $prev_step"; }
echo "   warned about $(basename "$newest") and resumed from global_step $prev_step"
echo "PASS"
