#!/usr/bin/env bash
# tests/cli/test_bad_labels.sh — labels and pixels that must not reach training (issue 10, item 5),
# through the dtrain binary in sync (2 workers) and async (1 ps + 2 workers) mode: a single label of
# 1,000,000 in a file without a `num_classes` attribute (max label + 1 would leave almost every class
# empty), the same label as a test-set label, labels at or above --num-classes, a `num_classes`
# attribute that contradicts --num-classes, NaN in the test set and +Inf in the training set (found by
# the batch reader). Each must exit 2 within the deadline with exactly ONE `dtrain: error:` line
# naming the file, the label (or pixel) and its sample index, and what was expected. A valid
# --num-classes larger than the labels trains.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data good 64 --seed 1
make_data noattr 64 --seed 1 --no-num-classes
make_data test 32 --seed 2
for kind in label-huge nan-image inf-image; do make_data "$kind" 64 --seed 1 --corrupt "$kind"; done
write_job "$SCRATCH/job.ini"
SYNC=(--config "$SCRATCH/job.ini" --mode sync --num-ps 0)
ASYNC=(--config "$SCRATCH/job.ini" --mode async --num-ps 1)
RUN=(--run-dir "$SCRATCH/run")

# bad NP "WORDS" ARGS...: expect_error (common.sh), and the exit code must be 2 (bad input).
bad() {
  expect_error "$@"
  [[ $last_rc -eq 2 ]] || fail "exit $last_rc (want 2) for: ${*:3}"
}

echo "== one label of 1,000,000 and no class count: refused before anything is built"
bad 2 "label-huge.h5|label 1000000 at sample 32|1000001 classes|have no sample|--num-classes" \
  "${SYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/label-huge.h5"
bad 3 "label-huge.h5|label 1000000 at sample 32|1000001 classes|have no sample|--num-classes" \
  "${ASYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/label-huge.h5"
bad 2 "label-huge.h5|label 1000000 at sample 32|training set has only 4 classes" \
  "${SYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/good.h5" --test-data "$SCRATCH/label-huge.h5"
bad 2 "label-huge.h5|label 1000000 at sample 32|expected < 4 (--num-classes)" \
  "${SYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/label-huge.h5" --num-classes 4

echo "== --num-classes: labels must lie below it; a num_classes attribute must agree"
bad 2 "noattr.h5|label 3 at sample|expected < 3 (--num-classes)" \
  "${SYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/noattr.h5" --num-classes 3
bad 3 "good.h5|attribute \`num_classes\` = 4|--num-classes is 10" \
  "${ASYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/good.h5" --num-classes 10
bad 2 "test.h5|\`num_classes\` = 4|training set has 10 classes" \
  "${SYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/noattr.h5" --num-classes 10 --test-data "$SCRATCH/test.h5"
bad 2 "--num-classes|>= 0" "${SYNC[@]}" "${RUN[@]}" --train-data "$SCRATCH/good.h5" --num-classes -1
bad 2 "--num-classes|--synthetic" "${SYNC[@]}" "${RUN[@]}" --synthetic 1x8x8:4 --num-classes 4
[[ ! -e $SCRATCH/run ]] || fail "a refused start created the run dir"

echo "== non-finite pixels, found by the batch reader (training and evaluation)"
bad 2 "inf-image.h5|images|non-finite value (inf) in sample 32|expected finite" \
  "${SYNC[@]}" --run-dir "$SCRATCH/run-inf" --train-data "$SCRATCH/inf-image.h5"
bad 3 "inf-image.h5|images|non-finite value (inf) in sample 32" \
  "${ASYNC[@]}" --run-dir "$SCRATCH/run-inf-async" --train-data "$SCRATCH/inf-image.h5"
bad 2 "nan-image.h5|images|non-finite value (nan) in sample 32" \
  "${SYNC[@]}" --run-dir "$SCRATCH/run-nan" --train-data "$SCRATCH/good.h5" --test-data "$SCRATCH/nan-image.h5"

echo "== a class count larger than the labels is fine when given"
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${SYNC[@]}" --run-dir "$SCRATCH/ok" --train-data "$SCRATCH/noattr.h5" \
  --num-classes 10 --epochs 1 >"$SCRATCH/ok.log" 2>&1 || { cat "$SCRATCH/ok.log"; fail "--num-classes 10 did not train"; }
grep -q "10 classes" "$SCRATCH/ok.log" || { cat "$SCRATCH/ok.log"; fail "the model was not built for 10 classes"; }
grep -q "^num-classes = 10$" "$SCRATCH/ok/config.ini" || fail "config.ini lacks num-classes = 10"
echo "PASS ($cases cases)"
