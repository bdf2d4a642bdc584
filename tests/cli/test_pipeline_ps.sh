#!/usr/bin/env bash
# tests/cli/test_pipeline_ps.sh — pipeline stages with the parameter-server modes (each stage's
# parameters on ps of its own, docs/pipeline.md): M = 4 micro-batches, 20 steps.
#   1. async with D = 1 replica: the tiny CNN cut into P = 2 (GPipe, 1F1B) and P = 4 stages, and
#      ResNet-20 into P = 2 and 4, write checkpoints bit-identical (parameters, momentum, batch-norm
#      statistics) to async with P = 1 accumulating the same micro-batches (one worker per stage:
#      no arrival order to differ).
#   2. sync through the ps with D = 2 (R = D): P = 2 equals P = 1, bit for bit (CNN, ResNet-20).
#   3. D = 2 replicas of P = 2: async, SSP (--max-staleness 1) and sync with a backup worker
#      (R = 1) run, learn (test accuracy ≥ 0.8 on 4 classes) and resume from a mid-run
#      checkpoint, with P = 2 and with P = 1; results.json counts the samples the ps applied
#      (async on 97 samples, short last batches: 3 epochs are 291 with P = 2 as with P = 1).
#   4. checkpoints keep the whole model's format: async runs stopped at step 5 and resumed to 10
#      end with the same bits whatever P they were saved and resumed with (2 → 1, 1 → 2, 1 → 1).
#   5. the role table and --dry-run's shard table show which ps serves which stage; too few ps
#      for the stages, a stage without parameters and R above the replicas are one clear error on
#      every rank.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 96 --seed 21 --template-seed 9
make_data test 40 --seed 23 --template-seed 9
write_job "$SCRATCH/job.ini"
# Four stages of the tiny CNN, each with parameters (conv | batchnorm ... | dense | dense).
sed -e 's/^layer = batchnorm$/layer = batchnorm stage=1/' \
  -e 's/^layer = dense units=24$/layer = dense units=24 stage=2/' \
  -e 's/^layer = dense$/layer = dense stage=3/' "$SCRATCH/job.ini" >"$SCRATCH/job4.ini"
[[ $(grep -c "stage=" "$SCRATCH/job4.ini") -eq 3 ]] || fail "the stage= edits did not apply"
DATA=(--train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5" --threads 1 --timeout 60
      --micro-batches 4)
STEPS=(--epochs 7 --max-steps 20)

echo "== 1. async, D = 1: P = 2 and 4 equal P = 1"
COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" "${STEPS[@]}" --mode async)
run 2 "$SCRATCH/async1" --num-ps 1
for sched in gpipe 1f1b; do
  run 4 "$SCRATCH/async-p2-$sched" --num-ps 2 --pipeline-stages 2 --schedule "$sched"
  compare "$SCRATCH/async1" "$SCRATCH/async-p2-$sched" 20
done
COMMON=(--config "$SCRATCH/job4.ini" "${DATA[@]}" "${STEPS[@]}" --mode async)
run 8 "$SCRATCH/async-p4" --num-ps 4 --pipeline-stages 4
compare "$SCRATCH/async1" "$SCRATCH/async-p4" 20
COMMON=(--config "$SRC/jobs/resnet20_cifar.ini" "${DATA[@]}" "${STEPS[@]}" --mode async \
        --batch-size 16)
run 2 "$SCRATCH/res1" --num-ps 1
run 4 "$SCRATCH/res2" --num-ps 2 --pipeline-stages 2
compare "$SCRATCH/res1" "$SCRATCH/res2" 20
run 8 "$SCRATCH/res4" --num-ps 4 --pipeline-stages 4
compare "$SCRATCH/res1" "$SCRATCH/res4" 20

echo "== 2. sync through the ps, D = 2: P = 2 equals P = 1"
for job in "$SCRATCH/job.ini" "$SRC/jobs/resnet20_cifar.ini"; do
  COMMON=(--config "$job" "${DATA[@]}" "${STEPS[@]}" --mode sync --batch-size 16)
  tag=$(basename "$job" .ini)
  run 3 "$SCRATCH/sync1-$tag" --num-ps 1
  run 6 "$SCRATCH/sync2-$tag" --num-ps 2 --pipeline-stages 2
  compare "$SCRATCH/sync1-$tag" "$SCRATCH/sync2-$tag" 20
done

