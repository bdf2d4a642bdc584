#!/usr/bin/env bash
# tests/cli/test_pipeline.sh — pipeline model parallelism end to end (--pipeline-stages,
# --micro-batches, --schedule; pipeline/, docs/pipeline.md):
#   1. equivalence: the tiny CNN cut into P = 2 and 4 stages, M = 4, GPipe and 1F1B, with D = 1
#      and D = 2 replicas, writes checkpoints bit-identical (parameters, momentum, batch-norm rows)
#      to the same job on D ranks with P = 1 accumulating the same 4 micro-batches; ResNet-20 with
#      P = 2 likewise; P = 2 with one micro-batch (dropout masks as a run without stages); LARS
#      and LAMB with a stage without parameters (P = 3); and a graph whose layer 6 reads the data,
#      which the balanced cut keeps in the first stage.
#   2. checkpoints keep the whole model's format: a run stopped at step 17 with P = 2 resumes with
#      P = 1 (and one with P = 1 resumes with P = 2) and ends bit-identical to a straight run;
#      `dtrain predict` scores a pipelined checkpoint exactly as the unpipelined one.
#   3. the role table shows each worker's stage; every stage's workers are timed (P x D step
#      times, results.json's per-worker arrays); --timeline has the stages' waits.
#   4. bad shapes, each one clear error on every rank: stages not dividing the workers, more
#      stages than layers, M not dividing the per-worker batch, a stage= cut leaving an empty
#      stage, fewer ps than stages (the ps modes: tests/cli/test_pipeline_ps.sh).
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 96 --seed 21 --template-seed 9
make_data test 40 --seed 23 --template-seed 9
write_job "$SCRATCH/job.ini"
DATA=(--train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5" --threads 1 --mode sync
      --num-ps 0)
COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" --micro-batches 4)

echo "== 1. P stages x D replicas equal P = 1 accumulating the same micro-batches"
run 1 "$SCRATCH/ref1" --epochs 2
run 2 "$SCRATCH/ref2" --epochs 2
for sched in gpipe 1f1b; do
  run 2 "$SCRATCH/p2-$sched" --epochs 2 --pipeline-stages 2 --schedule "$sched"
  compare "$SCRATCH/ref1" "$SCRATCH/p2-$sched" 12
  run 4 "$SCRATCH/p4-$sched" --epochs 2 --pipeline-stages 4 --schedule "$sched"
  compare "$SCRATCH/ref1" "$SCRATCH/p4-$sched" 12
  run 4 "$SCRATCH/p2d2-$sched" --epochs 2 --pipeline-stages 2 --schedule "$sched"
  compare "$SCRATCH/ref2" "$SCRATCH/p2d2-$sched" 6
done
# M = 1 (the default): a stage's one micro-batch draws the dropout masks of the step itself, as a
# run without stages does (the stages drew micro-batch 0's, and every P >= 2 diverged from P = 1).
COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}")
run 1 "$SCRATCH/m1-ref" --epochs 1 --max-steps 4
run 2 "$SCRATCH/m1-p2" --epochs 1 --max-steps 4 --pipeline-stages 2
compare "$SCRATCH/m1-ref" "$SCRATCH/m1-p2" 4
COMMON=(--config "$SRC/jobs/resnet20_cifar.ini" "${DATA[@]}" --micro-batches 4 --batch-size 16
        --max-steps 4 --epochs 1)
run 1 "$SCRATCH/res1"
run 2 "$SCRATCH/res2" --pipeline-stages 2
compare "$SCRATCH/res1" "$SCRATCH/res2" 4
COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" --micro-batches 4)
# A stage without parameters (relu, maxpool, flatten) has no optimizer: LARS and LAMB, whose trust
# ratios are per tensor, failed after set-up ("the model has no parameters", run dir written).
sed -e '0,/^layer = relu$/s//layer = relu stage=1/' \
  -e 's/^layer = dense units=24$/& stage=2/' "$SCRATCH/job.ini" >"$SCRATCH/empty.ini"
[[ $(grep -c "stage=" "$SCRATCH/empty.ini") -eq 2 ]] || fail "the stage= edits did not apply"
for opt in lars lamb; do
  COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" --micro-batches 4 --epochs 1 --max-steps 4)
  run 1 "$SCRATCH/$opt-ref" --optimizer "$opt"
  COMMON=(--config "$SCRATCH/empty.ini" "${DATA[@]}" --micro-batches 4 --epochs 1 --max-steps 4)
  run 3 "$SCRATCH/$opt-empty" --optimizer "$opt" --pipeline-stages 3
  grep -q "^#  *1  *3-5  *0 " "$SCRATCH/$opt-empty.log" || fail "$opt: stage 1 is not layers 3-5"
  compare "$SCRATCH/$opt-ref" "$SCRATCH/$opt-empty" 4
