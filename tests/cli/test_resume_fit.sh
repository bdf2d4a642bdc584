#!/usr/bin/env bash
# tests/cli/test_resume_fit.sh — which checkpoints --resume continues in another cluster shape, and
# a finished run (sync allreduce, the tiny CNN on 1,024 samples: 2 workers × batch 16 take 32 global
# steps per epoch). A run to step 20 (mid-epoch 1), then:
#   1. 3 workers (22 steps per epoch): refused naming both shapes — the position and the
#      learning-rate schedule count steps of another size; exit 2, one error, the run dir unchanged.
#   2. 4 workers × batch 8 (the same 32 steps of 32 samples): refused in the middle of an epoch,
#      naming it (the samples the epoch already trained were other workers' shards); the same
#      shape resumes from the checkpoint at the epoch's end.
#   3. the finished run again (the same --max-steps, or a lower one): exit 0, "nothing left to
#      train", every file byte for byte as it was — no second test row, results.json and the
#      checkpoints untouched.
#   4. an SSP run (--max-staleness 1) resumed without --max-staleness: the same workers and batch,
#      but async counts a global step per push: refused naming that, not the shape.
#   5. --resume of a run stopped before its first checkpoint starts from scratch and sets the
#      first attempt's metrics.csv rows aside in metrics-past-0.csv: metrics.csv is one timeline.
#   6. --log-every counts the epoch's steps: a run resumed at step 10 logs at 12, 15, 18 as an
#      uninterrupted one does (not 13, 16, 19).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data
d=$SCRATCH/run
ARGS=("${FX[@]}" --test-data "$SCRATCH/fx.h5" --mode sync --num-ps 0 --checkpoint-every 10
      --run-dir "$d")
rm -rf "$d"
go() {  # go NP LOG ARGS...: a resumed run, its exit status in $rc
  local np=$1 log=$2
  shift 2
  set +e
  timeout 120 "$MPIEXEC" -n "$np" "$DTRAIN" "${ARGS[@]}" --resume "$@" >"$log" 2>&1
  rc=$?
  set -e
}
refused() {  # refused NP WORDS ARGS...: exit 2, one error holding every |-separated word, no change
  local np=$1 words=$2 before
  shift 2
  before=$(cd "$d" && md5sum -- * | sort)
  go "$np" "$SCRATCH/refused.log" "$@"
  [[ $rc -eq 2 ]] || { cat "$SCRATCH/refused.log"; fail "exit $rc with -n $np $*, want 2"; }
  local msg
  single_error "$SCRATCH/refused.log" "$words" "-n $np $*"
  [[ $(cd "$d" && md5sum -- * | sort) == "$before" ]] || fail "a refused resume changed the run dir"
  echo "   refused: ${msg:0:160}..."
}

timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --max-steps 20 >"$SCRATCH/first.log" 2>&1 ||
  { cat "$SCRATCH/first.log"; fail "the first run failed"; }

echo "== 1. another number of steps per epoch"
refused 3 "ckpt-0000000020.h5|2 worker(s) × batch 16 (32 global steps per epoch)|3 worker(s) × batch 16 (22)|Resume with 2 worker(s) and --batch-size 16" \
  --max-steps 40

# The same workers and batch over a larger training set: the plain message, not the one about
# async and SSP counting steps differently.
"$BIN/make_dataset" "$SCRATCH/fx1280.h5" --n 1280 --c 1 --h 12 --w 12 --classes 4 --seed 5 >/dev/null
saved=("${ARGS[@]}")
ARGS=("${ARGS[@]/#$SCRATCH\/fx.h5/$SCRATCH/fx1280.h5}")
refused 2 "2 worker(s) × batch 16 (32 global steps per epoch)|2 worker(s) × batch 16 (40)|Resume with 2 worker(s)" \
  --max-steps 40
ARGS=("${saved[@]}")
! grep -q "per push" "$SCRATCH/refused.log" || fail "another data size was blamed on async/SSP counting"

echo "== 2. the same steps, other workers: not mid-epoch, at the epoch's end"
refused 4 "ckpt-0000000020.h5|middle of epoch 1 (step 20 of 32)|4 worker(s) × batch 8" \
  --batch-size 8 --max-steps 40
go 2 "$SCRATCH/to32.log" --max-steps 32
[[ $rc -eq 0 ]] || { cat "$SCRATCH/to32.log"; fail "resume to the epoch's end: exit $rc"; }
go 4 "$SCRATCH/w4.log" --batch-size 8 --max-steps 40
[[ $rc -eq 0 ]] || { cat "$SCRATCH/w4.log"; fail "4 workers from the epoch's end: exit $rc"; }
grep -q "resuming from global_step 32, epoch 2, step 0 of the epoch" "$SCRATCH/w4.log" ||
  { cat "$SCRATCH/w4.log"; fail "4 workers did not resume at the epoch's end"; }