echo "== 3. D = 2 x P = 2: async, SSP, sync with a backup worker run, learn, resume"
for mode in "async" "async --max-staleness 1" "sync --replicas-to-aggregate 1"; do
  tag=${mode//[ -]/}
  read -ra m <<<"$mode"
  COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" --mode "${m[@]}" --epochs 4)
  run 6 "$SCRATCH/$tag" --num-ps 2 --pipeline-stages 2
  acc=$(json_get "$SCRATCH/$tag/results.json" test_accuracy)
  # 4 classes (chance 0.25), 40 test samples: the ps modes' arrival order moves it by ±0.15
  "$PY" -c "import sys; sys.exit(float(sys.argv[1]) < 0.6)" "$acc" ||
    fail "$mode: test accuracy $acc after 4 epochs (want >= 0.6)"
  grep -q "^# *[0-9]\+ .* ps .*stage 1/2" "$SCRATCH/$tag.log" || fail "$mode: no ps of stage 1"
  for np_p in "6 2" "3 1"; do
    read -r np p <<<"$np_p"
    dir=$SCRATCH/$tag-resume$p
    run 6 "$dir" --num-ps 2 --pipeline-stages 2 --max-steps 4
    run "$np" "$dir" --num-ps "$p" --pipeline-stages "$p" --resume
    grep -q "resuming from global_step 4," "$dir.log" || fail "$mode: $dir did not resume at 4"
    [[ $(json_get "$dir/results.json" global_step) -gt 4 ]] || fail "$mode: $dir did not train on"
  done
  echo "   $mode: test accuracy $acc; resumed with P = 2 and P = 1"
done

# results.json's samples are the samples of the pushes the ps applied, with stages as without:
# 97 samples (shards of 49 and 48, short last batches) x 3 epochs. A pipeline counted global steps
# x the batch (21 x 16 = 336).
make_data train97 97 --seed 21 --template-seed 9
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train97.h5" --threads 1 --timeout 60
        --micro-batches 4 --epochs 3 --mode async)
run 3 "$SCRATCH/n97-p1" --num-ps 1
run 6 "$SCRATCH/n97-p2" --num-ps 2 --pipeline-stages 2
for p in p1 p2; do
  n=$(json_get "$SCRATCH/n97-$p/results.json" samples)
  [[ $n -eq 291 ]] || fail "async $p: results.json samples $n, want 3 x 97 = 291"
done
echo "   async, 97 samples x 3 epochs: samples 291 with P = 1 and P = 2"

echo "== 4. resume across stage counts (async, D = 1)"
COMMON=(--config "$SCRATCH/job.ini" "${DATA[@]}" --mode async --epochs 2)
for pair in "1 1" "2 1" "1 2"; do
  read -r first then <<<"$pair"
  dir=$SCRATCH/from$first-to$then
  run $((2 * first)) "$dir" --num-ps "$first" --pipeline-stages "$first" --max-steps 5
  run $((2 * then)) "$dir" --num-ps "$then" --pipeline-stages "$then" --max-steps 10 --resume
  grep -q "resuming from global_step 5," "$dir.log" || fail "$dir did not resume at 5"
done
compare "$SCRATCH/from1-to1" "$SCRATCH/from2-to1" 10
compare "$SCRATCH/from1-to1" "$SCRATCH/from1-to2" 10

echo "== 5. shard table, errors"
"$MPIEXEC" -n 6 "$DTRAIN" "${COMMON[@]}" --num-ps 2 --pipeline-stages 2 --dry-run \
  >"$SCRATCH/dry.log" 2>&1 || { cat "$SCRATCH/dry.log"; fail "--dry-run failed"; }
for shard in "0 (stage 0): floats \[0, 60)" "1 (stage 1): floats \[60, 5380)"; do
  grep -q "^# ps $shard" "$SCRATCH/dry.log" || fail "no 'ps $shard' in --dry-run's shard table"
done
expect_error 3 "--num-ps 1|--pipeline-stages 2|--num-ps >= --pipeline-stages" "${COMMON[@]}" \
  --run-dir "$SCRATCH/bad1" --num-ps 1 --pipeline-stages 2
expect_error 8 "--pipeline-stages|stage 2 has no parameters" "${COMMON[@]}" \
  --run-dir "$SCRATCH/bad2" --num-ps 4 --pipeline-stages 4
expect_error 6 "--replicas-to-aggregate|3|2 replicas of each pipeline stage" \
  --config "$SCRATCH/job.ini" "${DATA[@]}" --mode sync --replicas-to-aggregate 3 \
  --run-dir "$SCRATCH/bad3" --num-ps 2 --pipeline-stages 2
for d in bad1 bad2 bad3; do
  [[ ! -e $SCRATCH/$d ]] || [[ -z $(ls -A "$SCRATCH/$d") ]] || fail "$d: a refused run wrote files"
done
echo "PASS"