done
# The balanced cut keeps a layer that reads the data in the first stage (it chose a cut after the
# first layer, then refused it: "reads the network input but runs after the first stage").
cat >"$SCRATCH/datagraph.ini" <<'INI'
[model]
layer = conv filters=8 kernel=3 pad=1 name=a
layer = relu
layer = conv filters=8 kernel=3 pad=1
layer = relu
layer = conv filters=8 kernel=3 pad=1 name=b
layer = avgpool kernel=1 input=data name=d
layer = concat input=b,d
layer = globalavgpool
layer = flatten
layer = dense
[train]
batch-size = 16
INI
COMMON=(--config "$SCRATCH/datagraph.ini" "${DATA[@]}" --micro-batches 4 --epochs 1 --max-steps 4)
run 1 "$SCRATCH/dg1"
run 2 "$SCRATCH/dg2" --pipeline-stages 2
grep -q "^#  *1  *7-10 " "$SCRATCH/dg2.log" || { cat "$SCRATCH/dg2.log"; fail "datagraph: not cut after layer 6"; }
compare "$SCRATCH/dg1" "$SCRATCH/dg2" 4
COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" --micro-batches 4)

echo "== 2. checkpoints across stage counts; predict"
for pair in "2 1" "1 2"; do
  read -r first then <<<"$pair"
  straight=$SCRATCH/straight-$then resumed=$SCRATCH/from$first-to$then
  [[ -d $straight ]] || run "$then" "$straight" --epochs 2 --max-steps 10 --pipeline-stages "$then"
  run "$first" "$resumed" --epochs 2 --max-steps 5 --pipeline-stages "$first"
  run "$then" "$resumed" --epochs 2 --max-steps 10 --pipeline-stages "$then" --resume
  grep -q "resuming from global_step 5" "$resumed.log" || fail "$resumed did not resume at 5"
  compare "$straight" "$resumed" 10
done
for d in ref1 p2-1f1b; do
  timeout 120 "$DTRAIN" predict --config "$SCRATCH/job.ini" --checkpoint "$SCRATCH/$d/ckpt-0000000012.h5" \
    --data "$SCRATCH/test.h5" --threads 1 --out "$SCRATCH/$d.pred.h5" >"$SCRATCH/$d.pred.log" 2>&1 ||
    { cat "$SCRATCH/$d.pred.log"; fail "predict of the $d checkpoint"; }
done
"$PY" - "$SCRATCH/ref1.pred.h5" "$SCRATCH/p2-1f1b.pred.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
keys = [k for k in a.keys() if isinstance(a[k], h5py.Dataset)]
assert keys, "predict wrote no datasets"
for k in keys:
    assert np.array_equal(a[k][()], b[k][()]), k
print(f"   predict: {', '.join(keys)} identical for the pipelined checkpoint")
PY

echo "== 3. role table, timeline"
grep -q "stage 1/2, replica 0  (chief)" "$SCRATCH/p2-1f1b.log" || fail "no stage column in the role table"
grep -q "stage 0/2, replica 1" "$SCRATCH/p2d2-1f1b.log" || fail "no replica in the role table"
# Every stage's workers are timed (the stage without the chief's too): P x D rows, stage by stage.
grep -q "step time ms p50/p90/max per worker: s0.r0 .* s0.r1 .* s1.r0 .* s1.r1 " \
  "$SCRATCH/p2d2-1f1b.log" || { cat "$SCRATCH/p2d2-1f1b.log"; fail "not every stage's step times"; }
"$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert len(r["step_compute_ms_per_worker"]) == 4, r["step_compute_ms_per_worker"]' \
  "$SCRATCH/p2d2-1f1b/results.json" || fail "results.json: not 4 per-worker compute times"
run 2 "$SCRATCH/tl" --epochs 1 --max-steps 3 --pipeline-stages 2 --timeline
"$PY" - "$SCRATCH/tl/timeline.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
waits = {e["pid"] for e in ev if e.get("name") == "pipeline-wait"}
fwd = {e["pid"] for e in ev if e.get("name") == "forward"}
assert fwd == {0, 1}, fwd
assert waits, "no pipeline-wait spans"
print(f"   timeline: forward on ranks {sorted(fwd)}, pipeline waits on ranks {sorted(waits)}")
PY

