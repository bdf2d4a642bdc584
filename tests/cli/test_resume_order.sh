#!/usr/bin/env bash
# tests/cli/test_resume_order.sh — a checkpoint from the middle of an epoch continues that epoch's
# order of samples, drawn from --seed, --shuffle and the training set (the tiny CNN on 1,024
# samples, seed 7: 2 workers × batch 16 take 32 global steps per epoch). A sync run to step 10
# (mid-epoch 1), then:
#   1. --resume with --seed 8, or with --shuffle false: refused naming the checkpoint, both values
#      and what to do — exit 2, one error, on every rank, the run dir unchanged; --dry-run refuses
#      the same.
#   2. --resume with a copy of the training file at another path: a warning naming both paths,
#      and the run goes on; the same file through a symbolic link: no warning.
#   3. at the epoch's end (step 32, step 0 of epoch 2) --seed and --shuffle may change.
#   4. async (1 ps + 2 workers) stopped by --max-steps 10 inside epoch 1: each worker at its own
#      step; --seed 8 is refused naming them, the run's own seed resumes. Another
#      --async-momentum than its DANA is refused (its checkpoint holds DANA's momentum sum).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data
d=$SCRATCH/run
ARGS=("${FX[@]}" --mode sync --num-ps 0 --run-dir "$d")
NP=2
rm -rf "$d"
go() {  # go LOG ARGS...: a resumed run of $NP ranks, its exit status in $rc
  local log=$1
  shift
  set +e
  timeout 120 "$MPIEXEC" -n "$NP" "$DTRAIN" "${ARGS[@]}" --resume "$@" >"$log" 2>&1
  rc=$?
  set -e
}
# The run dir's files; a real run rewrites the note in its lock file (.dtrain.lock) even when its
# set-up then fails, --dry-run does not touch it either.
state() { (cd "$d" && ls -A && md5sum -- * | sort && { [[ $1 != *--dry-run* ]] || md5sum .dtrain.lock; }); }
refused() {  # refused WORDS ARGS...: exit 2, one error holding every |-separated word, no change
  local words=$1 before
  shift
  before=$(state "$*")
  go "$SCRATCH/refused.log" "$@"
  [[ $rc -eq 2 ]] || { cat "$SCRATCH/refused.log"; fail "exit $rc with $*, want 2"; }
  local msg
  single_error "$SCRATCH/refused.log" "$words" "$*"
  [[ $(state "$*") == "$before" ]] || fail "a refused resume changed the run dir ($*)"
  echo "   refused: ${msg:0:200}..."
}

timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --max-steps 10 >"$SCRATCH/first.log" 2>&1 ||
  { cat "$SCRATCH/first.log"; fail "the first run failed"; }
[[ $(newest_step "$d") == 10 ]] || { ls "$d"; fail "no checkpoint of step 10"; }

echo "== 1. another --seed or --shuffle in the middle of an epoch: refused"
refused "ckpt-0000000010.h5|middle of epoch 1 (step 10 of 32)|--seed 7, this run has --seed 8|Resume with --seed 7 until the epoch's end" \
  --seed 8 --max-steps 20
refused "ckpt-0000000010.h5|--shuffle true, this run has --shuffle false|Resume with --shuffle true" \
  --shuffle false --max-steps 20
refused "ckpt-0000000010.h5|--seed 7, this run has --seed 8" --seed 8 --max-steps 20 --dry-run

echo "== 2. the training file at another path: a warning, and the run goes on"
cp "$SCRATCH/fx.h5" "$SCRATCH/fx_copy.h5"
ln -sf "$SCRATCH/fx.h5" "$SCRATCH/fx_link.h5"
saved=("${ARGS[@]}")
ARGS=("${ARGS[@]/#$SCRATCH\/fx.h5/$SCRATCH/fx_link.h5}")
go "$SCRATCH/link.log" --max-steps 10
[[ $rc -eq 0 ]] || { cat "$SCRATCH/link.log"; fail "--resume through a link: exit $rc"; }
! grep -q "training data" "$SCRATCH/link.log" || { cat "$SCRATCH/link.log"; fail "a link to the same file was warned about"; }
ARGS=("${saved[@]/#$SCRATCH\/fx.h5/$SCRATCH/fx_copy.h5}")
go "$SCRATCH/copy.log" --max-steps 12
[[ $rc -eq 0 ]] || { cat "$SCRATCH/copy.log"; fail "--resume with a copy of the training file: exit $rc"; }
warning=$(grep "dtrain: warning:.*training data" "$SCRATCH/copy.log") ||
  { cat "$SCRATCH/copy.log"; fail "no warning about the other training file"; }
[[ $(wc -l <<<"$warning") -eq 1 ]] || fail "want one warning: $warning"
for word in "ckpt-0000000010.h5" "training data '$SCRATCH/fx.h5'" "trains on '$SCRATCH/fx_copy.h5'"; do
  grep -qF -- "$word" <<<"$warning" || fail "the warning does not say '$word': $warning"
done
echo "   warned: ${warning:0:200}..."
ARGS=("${saved[@]}")

echo "== 3. at the epoch's end --seed and --shuffle may change"
go "$SCRATCH/to32.log" --max-steps 32
[[ $rc -eq 0 ]] || { cat "$SCRATCH/to32.log"; fail "resume to the epoch's end: exit $rc"; }
go "$SCRATCH/seed8.log" --seed 8 --shuffle false --max-steps 36
[[ $rc -eq 0 ]] || { cat "$SCRATCH/seed8.log"; fail "another seed at the epoch's end: exit $rc"; }
grep -q "resuming from global_step 32, epoch 2, step 0 of the epoch" "$SCRATCH/seed8.log" ||
  { cat "$SCRATCH/seed8.log"; fail "did not resume at the epoch's end"; }
[[ $(newest_step "$d") == 36 ]] || { ls "$d"; fail "the run with --seed 8 did not reach step 36"; }

echo "== 4. async: each worker at its own step"
d=$SCRATCH/async
ARGS=("${FX[@]}" --mode async --num-ps 1 --run-dir "$d")
NP=3
rm -rf "$d"
timeout 120 "$MPIEXEC" -n 3 "$DTRAIN" "${ARGS[@]}" --max-steps 10 >"$SCRATCH/async1.log" 2>&1 ||
  { cat "$SCRATCH/async1.log"; fail "the async run failed"; }
refused "ckpt-0000000010.h5|each worker at its own step|--seed 7, this run has --seed 8" \
  --seed 8 --max-steps 20
# Its momentum is DANA's (the default --async-momentum): the sum over the workers' momenta, which
# another rule would take as one momentum (W x too much): refused.
refused "ckpt-0000000010.h5|DANA's sum over the workers|--async-momentum" \
  --async-momentum as-given --max-steps 20
go "$SCRATCH/async2.log" --max-steps 20
[[ $rc -eq 0 ]] || { cat "$SCRATCH/async2.log"; fail "the async resume with its own seed: exit $rc"; }
grep -q "resuming from global_step 10, .*each worker at its own step" "$SCRATCH/async2.log" ||
  { cat "$SCRATCH/async2.log"; fail "the async run did not resume at each worker's step"; }
echo "PASS"