verify_ckpts "$d" || fail "a checkpoint does not verify"
[[ $(newest_step "$d") == 40 ]] || { ls "$d"; fail "the 4-worker run did not reach step 40"; }

echo "== 3. a finished run: nothing left to train, nothing written"
before=$(cd "$d" && md5sum -- * | sort)
for max in 40 35; do
  go 4 "$SCRATCH/done$max.log" --batch-size 8 --max-steps "$max"
  [[ $rc -eq 0 ]] || { cat "$SCRATCH/done$max.log"; fail "--max-steps $max: exit $rc, want 0"; }
  grep -q "is complete (global_step 40, .*nothing left to train" "$SCRATCH/done$max.log" ||
    { cat "$SCRATCH/done$max.log"; fail "--max-steps $max: no word that the run is complete"; }
  [[ $(cd "$d" && md5sum -- * | sort) == "$before" ]] ||
    fail "--max-steps $max: resuming the finished run changed the run dir"
done
echo "== 4. SSP (--max-staleness) resumed as async: the same shape, steps of another kind"
d=$SCRATCH/ssp
ARGS=("${FX[@]}" --mode async --num-ps 1 --checkpoint-every 10 --run-dir "$d")
rm -rf "$d"
go 3 "$SCRATCH/ssp.log" --max-staleness 1 --max-steps 10
[[ $rc -eq 0 ]] || { cat "$SCRATCH/ssp.log"; fail "the SSP run failed: exit $rc"; }
refused 3 "ckpt-0000000010.h5|the same workers and batch|per push (async without --max-staleness)|Resume as the run was trained" \
  --max-steps 20
echo "== 5. --resume of a run stopped before its first checkpoint: from scratch, the old rows aside"
d=$SCRATCH/scratch
ARGS=("${FX[@]}" --mode sync --num-ps 0 --log-every 2 --run-dir "$d")
rm -rf "$d"
go 2 "$SCRATCH/scratch1.log" --max-steps 8
rm "$d"/ckpt-*.h5 "$d/results.json"  # = a run killed before its first checkpoint
go 2 "$SCRATCH/scratch2.log" --max-steps 4
[[ $rc -eq 0 ]] || { cat "$SCRATCH/scratch2.log"; fail "--resume from scratch: exit $rc"; }
grep -q "starting from scratch" "$SCRATCH/scratch2.log" || fail "no word of starting from scratch"
"$PY" - "$d" <<'PY' || { cat "$SCRATCH/scratch2.log"; fail "metrics.csv after a resume from scratch"; }
import csv, sys
d = sys.argv[1]
steps = [int(r["global_step"]) for r in csv.DictReader(open(f"{d}/metrics.csv")) if r["kind"] == "train"]
old = [int(r["global_step"]) for r in csv.DictReader(open(f"{d}/metrics-past-0.csv")) if r["kind"] == "train"]
assert steps == [2, 4], f"metrics.csv holds train steps {steps}, want [2, 4]: one timeline"
assert old == [2, 4, 6, 8], f"metrics-past-0.csv holds {old}, want the first attempt's [2, 4, 6, 8]"
print(f"   metrics.csv train steps {steps}; the first attempt's {old} in metrics-past-0.csv")
PY
echo "== 6. a resumed run logs at the same steps as one that never stopped (--log-every 3)"
ARGS=("${FX[@]}" --mode sync --num-ps 0 --log-every 3 --checkpoint-every 10)
for dir in whole parts; do rm -rf "${SCRATCH:?}/$dir"; done
d=$SCRATCH/whole
go 2 "$SCRATCH/whole.log" --run-dir "$d" --max-steps 20
d=$SCRATCH/parts
go 2 "$SCRATCH/parts1.log" --run-dir "$d" --max-steps 10
go 2 "$SCRATCH/parts2.log" --run-dir "$d" --max-steps 20
[[ $rc -eq 0 ]] || { cat "$SCRATCH/parts2.log"; fail "the resumed run failed: exit $rc"; }
"$PY" - "$SCRATCH/whole" "$SCRATCH/parts" <<'PY' || fail "the resumed run logs at other steps"
import csv, sys
def steps(d):
    return [int(r["global_step"]) for r in csv.DictReader(open(f"{d}/metrics.csv"))
            if r["kind"] == "train" and int(r["global_step"]) > 10]
a, b = (steps(d) for d in sys.argv[1:])
assert a == b == [12, 15, 18, 20], (a, b)
print(f"   train rows past the checkpoint: {b}, as without the stop")
PY
echo "PASS"
