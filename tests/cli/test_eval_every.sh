#!/usr/bin/env bash
# tests/cli/test_eval_every.sh — --eval-every N and --target-accuracy A (issue 10, item 3):
# - sync, 2 workers: metrics.csv has a `test` row after every N global steps and after every epoch
#   (one row when both fall on the same step); results.json's step_at_accuracy and
#   time_to_accuracy_seconds are those of the first test row reaching A;
# - sync: evaluating in between changes no training state (checkpoints bit-identical to a run
#   without --eval-every);
# - async, 1 ps + 2 workers: the chief evaluates alone every N global steps while the others train
#   on; no hang, increasing test rows, epoch-end rows of all workers;
# - a target never reached gives null in results.json; a resumed run keeps the step and time at
#   which the target was reached before the interruption (from metrics.csv);
# - --eval-every / --target-accuracy without a test set, or a target outside [0, 1]: exit 2.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 512 --seed 21 --template-seed 9
make_data test 128 --seed 22 --template-seed 9
make_data other 128 --seed 23 --template-seed 5  # other class templates: accuracy stays near chance
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")
SYNC=(--mode sync --num-ps 0)

# test_rows DIR: "step:accuracy" of every test row of DIR/metrics.csv, one per line.
test_rows() { awk -F, '$1 == "test" {print $2 ":" $6}' "$1/metrics.csv"; }

echo "== sync, 2 workers, --eval-every 5: rows at 5, 10, 15, 16 (epoch end), 20, 25, 30, 32"
d=$SCRATCH/sync
run 2 "$d" "${SYNC[@]}" --eval-every 5 --target-accuracy 0.5
steps=$(test_rows "$d" | cut -d: -f1 | tr '\n' ' ')
[[ $steps == "5 10 15 16 20 25 30 32 " ]] || { cat "$d.log"; fail "test rows at steps '$steps'"; }
"$PY" - "$d" 0.5 <<'PY' || fail "results.json does not match the first test row reaching the target"
import csv, json, sys
d, target = sys.argv[1], float(sys.argv[2])
rows = [r for r in csv.DictReader(open(f"{d}/metrics.csv")) if r["kind"] == "test"]
first = next(r for r in rows if float(r["accuracy"]) >= target)
res = json.load(open(f"{d}/results.json"))
assert res["target_accuracy"] == target, res
assert res["step_at_accuracy"] == int(first["global_step"]), (res["step_at_accuracy"], first)
# The row's value exactly (to the millisecond), as a resumed run recalls it from metrics.csv.
assert res["time_to_accuracy_seconds"] == float(first["wall_seconds"]), (res, first)
assert res["test_accuracy"] == float(rows[-1]["accuracy"]) or abs(res["test_accuracy"] - float(rows[-1]["accuracy"])) < 1e-6
print(f"target {target} reached at step {first['global_step']} after {first['wall_seconds']} s")
PY

echo "== sync: evaluating in between changes no training state"
run 2 "$SCRATCH/plain" "${SYNC[@]}" --max-steps 40 --epochs 3
run 2 "$SCRATCH/evals" "${SYNC[@]}" --max-steps 40 --epochs 3 --eval-every 3
compare "$SCRATCH/plain" "$SCRATCH/evals" 40

echo "== async, 1 ps + 2 workers, --eval-every 7: the chief evaluates alone"
d=$SCRATCH/async
run 3 "$d" --mode async --num-ps 1 --eval-every 7 --epochs 3
n=$(test_rows "$d" | wc -l)
[[ $n -ge 6 ]] || { cat "$d.log"; fail "only $n test rows in async mode"; }
test_rows "$d" | cut -d: -f1 | sort -n -c || fail "async test rows are not in step order"
[[ $(grep -c "epoch .* done" "$d.log") -eq 3 ]] || fail "want 3 epoch-end evaluations"
grep -q "epoch .* eval .* 128 samples" "$d.log" || { cat "$d.log"; fail "no whole-test-set evaluation by the chief"; }
"$PY" - "$d" <<'PY' || fail "async results.json"
import json, sys
r = json.load(open(f"{sys.argv[1]}/results.json"))
assert "step_at_accuracy" not in r and "time_to_accuracy_seconds" not in r, r  # no target given
assert r["test_accuracy"] > 0.9, r
PY

echo "== a target never reached is null"
d=$SCRATCH/never
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/other.h5")
run 2 "$d" "${SYNC[@]}" --eval-every 8 --target-accuracy 0.99 --epochs 1
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")
grep -q '"time_to_accuracy_seconds": null' "$d/results.json" || { cat "$d/results.json"; fail "time_to_accuracy_seconds not null"; }
grep -q '"step_at_accuracy": null' "$d/results.json" || fail "step_at_accuracy not null"

echo "== --resume keeps the step and time at which the target was reached"
d=$SCRATCH/resumed
run 2 "$d" "${SYNC[@]}" --eval-every 5 --target-accuracy 0.5 --max-steps 17
first=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["step_at_accuracy"], r["time_to_accuracy_seconds"])' "$d/results.json")
[[ ${first%% *} -le 17 ]] || fail "target not reached in the first part: $first"
rm "$d/results.json"  # as after a kill: only checkpoints and metrics.csv remain
run 2 "$d" "${SYNC[@]}" --eval-every 5 --target-accuracy 0.5 --max-steps 40 --resume
second=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["step_at_accuracy"], r["time_to_accuracy_seconds"])' "$d/results.json")
"$PY" -c 'import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); assert a[0] == b[0] and abs(float(a[1]) - float(b[1])) < 2e-3, (a, b)' "$first" "$second" ||
  fail "after --resume: step/time at accuracy '$second', before: '$first'"

echo "== bad uses"
bad() { expect_error "$@"; [[ $last_rc -eq 2 ]] || fail "exit $last_rc (want 2)"; }
bad 2 "--eval-every|--test-data" --config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" "${SYNC[@]}" \
  --run-dir "$SCRATCH/bad" --eval-every 5
bad 2 "--target-accuracy|[0, 1]" "${COMMON[@]}" "${SYNC[@]}" --run-dir "$SCRATCH/bad" --target-accuracy 1.5
[[ ! -e $SCRATCH/bad ]] || fail "a refused start created the run dir"
echo "PASS"
