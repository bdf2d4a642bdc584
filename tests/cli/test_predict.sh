#!/usr/bin/env bash
# tests/cli/test_predict.sh — distributed inference (`dtrain predict`, train/predict.hpp).
#   1. a sync run (2 workers, 2 full epochs) and an async run stopped by --max-steps 13 (1 ps + 2
#      workers): `dtrain predict` on the test set with each run's final checkpoint prints exactly the
#      run's final test_accuracy (results.json), and its top-5 accuracy the run's test_top5 (1 here:
#      4 classes). The test set's classes are drawn from other templates than the training set's,
#      so the accuracy is far from 0 and 1 and every argmax counts.
#   2. outputs of 1, 2 and 4 ranks: `predictions` and `probabilities` byte-identical; predictions are
#      the probabilities' argmax, rows sum to 1; the same predictions without a `labels` dataset
#      (then no accuracy is printed), and without --config (the model the checkpoint carries);
#      with --init-from (its export) on the unlabeled data, whose num_classes gives the classes.
#   3. one error each, nothing written or overwritten: a checkpoint of another model, data of
#      another shape, an existing output file, --num-classes other than the checkpoint's,
#      --init-exclude, --init-from on data with neither labels nor num_classes (naming
#      --num-classes). A --batch-size beyond the data is the data's size (the same bytes).
#   4. `dtrain train --config ...` trains exactly as `dtrain --config ...`.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 512 --seed 21 --template-seed 9
make_data test 300 --seed 23 --template-seed 10
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --threads 1)

# predict NP OUT CKPT [DATA]: one dtrain predict that must succeed; its log is OUT.log.
predict() {
  local np=$1 out=$2 ckpt=$3 data=${4:-$SCRATCH/test.h5}
  timeout 120 "$MPIEXEC" -n "$np" "$DTRAIN" predict --config "$SCRATCH/job.ini" --checkpoint "$ckpt" \
    --data "$data" --out "$out" --threads 1 >"$out.log" 2>&1 ||
    { cat "$out.log"; fail "predict into $out failed"; }
}
newest() { ls "$1"/ckpt-*.h5 | tail -1; }

echo "== 1. accuracy of predict = the run's final test_accuracy"
run 2 "$SCRATCH/sync" --mode sync --num-ps 0 --epochs 2
run 3 "$SCRATCH/async" --mode async --num-ps 1 --epochs 3 --max-steps 13
for run in sync async; do
  predict 2 "$SCRATCH/$run.p2.h5" "$(newest "$SCRATCH/$run")"
  printed=$(sed -n 's/^accuracy \([^ ]*\) .*/\1/p' "$SCRATCH/$run.p2.h5.log")
  correct=$(sed -n 's/^accuracy [^ ]* (\([0-9]*\) of 300 correct).*/\1/p' "$SCRATCH/$run.p2.h5.log")
  want=$(json_get "$SCRATCH/$run/results.json" test_accuracy)
  echo "$run: predict accuracy $printed ($correct of 300), results.json test_accuracy $want"
  # The same count of correct samples (predict prints 10 significant digits, results.json
  # all 17: 64/300 reads 0.2133333333 and 0.21333333333333335), and neither no sample
  # right nor all (13 async steps can end anywhere between: 0.02 was seen).
  "$PY" -c "import sys; a, n, b = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]); sys.exit(0 if n == round(b * 300) and abs(b * 300 - n) < 1e-9 and a == float('%.10g' % b) and 0 < n < 300 else 1)" \
    "$printed" "${correct:-x}" "$want" || { cat "$SCRATCH/$run.p2.h5.log"; fail "$run: predict's accuracy $printed, test_accuracy $want: expected equal, strictly between 0 and 1"; }
  top5=$(sed -n 's/^accuracy .* top-5 accuracy \([^ ]*\)$/\1/p' "$SCRATCH/$run.p2.h5.log")
  want5=$(json_get "$SCRATCH/$run/results.json" test_top5)
  "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) == float(sys.argv[2]) == 1 else 1)" \
    "$top5" "$want5" || fail "$run: predict's top-5 '$top5', test_top5 $want5 (4 classes: both 1)"
done

echo "== 2. 1, 2 and 4 ranks: identical outputs; unlabeled input"
ckpt=$(newest "$SCRATCH/sync")
predict 1 "$SCRATCH/p1.h5" "$ckpt"
predict 4 "$SCRATCH/p4.h5" "$ckpt"
"$PY" - "$SCRATCH/test.h5" "$SCRATCH/unlabeled.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "w") as b:
    b["images"] = a["images"][()]
    for k, v in a.attrs.items():
        b.attrs[k] = v
