#!/usr/bin/env bash
# tests/cli/test_precision.sh — --precision bf16 (mixed precision: bf16 activations, fp32 master
# weights; on the CPU backend oneDNN's bf16 kernels where the CPU has them, else emulated) end to
# end through the dtrain binary:
#  1. the tiny CNN in sync (2 workers) and async (1 ps + 2 workers) mode in both precisions:
#     results.json records the precision, bf16 plans half the activation memory, bf16 learns
#     what fp32 learns (test accuracy within 0.05, and well above chance), and the log says which
#     bf16 kernels ran (how many ops on oneDNN's bf16 kernels, how many emulated: most of them
#     native on a CPU with AVX512_BF16);
#  2. a tiny ResNet-20 in bf16 and NHWC (branches, residual adds, batchnorm, zeropad);
#  3. a stopped-and-resumed bf16 run ends bit-identical to one that never stopped (parameters,
#     optimizer state and checkpoints are fp32 whatever the precision);
#  4. a bad --precision exits 2 on every rank with ONE message naming the option.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 512 --seed 31 --template-seed 5
make_data test 128 --seed 32 --template-seed 5
write_job "$SCRATCH/cnn.ini"
COMMON=(--config "$SCRATCH/cnn.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")

# ge A B: A >= B (floats).
ge() { "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$1" "$2"; }

echo "== 1. the CNN in fp32 and bf16, sync and async"
for mode in sync async; do
  args=(--mode sync --num-ps 0)
  np=2
  [[ $mode == async ]] && { args=(--mode async --num-ps 1); np=3; }
  for p in fp32 bf16; do
    run $np "$SCRATCH/$mode-$p" "${args[@]}" --precision "$p"
    [[ $(json_get "$SCRATCH/$mode-$p/results.json" precision) == "$p" ]] ||
      fail "$mode-$p: results.json does not record --precision $p"
  done
  line=$(grep "^# worker 0 backend: " "$SCRATCH/$mode-bf16.log") ||
    fail "$mode-bf16: the log does not say which bf16 kernels ran"
  [[ $line =~ bf16:\ ([0-9]+)\ ops\ on\ oneDNN.s\ bf16\ kernels,\ ([0-9]+)\ emulated ]] ||
    fail "$mode-bf16: unexpected backend line: $line"
  if grep -qw avx512_bf16 /proc/cpuinfo && [[ -z ${ONEDNN_MAX_CPU_ISA:-} ]]; then
    (( BASH_REMATCH[1] > BASH_REMATCH[2] )) ||
      fail "$mode-bf16: this CPU has AVX512_BF16, yet most ops were emulated: $line"
  fi
  ! grep -q "^# worker 0 backend: " "$SCRATCH/$mode-fp32.log" ||
    fail "$mode-fp32: an fp32 run logs bf16 kernels"
  echo "$mode-bf16: $line"
  f=$(json_get "$SCRATCH/$mode-fp32/results.json" test_accuracy)
  b=$(json_get "$SCRATCH/$mode-bf16/results.json" test_accuracy)
  echo "$mode: test accuracy fp32 $f, bf16 $b"
  ge "$b" 0.6 || fail "$mode bf16 did not learn: test accuracy $b (fp32 $f)"
  ge "$b" "$("$PY" -c "print($f - 0.05)")" || fail "$mode bf16 accuracy $b is far below fp32's $f"
  fa=$(json_get "$SCRATCH/$mode-fp32/results.json" activation_mb)
  ba=$(json_get "$SCRATCH/$mode-bf16/results.json" activation_mb)
  "$PY" -c "import sys; f, b = map(float, sys.argv[1:]); sys.exit(0 if abs(2 * b - f) <= 1e-3 * f else 1)" \
    "$fa" "$ba" || fail "$mode: bf16 plans $ba MiB of activations, fp32 $fa (want half)"
done

echo "== 2. tiny ResNet-20, bf16 and NHWC"
"$PY" "$SRC/data-tools/make_model_jobs.py" --out-dir "$SCRATCH/jobs" --width-div 4 --only resnet20_cifar >/dev/null
COMMON=(--config "$SCRATCH/jobs/resnet20_cifar.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")
run 2 "$SCRATCH/resnet-bf16" --batch-size 16 --epochs 2 --warmup-steps 4 --precision bf16 --layout nhwc
acc=$(json_get "$SCRATCH/resnet-bf16/results.json" test_accuracy)
echo "tiny ResNet-20 bf16 nhwc: test accuracy $acc"
ge "$acc" 0.5 || fail "tiny ResNet-20 in bf16 did not learn: test accuracy $acc"

echo "== 3. bf16 resume is bit-exact"
COMMON=(--config "$SCRATCH/cnn.ini" --train-data "$SCRATCH/train.h5" --test-data "" --mode sync
        --num-ps 0 --precision bf16 --epochs 6)
check_resume 2 bf16

echo "== 4. bad --precision"
expect_error 2 "--precision|fp16" --config "$SCRATCH/cnn.ini" --train-data "$SCRATCH/train.h5" --precision fp16 \
  --run-dir "$SCRATCH/bad"
[[ $last_rc -eq 2 ]] || fail "--precision fp16 exited $last_rc, want 2"
[[ ! -e $SCRATCH/bad ]] || fail "a refused run left its run dir behind"
echo "PASS"
