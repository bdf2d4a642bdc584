#!/usr/bin/env bash
# tests/cli/test_resume.sh — bit-exact resume in sync mode: run A trains straight to --max-steps 40
# (mid-epoch); run B stops at --max-steps 17 (mid-epoch, after an epoch boundary) and continues with
# `--resume --max-steps 40` in the same run dir. The final checkpoints' /params, /optimizer/m (and
# /optimizer/v) and /model_state (every worker's batchnorm statistics) must be bit-identical; the
# model has batchnorm and dropout, so data order, dropout masks and running statistics must all be
# restored. Done with 2 workers (momentum) and with 1 worker (Adam, warm-up + cosine of fixed
# length), and with 2 workers and augmentation (random crop + flip, drawn from seed, epoch and sample).
# A run whose --max-steps falls on an epoch's last step ends that epoch (evaluated once, its
# checkpoint the next epoch's start): resumed, it neither evaluates nor saves that epoch again.
# A run stopped after its last checkpoint, before results.json, resumed: one test row, results
# from metrics.csv, null throughput, the first session's timeline kept; no test set: null metrics.
# Async with 2 workers stopped by --max-steps mid-epoch: each worker resumes at its own step, and
# the epochs end where a run never stopped ends them.
# Then a checkpoint of another model, and one of another mode, are refused by --resume.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 512 --seed 21 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --epochs 3 --mode sync --num-ps 0)

echo "== 2 workers, momentum"
check_resume 2 w2
echo "== 2 workers with augmentation (--random-crop 2 --random-flip): still bit-exact"
check_resume 2 w2aug --random-crop 2 --random-flip
"$PY" - "$SCRATCH/w2-straight" "$SCRATCH/w2aug-straight" <<'PY' || fail "augmentation changed nothing"
import sys, h5py, numpy as np
a, b = (h5py.File(f"{d}/ckpt-0000000040.h5", "r")["params"][()] for d in sys.argv[1:])
assert not np.array_equal(a, b), "augmented and plain runs ended with the same parameters"
print("augmented run differs from the plain one (max |diff| %.3g)" % np.abs(a - b).max())
PY
echo "== 1 worker, Adam with warm-up and a cosine of fixed length"
check_resume 1 w1 --optimizer adam --lr 0.003 --warmup-steps 5 --lr-schedule cosine --lr-decay-steps 40

echo "== a corrupt newest checkpoint: --resume falls back to the previous one, still bit-exact"
c=$SCRATCH/w2-corrupt
run 2 "$c" --max-steps 25 --checkpoint-every 10
[[ -f $c/ckpt-0000000020.h5 && -f $c/ckpt-0000000025.h5 ]] || fail "$c: missing checkpoints: $(ls "$c")"
# Flip bytes in the middle of /params' first chunk, which Fletcher32 must catch.
"$PY" "$SRC/tests/cli/corrupt_chunk.py" "$c/ckpt-0000000025.h5" params
run 2 "$c" --max-steps 40 --resume
grep -q "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000025.h5" "$c.log" || { cat "$c.log"; fail "no warning naming the corrupt checkpoint"; }
grep -q "resuming from global_step 20" "$c.log" || { cat "$c.log"; fail "did not fall back to step 20"; }
compare "$SCRATCH/w2-straight" "$c" 40

echo "== --max-steps at an epoch's end ends the epoch: a resumed run neither evaluates nor saves it again"
make_data test 64 --seed 22 --template-seed 9
e=$SCRATCH/epoch-end
run 2 "$e" --max-steps 16 --checkpoint-every 8 --test-data "$SCRATCH/test.h5"  # 16 steps an epoch
[[ $(json_get "$e/results.json" epochs_completed) == 1 ]] || fail "$e: epochs_completed is not 1"
"$PY" - "$e/ckpt-0000000016.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:  # saved after the evaluation, as the next epoch's start
    where = (f.attrs["epoch"], f.attrs["step_in_epoch"])
    assert where == (1, 0), f"ckpt-16 saved at epoch/step {where}, not at the start of epoch 2"