PY
predict 3 "$SCRATCH/pu.h5" "$ckpt" "$SCRATCH/unlabeled.h5"
# --init-from on unlabeled data: the class count is the file's num_classes attribute (as the
# checkpoint's is with --checkpoint), the tensors the checkpoint's.
"$DTRAIN" export --checkpoint "$ckpt" --out "$SCRATCH/m.safetensors" >/dev/null
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" predict --config "$SCRATCH/job.ini" --data "$SCRATCH/unlabeled.h5" \
  --init-from "$SCRATCH/m.safetensors" --out "$SCRATCH/pi.h5" --threads 1 >"$SCRATCH/pi.h5.log" 2>&1 ||
  { cat "$SCRATCH/pi.h5.log"; fail "predict --init-from on data without labels failed"; }
# Without --config: the model is the one the checkpoint carries; the job's batch size (16) from
# the command line, as batches of another size may round differently.
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" predict --checkpoint "$ckpt" --data "$SCRATCH/test.h5" \
  --out "$SCRATCH/pn.h5" --threads 1 --batch-size 16 >"$SCRATCH/pn.h5.log" 2>&1 ||
  { cat "$SCRATCH/pn.h5.log"; fail "predict without --config failed"; }
! grep -q "^accuracy" "$SCRATCH/pu.h5.log" || fail "an accuracy was printed for data without labels"
# Whole files, not only their datasets: no HDF5 object times (as docs/checkpoints.md says).
cmp -s "$SCRATCH/p1.h5" "$SCRATCH/p4.h5" || fail "the files of 1 and 4 ranks are not byte-identical"
# A --batch-size beyond the data's 300 samples is a batch of 300 (no buffers, nor oneDNN
# primitives, for samples that do not exist): the same bytes as --batch-size 300.
for b in 300 2147483647; do
  timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" predict --checkpoint "$ckpt" --data "$SCRATCH/test.h5" \
    --out "$SCRATCH/pb$b.h5" --threads 1 --batch-size $b >"$SCRATCH/pb$b.log" 2>&1 ||
    { cat "$SCRATCH/pb$b.log"; fail "predict --batch-size $b failed"; }
done
"$PY" - "$SCRATCH/pb300.h5" "$SCRATCH/pb2147483647.h5" <<'PY' || fail "a huge --batch-size changed the output"
import sys, h5py
a, b = (h5py.File(f, "r") for f in sys.argv[1:])
for k in ("predictions", "probabilities"):
    assert a[k][()].tobytes() == b[k][()].tobytes(), k
PY
"$PY" - "$SCRATCH" "$(json_get "$SCRATCH/sync/results.json" test_accuracy)" <<'PY' || fail "outputs differ"
import sys, h5py, numpy as np
s, acc = sys.argv[1], float(sys.argv[2])
files = {n: h5py.File(f"{s}/{n}.h5", "r") for n in ("p1", "sync.p2", "p4", "pu", "pn", "pi")}
labels = h5py.File(f"{s}/test.h5", "r")["labels"][()]
ref = files["p1"]
pred, prob = ref["predictions"][()], ref["probabilities"][()]
assert pred.dtype == np.int32 and pred.shape == (300,), (pred.dtype, pred.shape)
assert prob.dtype == np.float32 and prob.shape == (300, 4), (prob.dtype, prob.shape)
for name, f in files.items():
    assert f["predictions"][()].tobytes() == pred.tobytes(), f"{name}: predictions differ from 1 rank's"
    assert f["probabilities"][()].tobytes() == prob.tobytes(), f"{name}: probabilities differ from 1 rank's"
assert np.array_equal(np.argmax(prob, axis=1), pred), "predictions are not the argmax"
assert np.allclose(prob.sum(axis=1), 1, atol=1e-5)
assert (pred == labels).mean() == acc == ref.attrs["accuracy"], ((pred == labels).mean(), acc)
assert ref.attrs["num_samples"] == 300 and "accuracy" not in files["pu"].attrs
assert "accuracy" not in files["pi"].attrs
print(f"1/2/4 ranks, unlabeled, without --config, unlabeled --init-from: byte-identical; accuracy {acc} = mean(predictions == labels)")
PY

echo "== 3. errors: another model, another shape, an existing output"
sed 's/^layer = dense units=24$/layer = dense units=20/' "$SCRATCH/job.ini" >"$SCRATCH/other.ini"
expect_error 2 "checkpoint '$ckpt'|another model|dense" predict --config "$SCRATCH/other.ini" \
  --checkpoint "$ckpt" --data "$SCRATCH/test.h5" --out "$SCRATCH/e1.h5"
make_data small 40 --h 10 --w 10 --seed 5
expect_error 2 "--data '$SCRATCH/small.h5'|1x1x10x10|1x1x12x12" predict --config "$SCRATCH/job.ini" \
  --checkpoint "$ckpt" --data "$SCRATCH/small.h5" --out "$SCRATCH/e2.h5"
