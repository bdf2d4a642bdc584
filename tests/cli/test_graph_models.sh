#!/usr/bin/env bash
# tests/cli/test_graph_models.sh — the graph models end to end through the dtrain binary:
#  1. the four standard job files (--dry-run: nothing trained or written) print the parameter
#     counts of torchvision / the paper (and of the PyTorch reference, when PyTorch is installed);
#  2. malformed graphs (unknown input, forward reference / cycle, add of different shapes, concat
#     of different spatial sizes, an unused output) each end with ONE error naming the job-file
#     line, exit 2 on every rank, and leave the run dir unwritten;
#  3. a ResNet-20 of tiny widths (data-tools/make_model_jobs.py --width-div 4) trains in sync mode
#     (2 workers) and in async mode, and a stopped-and-resumed sync run ends bit-identical to one
#     that never stopped; make_model_jobs.py keeps an existing job file without --force, and bad
#     options (an unknown --only name, --width-div 0, an --out-dir that is a file) are one error that
#     writes nothing;
#  4. a graph model on --synthetic data (sync and async).
set -euo pipefail
source "$(dirname "$0")/common.sh"

echo "== 1. parameter counts of the standard job files"
declare -A want=([resnet20_cifar]=269434 [resnet50_imagenet]=25557032 [vgg16_imagenet]=138357544
                 [inception3_imagenet]=23834568)
TORCH_PY=${TORCH_PYTHON:-/opt/torchbench/bin/python}
for job in resnet20_cifar resnet50_imagenet vgg16_imagenet inception3_imagenet; do
  data=()  # ResNet-20 reads Fashion-MNIST files, which a clean checkout does not have: same shape
  [[ $job == resnet20_cifar ]] && data=(--train-data "" --test-data "" --synthetic 1x28x28:10)
  out=$(cd "$SRC" && timeout 120 "$DTRAIN" --config "jobs/$job.ini" "${data[@]}" --dry-run \
    --run-dir "$SCRATCH/dry-$job") ||
    fail "$job: --dry-run failed: $out"
  got=$(grep -oE '[0-9]+ parameters' <<<"$out" | head -1 | cut -d' ' -f1)
  [[ $got == "${want[$job]}" ]] || fail "$job: $got parameters, want ${want[$job]}"
  [[ ! -e $SCRATCH/dry-$job ]] || fail "$job: --dry-run created its run dir"
  ref="(no PyTorch here)"
  if "$TORCH_PY" -c "import torch" 2>/dev/null; then
    ref=$(cd "$SRC" && "$TORCH_PY" tests/benchmarks/pytorch_reference.py --config "jobs/$job.ini" \
      --param-count --batch-size 1 ${data:+--synthetic 1x28x28:10})
    [[ $ref == "$got" ]] || fail "$job: dtrain $got parameters, PyTorch reference $ref"
  fi
  echo "$job: $got parameters (PyTorch reference: $ref)"
done

echo "== 2. malformed graphs"
make_data good 64 --seed 1
bad() {  # bad "WORDS" LAYER-LINES...: the model must be refused with every word in the message
  local words=$1
  shift
  local args=()
  for l in "$@"; do args+=(--layer "$l"); done
  expect_error 3 "$words" --train-data "$SCRATCH/good.h5" --run-dir "$SCRATCH/bad-run" \
    --batch-size 8 --mode sync --num-ps 0 "${args[@]}"
  [[ ! -e $SCRATCH/bad-run ]] || fail "a refused model left $SCRATCH/bad-run behind"
}
bad "layer #2|add input=a,zz|'zz' names no earlier layer" "conv filters=2 name=a" "add input=a,zz" "dense"
bad "layer #1|input 'b' is layer #2|comes later" "conv filters=2 input=b name=a" "relu name=b" "dense"
bad "add input=a,b|one shape" "conv filters=2 name=a" "conv filters=3 input=a name=b" "add input=a,b" "dense"
bad "concat input=a,b|height and width" "conv filters=2 pad=1 name=a" "conv filters=2 input=a name=b" \
  "concat input=a,b" "dense"
bad "layer #2 'relu'|used by no later layer" "conv filters=2 name=a" "relu" "dense input=a"