PY
run 2 "$e" --max-steps 40 --resume --checkpoint-every 8 --test-data "$SCRATCH/test.h5"
grep -q "resuming from global_step 16, epoch 2, step 0 of the epoch" "$e.log" || { cat "$e.log"; fail "did not resume at epoch 2"; }
[[ $(grep -c "epoch   1 done" "$e.log") == 1 ]] || { cat "$e.log"; fail "epoch 1 evaluated twice"; }
[[ $(grep -c "# checkpoint .*ckpt-0000000016.h5" "$e.log") == 1 ]] || { cat "$e.log"; fail "ckpt-16 written twice"; }
"$PY" - "$e/metrics.csv" <<'PY'
import csv, sys
steps = [int(r["global_step"]) for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "test"]
assert steps == [16, 32, 40], f"test rows at global steps {steps}, expected [16, 32, 40]"
PY
compare "$SCRATCH/w2-straight" "$e" 40

echo "== stopped after its last checkpoint, before results.json: --resume reports without a second row"
f=$SCRATCH/no-results
run 2 "$f" --max-steps 16 --test-data "$SCRATCH/test.h5" --timeline
rm "$f/results.json"
cp "$f/timeline.json" "$SCRATCH/first-timeline.json"
run 2 "$f" --max-steps 16 --test-data "$SCRATCH/test.h5" --timeline --resume
grep -q "no step trained" "$f.log" || { cat "$f.log"; fail "$f: the summary line reports a speed"; }
cmp -s "$f/timeline.json" "$SCRATCH/first-timeline.json" || fail "$f: the first timeline was overwritten"
"$PY" - "$f" <<'PY'
import csv, json, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
tests = [r for r in rows if r["kind"] == "test"]
assert [int(r["global_step"]) for r in tests] == [16], f"test rows {[r['global_step'] for r in tests]}"
r = json.load(open(f"{d}/results.json"))
last = [x for x in rows if x["kind"] == "train"][-1]  # the session trained nothing: the last one
assert abs(r["train_loss"] - float(last["loss"])) < 1e-5, (r["train_loss"], last["loss"])
assert abs(r["train_accuracy"] - float(last["accuracy"])) < 1e-5
assert abs(r["test_accuracy"] - float(tests[0]["accuracy"])) < 1e-5
assert r["session_first_step"] == 16 and r["global_step"] == 16, r["session_first_step"]
for k in ("samples_per_sec", "step_ms_p50", "step_compute_ms"):
    assert r[k] is None, f"{k} = {r[k]} for a session that trained no step"
json.load(open(f"{d}/timeline-2.json"))  # the resumed session's, valid JSON
print("one test row, train metrics from metrics.csv, no throughput; timeline.json kept")
PY
# Without a test set the test metrics are null (not 0), and a session of no span (no test set to
# evaluate, nothing to train) still writes a valid timeline.
g=$SCRATCH/no-test
run 2 "$g" --max-steps 16
[[ $(json_get "$g/results.json" test_accuracy) == None ]] || fail "$g: test_accuracy is not null"
[[ $(json_get "$g/results.json" test_loss) == None ]] || fail "$g: test_loss is not null"
[[ $(json_get "$g/results.json" session_first_step) == 0 ]] || fail "$g: session_first_step not 0"
rm "$g/results.json"
sum=$(md5sum <"$g/ckpt-0000000016.h5")
run 2 "$g" --max-steps 16 --resume --timeline
[[ $(md5sum <"$g/ckpt-0000000016.h5") == "$sum" ]] || fail "$g: the resumed checkpoint was written again"
[[ $(json_get "$g/results.json" epochs_completed) == 1 ]] || fail "$g: epochs_completed is not 1"
# --max-steps inside an epoch evaluates there, which its log line does not call the epoch's end.
h=$SCRATCH/mid-epoch
run 2 "$h" --max-steps 10 --test-data "$SCRATCH/test.h5"
grep -q "^epoch   1 eval | global_step 10 " "$h.log" || { cat "$h.log"; fail "$h: no 'epoch 1 eval' line"; }
! grep -q "epoch   1 done" "$h.log" || { cat "$h.log"; fail "$h: epoch 1 reported done at step 10 of 16"; }
"$PY" -c 'import json, sys; json.load(open(sys.argv[1]))' "$g/timeline.json" ||
  fail "$g: timeline.json is not JSON: $(head -c 400 "$g/timeline.json")"