echo "== 4. bad shapes"
expect_error 3 "--pipeline-stages 2|3 workers|multiple of the stages" "${COMMON[@]}" \
  --run-dir "$SCRATCH/bad1" --pipeline-stages 2
sed '/^layer = /d; /^\[model\]$/a layer = dense' "$SCRATCH/job.ini" >"$SCRATCH/one.ini"
expect_error 2 "--pipeline-stages 2|only 1 layers" --config "$SCRATCH/one.ini" "${DATA[@]}" \
  --run-dir "$SCRATCH/bad2" --pipeline-stages 2
expect_error 2 "--micro-batches|does not divide" --config "$SCRATCH/job.ini" "${DATA[@]}" \
  --run-dir "$SCRATCH/bad3" --pipeline-stages 2 --micro-batches 3
sed 's/^layer = dense units=24$/layer = dense units=24 stage=2/' "$SCRATCH/job.ini" >"$SCRATCH/gap.ini"
grep -q "stage=2" "$SCRATCH/gap.ini" || fail "the stage= edit did not apply"
expect_error 2 "stage=2|stage 1 would be empty" --config "$SCRATCH/gap.ini" "${DATA[@]}" \
  --run-dir "$SCRATCH/bad4" --pipeline-stages 2
expect_error 3 "--pipeline-stages 2|--num-ps 1|--num-ps >= --pipeline-stages" \
  --config "$SCRATCH/job.ini" --threads 1 --train-data "$SCRATCH/train.h5" \
  --run-dir "$SCRATCH/bad5" --pipeline-stages 2 --mode async --num-ps 1
# stage=1 on the first layer left stage 0 empty (a crash, --dry-run too); with one stage the keys
# that cut two were ignored.
sed 's/^layer = conv filters=6 kernel=3 pad=1$/& stage=1/' "$SCRATCH/job.ini" >"$SCRATCH/first.ini"
grep -q "pad=1 stage=1" "$SCRATCH/first.ini" || fail "the first-layer stage= edit did not apply"
expect_error 2 "stage=1|the first layer starts stage 0" --config "$SCRATCH/first.ini" \
  "${DATA[@]}" --run-dir "$SCRATCH/bad6" --pipeline-stages 2 --dry-run
sed 's/^layer = dense units=24$/layer = dense units=24 stage=1/' "$SCRATCH/job.ini" >"$SCRATCH/cut.ini"
expect_error 2 "stage= keys cut 2 pipeline stages|--pipeline-stages is 1" \
  --config "$SCRATCH/cut.ini" "${DATA[@]}" --run-dir "$SCRATCH/bad7"
# --micro-batches splits the per-worker batch that --global-batch-size gives, not --batch-size:
# 16 over 2 workers is 8, which 3 does not divide (it passed --dry-run, then failed inside the
# run) and 4 does (it was refused because 4 does not divide --batch-size 10).
expect_error 2 "--micro-batches: 3 does not divide the per-worker batch 8|--global-batch-size 16" \
  --config "$SCRATCH/job.ini" "${DATA[@]}" --run-dir "$SCRATCH/bad8" --batch-size 12 \
  --global-batch-size 16 --micro-batches 3
"$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" "${DATA[@]}" --run-dir "$SCRATCH/mb" \
  --batch-size 10 --global-batch-size 16 --micro-batches 4 --dry-run >"$SCRATCH/mb.log" 2>&1 ||
  { cat "$SCRATCH/mb.log"; fail "--micro-batches 4 of a per-worker batch of 8 was refused"; }
# Resumed in another shape, the refusal counts replicas, not workers (4 ranks are 2 replicas).
expect_error 4 "1 pipeline replica(s) × batch 16|2 pipeline replica(s) × batch 16|Resume with 1 \
pipeline replica(s)" --config "$SCRATCH/job.ini" "${DATA[@]}" --micro-batches 4 --epochs 3 \
  --run-dir "$SCRATCH/p2-gpipe" --pipeline-stages 2 --resume
for d in bad1 bad2 bad3 bad4 bad5 bad6 bad7 bad8; do
  [[ ! -e $SCRATCH/$d ]] || [[ -z $(ls -A "$SCRATCH/$d") ]] || fail "$d: a refused run wrote files"
done
echo "PASS"
