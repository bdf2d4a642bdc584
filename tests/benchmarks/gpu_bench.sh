#!/usr/bin/env bash
# Benchmark on a GPU: dtrain against PyTorch eager on the same card, in the same call, through
# tests/benchmarks/bench_vs_pytorch.sh with DEVICE=cuda (one worker, sync; samples/s of each over
# the timed steps, warm-up excluded, and the ratio dtrain / PyTorch). Rows: the Fashion-MNIST CNN
# at batch 64 and 512; ResNet-50 on synthetic ImageNet-shaped data at batch 128.
# Usage: bash tests/benchmarks/gpu_bench.sh          (on the lent machine: tests/gpu/device.sh bench)
# Env: ROWS (default "cnn64 cnn512 resnet50"), STEPS / WARMUP as bench_vs_pytorch.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
for row in ${ROWS:-cnn64 cnn512 resnet50}; do
  case $row in
    cnn64) BATCH=64 STEPS=${STEPS:-600} WARMUP=${WARMUP:-50} DEVICE=cuda \
             bash tests/benchmarks/bench_vs_pytorch.sh jobs/fashion_mnist_cnn.ini ;;
    cnn512) BATCH=512 STEPS=${STEPS:-300} WARMUP=${WARMUP:-30} DEVICE=cuda \
             bash tests/benchmarks/bench_vs_pytorch.sh jobs/fashion_mnist_cnn.ini ;;
    resnet50) BATCH=128 STEPS=${STEPS:-40} WARMUP=${WARMUP:-10} DEVICE=cuda \
             bash tests/benchmarks/bench_vs_pytorch.sh jobs/resnet50_imagenet.ini ;;
    *) echo "gpu_bench: unknown row $row" >&2; exit 2 ;;
  esac
done
