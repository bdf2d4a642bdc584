#!/usr/bin/env bash
# tests/cli/test_run_dir_lock.sh — one run at a time in a run dir (train/checkpointer.hpp,
# lock_run_dir). While run A (sync, 2 workers) trains in D:
#   1. a second run into D — with --resume, as a job submitted twice or a Slurm requeue while the
#      old job still runs would start — and a fresh one are refused at once (exit 2), with one
#      error naming D and A's chief (its pid); nothing in D changes (A is SIGSTOPped meanwhile, so
#      that only the refused run could write);
#   2. A stopped by SIGTERM (checkpoint, exit 75) releases D: --resume then continues from A's
#      last checkpoint. (A chief killed with SIGKILL releases it too: the kernel drops the lock of a
#      dead process; test_faults_kill_*.sh resume in the dir of a killed run.)
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

d=$SCRATCH/run
start_job "$SCRATCH/a.log" -n 2 "$DTRAIN" "${FX[@]}" --mode sync --num-ps 0 --run-dir "$d" \
  --checkpoint-every 20 --timeout 120
wait_ckpts "$d" 1 60
chief=$(rank_pid 0) && worker=$(rank_pid 1) || fail "the ranks of run A were not found"
kill -STOP "$chief" "$worker"
snapshot() { (cd "$d" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(snapshot)

for args in "--resume" ""; do
  echo "== a second run into the run dir of a running one (${args:-fresh}): refused"
  # shellcheck disable=SC2086  # $args: one option or none
  expect_error 2 "is in use by another dtrain run|$d|pid $chief" "${FX[@]}" --mode sync --num-ps 0 \
    --run-dir "$d" $args --max-steps 5
  [[ $last_rc == 2 ]] || fail "exit $last_rc, expected 2 (bad input)"
  [[ $(snapshot) == "$before" ]] || fail "the refused run changed the run dir"
done

echo "== the first run stopped by SIGTERM releases the run dir: --resume continues it"
kill -CONT "$chief" "$worker"
kill -TERM "$chief" "$worker"
wait_job 90
[[ $JOB_RC == 75 ]] || { cat "$SCRATCH/a.log"; fail "run A: exit $JOB_RC after SIGTERM, expected 75"; }
step=$(newest_step "$d")
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" "${FX[@]}" --mode sync --num-ps 0 --run-dir "$d" --resume \
  --max-steps $((step + 5)) >"$SCRATCH/b.log" 2>&1 || { cat "$SCRATCH/b.log"; fail "--resume after A ended failed"; }
grep -q "resuming from global_step $step," "$SCRATCH/b.log" || { cat "$SCRATCH/b.log"; fail "did not resume at $step"; }
echo "PASS"