echo "keep me" >"$SCRATCH/e3.h5"
expect_error 2 "--out|$SCRATCH/e3.h5|already exists" predict --config "$SCRATCH/job.ini" \
  --checkpoint "$ckpt" --data "$SCRATCH/test.h5" --out "$SCRATCH/e3.h5"
[[ $last_rc -eq 2 ]] || fail "exit $last_rc, want 2"
[[ $(cat "$SCRATCH/e3.h5") == "keep me" ]] || fail "the existing output was overwritten"
# An existing <out>.tmp (an unfinished earlier predict's, or the user's) is not the writer's to
# truncate or remove, and a link there is not followed into the file it points to.
echo "keep me" >"$SCRATCH/e5.h5.tmp"
cp "$ckpt" "$SCRATCH/linked.h5" && ln -s linked.h5 "$SCRATCH/e6.h5.tmp"
for out in e5 e6; do
  expect_error 2 "--out|$SCRATCH/$out.h5.tmp|already exists|did not finish" predict \
    --config "$SCRATCH/job.ini" --checkpoint "$ckpt" --data "$SCRATCH/test.h5" --out "$SCRATCH/$out.h5"
  [[ $last_rc -eq 2 && ! -e $SCRATCH/$out.h5 ]] || fail "$out: exit $last_rc, or an output written"
done
[[ $(cat "$SCRATCH/e5.h5.tmp") == "keep me" ]] || fail "an existing <out>.tmp was overwritten"
cmp -s "$ckpt" "$SCRATCH/linked.h5" || fail "predict wrote through a link at <out>.tmp"
rm "$SCRATCH/e5.h5.tmp" "$SCRATCH/e6.h5.tmp"
# --out in a folder that does not exist: named at set-up (input, exit 2), not an HDF5 failure
# after scoring.
expect_error 2 "--out|$SCRATCH/no_such_dir/e4.h5|does not exist" predict --config "$SCRATCH/job.ini" \
  --checkpoint "$ckpt" --data "$SCRATCH/test.h5" --out "$SCRATCH/no_such_dir/e4.h5"
[[ $last_rc -eq 2 ]] || fail "exit $last_rc for --out in a missing folder, want 2"
# The class count is the checkpoint's: another --num-classes is an error, not ignored; and
# --init-exclude would score with tensors at their random initialisation.
expect_error 2 "--num-classes 5|$ckpt|has 4 classes" predict --config "$SCRATCH/job.ini" \
  --checkpoint "$ckpt" --data "$SCRATCH/test.h5" --out "$SCRATCH/e7.h5" --num-classes 5
timeout 120 "$MPIEXEC" -n 1 "$DTRAIN" predict --config "$SCRATCH/job.ini" --checkpoint "$ckpt" \
  --data "$SCRATCH/test.h5" --out "$SCRATCH/p8.h5" --num-classes 4 >"$SCRATCH/p8.log" 2>&1 ||
  { cat "$SCRATCH/p8.log"; fail "predict --num-classes 4 (the checkpoint's) failed"; }
expect_error 2 "--init-exclude|random initialisation" predict --config "$SCRATCH/job.ini" \
  --init-from "$SCRATCH/m.safetensors" --init-exclude 0. --data "$SCRATCH/test.h5" \
  --out "$SCRATCH/e8.h5"
# --init-from on data with neither labels nor a num_classes attribute: nothing gives the class
# count, and the error says what to give.
"$PY" -c 'import sys, h5py; del h5py.File(sys.argv[1], "r+").attrs["num_classes"]' \
  "$SCRATCH/unlabeled.h5"
expect_error 2 "--data '$SCRATCH/unlabeled.h5'|no dataset \`labels\`|give --num-classes" predict \
  --config "$SCRATCH/job.ini" --init-from "$SCRATCH/m.safetensors" --data "$SCRATCH/unlabeled.h5" \
  --out "$SCRATCH/e9.h5"
[[ ! -e $SCRATCH/e1.h5 && ! -e $SCRATCH/e2.h5 && ! -e $SCRATCH/e7.h5 && ! -e $SCRATCH/e8.h5 &&
   ! -e $SCRATCH/e9.h5 ]] ||
  fail "a refused predict wrote its output"
! ls "$SCRATCH"/*.tmp 2>/dev/null || fail "a temporary file was left behind"

echo "== 4. dtrain train --config = dtrain --config"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --mode sync --num-ps 0 --max-steps 6)
run 2 "$SCRATCH/plain"
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" train "${COMMON[@]}" --run-dir "$SCRATCH/sub" >"$SCRATCH/sub.log" 2>&1 ||
  { cat "$SCRATCH/sub.log"; fail "dtrain train failed"; }
compare "$SCRATCH/plain" "$SCRATCH/sub" 6
echo "PASS"
