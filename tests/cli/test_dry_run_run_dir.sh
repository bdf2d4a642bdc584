#!/usr/bin/env bash
# tests/cli/test_dry_run_run_dir.sh — --dry-run checks the run dir and the resume point as a real
# start does, reading only (the tiny CNN on 1,024 samples, sync, 2 workers × batch 16: 32 global
# steps per epoch; a run to step 10, mid-epoch 1). Refused like the real start, with exit 2, one
# error, on every rank, and the run dir unchanged (no lock taken, no file renamed):
#   1. --resume with 3 workers (the checkpoint's shape does not fit);
#   2. --resume of another model;
#   3. a fresh run into the run dir, which holds a run;
#   4. a run dir that is a regular file;
#   7. --resume into a run dir whose lock another run holds (flock(1) standing in for it).
# Accepted, saying what the run would do and writing nothing:
#   5. --resume: "continues checkpoint ... at global_step 10", also past a corrupt newer checkpoint
#      (warned, not renamed .corrupt as the real start does); at --max-steps 10: the run is complete;
#   6. a fresh run into a run dir that does not exist: it is not made.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data
d=$SCRATCH/run
ARGS=("${FX[@]}" --mode sync --num-ps 0)
rm -rf "$d"
state() { (cd "$d" && ls -A && md5sum -- * .dtrain.lock | sort && stat -c %Y .); }
dry() {  # dry NP LOG ARGS...: a --dry-run, its exit status in $rc; the run dir must not change
  local np=$1 log=$2 before
  shift 2
  before=$(state)
  set +e
  timeout 120 "$MPIEXEC" -n "$np" "$DTRAIN" "${ARGS[@]}" --run-dir "$d" --dry-run "$@" >"$log" 2>&1
  rc=$?
  set -e
  [[ $(state) == "$before" ]] || { cat "$log"; fail "--dry-run $* changed the run dir"; }
}
refused() {  # refused NP WORDS ARGS...: exit 2, one error holding every |-separated word
  local np=$1 words=$2
  shift 2
  dry "$np" "$SCRATCH/refused.log" "$@"
  [[ $rc -eq 2 ]] || { cat "$SCRATCH/refused.log"; fail "--dry-run $*: exit $rc, want 2"; }
  local msg
  single_error "$SCRATCH/refused.log" "$words" "--dry-run $*"
  ! grep -q "the job is valid" "$SCRATCH/refused.log" || fail "--dry-run $*: refused and valid"
  echo "   refused: ${msg:0:200}..."
}
accepted() {  # accepted NP WORDS ARGS...: exit 0, "the job is valid" and every |-separated word
  local np=$1 words=$2
  shift 2
  dry "$np" "$SCRATCH/accepted.log" "$@"
  [[ $rc -eq 0 ]] || { cat "$SCRATCH/accepted.log"; fail "--dry-run $*: exit $rc, want 0"; }
  local IFS='|' word
  for word in "the job is valid" $words; do
    grep -qF -- "$word" "$SCRATCH/accepted.log" || { cat "$SCRATCH/accepted.log"; fail "--dry-run $* does not say '$word'"; }
  done
  echo "   $(grep -E '^# (--resume|run dir)' "$SCRATCH/accepted.log" | cut -c1-200)"
}

timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --run-dir "$d" --max-steps 10 >"$SCRATCH/first.log" 2>&1 ||
  { cat "$SCRATCH/first.log"; fail "the first run failed"; }
[[ -f $d/.dtrain.lock && $(newest_step "$d") == 10 ]] || { ls -A "$d"; fail "no checkpoint of step 10"; }

echo "== 1. --resume with 3 workers"
refused 3 "ckpt-0000000010.h5|2 worker(s) × batch 16 (32 global steps per epoch)|3 worker(s) × batch 16" --resume
echo "== 2. --resume of another model"
sed 's/^layer = dense units=24$/layer = dense units=20/' "$SCRATCH/fx.ini" >"$SCRATCH/other.ini"
grep -q "units=20" "$SCRATCH/other.ini" || fail "the other model is the same"
ARGS=("${ARGS[@]/#$SCRATCH\/fx.ini/$SCRATCH/other.ini}")
refused 2 "ckpt-0000000010.h5|written by another model" --resume
ARGS=("${ARGS[@]/#$SCRATCH\/other.ini/$SCRATCH/fx.ini}")
echo "== 3. a fresh run into a run dir that holds a run"
refused 2 "option --run-dir: '$d' already holds a run|pass --resume" --max-steps 20
echo "== 4. a run dir that is a regular file"
saved=$d
d=$SCRATCH/plain
echo x >"$d"
state() { md5sum "$d"; }
refused 2 "option --run-dir: '$d' exists and is not a directory"
d=$saved
state() { (cd "$d" && ls -A && md5sum -- * .dtrain.lock | sort && stat -c %Y .); }

echo "== 5. --resume: what it continues, past a corrupt newer checkpoint"
accepted 2 "# --resume: continues checkpoint '$d/ckpt-0000000010.h5' at global_step 10, epoch 1, step 10 of the epoch" --resume --max-steps 20
head -c 3000 "$d/ckpt-0000000010.h5" >"$d/ckpt-0000000020.h5"
accepted 2 "CORRUPT CHECKPOINT SKIPPED: $d/ckpt-0000000020.h5|continues checkpoint '$d/ckpt-0000000010.h5'" --resume --max-steps 20
[[ -f $d/ckpt-0000000020.h5 ]] || fail "--dry-run moved the corrupt checkpoint"
rm "$d/ckpt-0000000020.h5"
accepted 2 "continues checkpoint '$d/ckpt-0000000010.h5'|the run is complete: nothing left to train" --resume --max-steps 10

echo "== 7. --resume while another run holds the run dir"
command -v flock >/dev/null || fail "no flock(1) (util-linux)"
printf 'its chief: pid 4242 on otherhost, since 2026-01-01 00:00:00 UTC' >"$d/.dtrain.lock"
flock -o "$d/.dtrain.lock" sleep 300 &  # -o: the lock is flock's own, gone with it
holder=$!
for _ in $(seq 50); do flock -n "$d/.dtrain.lock" true || break; sleep 0.1; done
refused 2 "option --run-dir: '$d' is in use by another dtrain run|pid 4242 on otherhost" --resume --max-steps 20
pkill -P "$holder" sleep || true  # flock then exits, letting go
wait "$holder" 2>/dev/null || true
accepted 2 "continues checkpoint '$d/ckpt-0000000010.h5'" --resume --max-steps 20

echo "== 6. a run dir that does not exist: not made"
d=$SCRATCH/new/run
state() { ls -d "$SCRATCH/new" 2>&1 || true; }
accepted 2 "# run dir '$d': does not exist (the run makes it), a new run"
[[ ! -e $SCRATCH/new ]] || fail "--dry-run made the run dir"
echo "PASS"