# refused NAME NP ARGS...: a --resume run into w2-resumed that must fail naming `expect`.
refused() {
  local expect=$1 np=$2
  shift 2
  set +e
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" --train-data "$SCRATCH/train.h5" --epochs 3 \
    --run-dir "$SCRATCH/w2-resumed" --resume --max-steps 50 "$@" >"$SCRATCH/refused.log" 2>&1
  local rc=$?
  set -e
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/refused.log"; fail "resume with $* : exit $rc"; }
  grep -q -- "$expect" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "no '$expect' in the refusal"; }
  grep -q "ckpt-0000000040.h5" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "the refusal does not name the checkpoint"; }
}

echo "== async, 2 workers stopped by --max-steps 10 mid-epoch: each worker resumes at its own step"
# Each async worker trains its own shard (16 batches an epoch here, 32 global steps); a stop
# checkpoint holds every worker's position (/worker_steps_in_epoch, summing to its global step),
# so the resumed epoch ends at the same global step as a run never stopped, with every batch of
# every shard trained once (before, every worker restarted at the chief's position: epoch 1 ended
# at step 22 or 42, and results.json said epochs 1.6875 with epochs_completed 2).
ASYNC=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
       --epochs 2 --mode async --num-ps 1)
COMMON=("${ASYNC[@]}")
run 3 "$SCRATCH/async-straight"
run 3 "$SCRATCH/async-stopped" --max-steps 10
run 3 "$SCRATCH/async-stopped" --resume
grep -q "each worker at its own step" "$SCRATCH/async-stopped.log" ||
  { cat "$SCRATCH/async-stopped.log"; fail "the async resume did not place each worker"; }
"$PY" - "$SCRATCH/async-straight" "$SCRATCH/async-stopped" <<'PY' || fail "the resumed async run's epochs differ"
import csv, json, sys, h5py
straight, stopped = sys.argv[1:]
with h5py.File(f"{stopped}/ckpt-0000000010.h5", "r") as f:
    steps = f["worker_steps_in_epoch"][()].tolist()
    assert len(steps) == 2 and sum(steps) == 10 == f.attrs["global_step"], steps
def epoch_ends(d):
    return [(int(r["global_step"]), int(r["epoch"])) for r in csv.DictReader(open(f"{d}/metrics.csv"))
            if r["kind"] == "test" and int(r["global_step"]) % 32 == 0]
assert epoch_ends(stopped) == epoch_ends(straight) == [(32, 1), (64, 2)], (epoch_ends(stopped), epoch_ends(straight))
r = json.load(open(f"{stopped}/results.json"))
assert (r["global_step"], r["epochs"], r["epochs_completed"]) == (64, 2.0, 2), r
print(f"stopped with the workers at steps {steps}; resumed, its epochs end at steps 32 and 64 as the straight run's")
PY
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --epochs 3 --mode sync --num-ps 0)

echo "== a checkpoint of another model is refused"
sed 's/^layer = dense units=24$/layer = dense units=20/' "$SCRATCH/job.ini" >"$SCRATCH/other_model.ini"
! cmp -s "$SCRATCH/job.ini" "$SCRATCH/other_model.ini" || fail "the other model's job file is unchanged"
refused "another model" 2 --config "$SCRATCH/other_model.ini" --mode sync --num-ps 0
echo "== a checkpoint of another mode is refused"
refused "mode" 3 --config "$SCRATCH/job.ini" --mode async --num-ps 1
[[ ! -f $SCRATCH/w2-resumed/ckpt-0000000050.h5 ]] || fail "a refused run wrote a checkpoint"
echo "== after falling back past a corrupt checkpoint, a refusal names the checkpoint it read"
mkdir -p "$SCRATCH/fallback"
cp "$SCRATCH/w2-resumed/ckpt-0000000017.h5" "$SCRATCH/w2-resumed/ckpt-0000000040.h5" "$SCRATCH/fallback/"
printf 'garbage' >"$SCRATCH/fallback/ckpt-0000000045.h5"
set +e
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/other_model.ini" --train-data "$SCRATCH/train.h5" \
  --mode sync --num-ps 0 --run-dir "$SCRATCH/fallback" --resume >"$SCRATCH/fallback.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/fallback.log"; fail "fallback + other model: exit $rc"; }
msg=$(grep "dtrain: error:" "$SCRATCH/fallback.log") || { cat "$SCRATCH/fallback.log"; fail "no error message"; }
grep -q "another model" <<<"$msg" || fail "not refused as another model: $msg"
grep -q "ckpt-0000000040.h5" <<<"$msg" || fail "the refusal does not name the checkpoint that was read: $msg"
echo "PASS"
