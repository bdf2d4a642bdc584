#!/usr/bin/env bash
# tests/cli/test_train_e2e.sh — end-to-end training through the dtrain binary under mpiexec: async
# (1 ps + 2 workers, --layout nchw) and sync (2 workers, the default --layout auto: nhwc on the CPU)
# runs of a tiny CNN (conv+batchnorm+relu+maxpool+flatten+dense+dropout+dense) on a learnable
# synthetic set each lower the training loss (first vs last `train` row of metrics.csv) and reach
# test accuracy > 0.9; results.json carries the documented keys and the layout each ran; `dtrain --help` lists options with defaults; a second run into an existing run dir without
# --resume is refused and leaves the old results untouched.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# Train and test share the class templates (--template-seed) but not their samples (--seed).
make_data train 512 --seed 11 --template-seed 5
make_data test 128 --seed 12 --template-seed 5
write_job "$SCRATCH/job.ini"
DATA=(--train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")

# check_run DIR MODE WORLD NUM_PS: loss went down, accuracy high, results.json complete.
check_run() {
  local dir=$1 mode=$2 world=$3 num_ps=$4
  [[ -f $dir/metrics.csv && -f $dir/results.json ]] || fail "$dir: no metrics.csv / results.json"
  "$PY" - "$dir" "$mode" "$world" "$num_ps" <<'PY'
import csv, json, sys
d, mode, world, num_ps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [r for r in csv.DictReader(open(d + "/metrics.csv")) if r["kind"] == "train"]
assert len(rows) >= 3, f"{d}: only {len(rows)} train rows in metrics.csv"
first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
assert last < 0.7 * first, f"{d}: training loss did not go down: first {first}, last {last}"
r = json.load(open(d + "/results.json"))
for k in ["test_accuracy", "test_loss", "epochs", "global_step", "wall_seconds", "samples_per_sec",
          "mode", "world_size", "num_ps"]:
    assert k in r, f"{d}: results.json lacks {k}: {sorted(r)}"
assert r["test_accuracy"] > 0.9, f"{d}: test accuracy {r['test_accuracy']}"
assert r["mode"] == mode and r["world_size"] == world and r["num_ps"] == num_ps, r
assert r["global_step"] > 0 and r["samples_per_sec"] > 0 and r["wall_seconds"] > 0, r
assert abs(r["epochs"] - 2) < 1e-9, r
tests = [x for x in csv.DictReader(open(d + "/metrics.csv")) if x["kind"] == "test"]
assert len(tests) == 2, f"{d}: expected one test row per epoch, got {len(tests)}"
print(f"{d}: loss {first:.3f} -> {last:.3f}, test accuracy {r['test_accuracy']:.3f}, "
      f"{r['global_step']} steps")
PY
  ls "$dir"/ckpt-*.h5 >/dev/null 2>&1 || fail "$dir: no checkpoint written"
}

echo "== async: 1 ps + 2 workers, --layout nchw"
timeout 120 "$MPIEXEC" -n 3 "$DTRAIN" --config "$SCRATCH/job.ini" "${DATA[@]}" --mode async --num-ps 1 \
  --layout nchw --run-dir "$SCRATCH/async" >"$SCRATCH/async.log" 2>&1 || { cat "$SCRATCH/async.log"; fail "async run failed"; }
check_run "$SCRATCH/async" async 3 1
# async: 512 samples, 2 workers × 16 per batch: 2 × 16 pushes per epoch, 2 epochs
[[ $(json_get "$SCRATCH/async/results.json" global_step) == 64 ]] || fail "async global_step"
[[ $(json_get "$SCRATCH/async/results.json" layout) == nchw ]] || fail "async: results.json layout is not nchw"

echo "== sync: 2 workers"
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" "${DATA[@]}" --mode sync --num-ps 0 \
  --run-dir "$SCRATCH/sync" >"$SCRATCH/sync.log" 2>&1 || { cat "$SCRATCH/sync.log"; fail "sync run failed"; }
check_run "$SCRATCH/sync" sync 2 0
[[ $(json_get "$SCRATCH/sync/results.json" global_step) == 32 ]] || fail "sync global_step"
# --layout auto (the default) is NHWC on the CPU.
[[ $(json_get "$SCRATCH/sync/results.json" layout) == nhwc ]] || fail "sync: --layout auto did not run nhwc on the CPU"

echo "== --help"
help=$(timeout 60 "$DTRAIN" --help)
for opt in --config --train-data --test-data --mode --epochs --batch-size --num-ps --lr --optimizer \
           --run-dir --resume --max-steps --timeout; do
  grep -q -- "$opt" <<<"$help" || fail "--help does not list $opt"
done
grep -q -- "--batch-size.*(=64)" <<<"$help" || fail "--help does not show the --batch-size default"
grep -q -- "--mode.*(=async)" <<<"$help" || fail "--help does not show the --mode default"

echo "== an existing run dir without --resume is refused"
before=$(md5sum "$SCRATCH/sync/results.json" "$SCRATCH/sync/metrics.csv" "$SCRATCH"/sync/ckpt-*.h5)
set +e
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" "${DATA[@]}" --mode sync --num-ps 0 \
  --run-dir "$SCRATCH/sync" >"$SCRATCH/again.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/again.log"; fail "rerun into an existing run dir: exit $rc"; }
grep -q -- "--resume" "$SCRATCH/again.log" || { cat "$SCRATCH/again.log"; fail "refusal does not mention --resume"; }
grep -q "$SCRATCH/sync" "$SCRATCH/again.log" || { cat "$SCRATCH/again.log"; fail "refusal does not name the run dir"; }
after=$(md5sum "$SCRATCH/sync/results.json" "$SCRATCH/sync/metrics.csv" "$SCRATCH"/sync/ckpt-*.h5)
[[ $before == "$after" ]] || fail "the refused run changed the old results"
echo "== --resume of a finished run trains nothing and still reports the model's test metrics"
acc=$(json_get "$SCRATCH/sync/results.json" test_accuracy)
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" "${DATA[@]}" --mode sync --num-ps 0 \
  --run-dir "$SCRATCH/sync" --resume >"$SCRATCH/finished.log" 2>&1 || { cat "$SCRATCH/finished.log"; fail "resume of a finished run failed"; }
[[ $(json_get "$SCRATCH/sync/results.json" global_step) == 32 ]] || fail "resume of a finished run trained more steps"
[[ $(json_get "$SCRATCH/sync/results.json" test_accuracy) == "$acc" ]] ||
  fail "resume of a finished run reports test accuracy $(json_get "$SCRATCH/sync/results.json" test_accuracy), was $acc"
echo "PASS"