echo "== 3. tiny ResNet-20: sync and async training, bit-exact sync resume"
"$PY" "$SRC/data-tools/make_model_jobs.py" --out-dir "$SCRATCH/jobs" --width-div 4 --only resnet20_cifar >/dev/null
mj_fails() {  # mj_fails RC NEEDLE ARGS...: make_model_jobs.py must exit RC with NEEDLE, no traceback
  local want=$1 needle=$2 rc=0
  shift 2
  "$PY" "$SRC/data-tools/make_model_jobs.py" "$@" >"$SCRATCH/mj.log" 2>&1 || rc=$?
  [[ $rc -eq $want ]] && grep -qF -- "$needle" "$SCRATCH/mj.log" && ! grep -q Traceback "$SCRATCH/mj.log" ||
    { cat "$SCRATCH/mj.log"; fail "make_model_jobs.py $*: exit $rc, want $want and '$needle'"; }
  echo "-- exit $rc: $(grep -m1 error: "$SCRATCH/mj.log")"
}
before=$(md5sum <"$SCRATCH/jobs/resnet20_cifar.ini")
mj_fails 1 "$SCRATCH/jobs/resnet20_cifar.ini: exists; not overwriting (use --force)" \
  --out-dir "$SCRATCH/jobs" --width-div 2 --only resnet20_cifar vgg16_imagenet
[[ $(md5sum <"$SCRATCH/jobs/resnet20_cifar.ini") == "$before" && ! -e $SCRATCH/jobs/vgg16_imagenet.ini ]] ||
  fail "a refused make_model_jobs.py changed or added job files: $(ls "$SCRATCH/jobs")"
"$PY" "$SRC/data-tools/make_model_jobs.py" --out-dir "$SCRATCH/jobs" --width-div 4 --only resnet20_cifar --force \
  >/dev/null || fail "make_model_jobs.py --force"
mj_fails 2 "argument --only: invalid choice: 'resnet20'" --out-dir "$SCRATCH/jobs-bad" --only resnet20
mj_fails 2 "--width-div must be >= 1" --out-dir "$SCRATCH/jobs-bad" --width-div 0
mj_fails 1 "cannot write $SCRATCH/good.h5: not a directory" --out-dir "$SCRATCH/good.h5" --only resnet20_cifar
mkdir -p "$SCRATCH/jobs-bad/vgg16_imagenet.ini"
mj_fails 1 "cannot write $SCRATCH/jobs-bad/vgg16_imagenet.ini: it is a directory" --out-dir "$SCRATCH/jobs-bad" --width-div 8
[[ $(ls -A "$SCRATCH/jobs-bad") == vgg16_imagenet.ini ]] || fail "refused make_model_jobs.py runs wrote $(ls -A "$SCRATCH/jobs-bad")"
make_data train 256 --seed 21 --template-seed 9
make_data test 64 --seed 22 --template-seed 9
COMMON=(--config "$SCRATCH/jobs/resnet20_cifar.ini" --train-data "$SCRATCH/train.h5"
        --test-data "$SCRATCH/test.h5" --batch-size 16 --warmup-steps 4 --log-every 4 --timeout 60)
run 2 "$SCRATCH/sync" --epochs 2
grep -q "activation memory" "$SCRATCH/sync.log" || fail "no activation memory line in the model table"
# learned DIR MIN: the run's test accuracy is above MIN (4 classes: chance is 0.25).
learned() {
  local acc
  acc=$(json_get "$1/results.json" test_accuracy)
  "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$acc" "$2" ||
    fail "tiny ResNet-20 ($(basename "$1")) did not learn: test accuracy $acc (want > $2)"
}
learned "$SCRATCH/sync" 0.5
run 3 "$SCRATCH/async" --epochs 2 --mode async --num-ps 1 --lr 0.02
# 2 workers × 8 pushes × 2 epochs (sync above: ~0.7, async ~0.67).
[[ $(json_get "$SCRATCH/async/results.json" global_step) == 32 ]] || fail "async: global_step is not 32"
learned "$SCRATCH/async" 0.4
COMMON+=(--epochs 6 --lr-decay-steps 48)  # 8 steps per epoch: step 40 is mid-epoch 5; a cosine of fixed length
check_resume 2 resnet

echo "== 4. graph model on synthetic data"
COMMON=(--config "$SCRATCH/jobs/resnet20_cifar.ini" --train-data "" --test-data "" --synthetic 3x16x16:5
        --synthetic-samples 96 --batch-size 8 --warmup-steps 0 --timeout 60)
run 2 "$SCRATCH/synth-sync" --epochs 2
[[ $(json_get "$SCRATCH/synth-sync/results.json" global_step) == 12 ]] || fail "synthetic sync: wrong global_step"
grep -q "synthetic 3x16x16:5" "$SCRATCH/synth-sync/results.json" || fail "results.json does not name the synthetic set"
run 3 "$SCRATCH/synth-async" --epochs 1 --mode async --num-ps 1
[[ $(json_get "$SCRATCH/synth-async/results.json" global_step) == 12 ]] || fail "synthetic async: wrong global_step"
expect_error 2 "--synthetic|CxHxW:classes" --config "$SCRATCH/jobs/resnet20_cifar.ini" --train-data "" --test-data "" --synthetic 3x16x16 --run-dir "$SCRATCH/x"
echo "PASS"
